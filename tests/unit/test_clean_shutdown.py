"""A clean shutdown (storage/shutdown.py) writes what the next start needs, in a pass, not per log.

Real files in a temporary log dir; the only instrument is a count of the fsyncs made through the
file-system port (wrapping the real call) and of the file-system syncs.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from test_storage_support import idempotent_batch, make_batch

from strom._util import filesystem
from strom.storage import producer_snapshot
from strom.storage.checkpoint import TopicPartition, read_offsets
from strom.storage.config import LogConfig
from strom.storage.log_manager import CLEAN_SHUTDOWN_FILE, LogManager

IDLE = 40  # partitions nobody writes to


def clock() -> int:
    return 1_000_000


def _files(log_dir: Path) -> dict[str, tuple[int, int, int]]:
    """Every file under the partition dirs: (inode, size, mtime) by path."""
    found = {}
    for part in log_dir.iterdir():
        if part.is_dir():
            for f in part.iterdir():
                st = f.stat()
                found[str(f)] = (st.st_ino, st.st_size, st.st_mtime_ns)
    return found


@pytest.fixture
def counted(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    counts = {"fsync": 0, "syncfs": 0}
    real_fsync, real_sync = filesystem.fsync, filesystem.sync_file_systems

    def fsync(fd: int) -> None:
        counts["fsync"] += 1
        real_fsync(fd)

    def sync(paths: list[str]) -> int:
        counts["syncfs"] += 1
        return real_sync(paths)

    monkeypatch.setattr(filesystem, "fsync", fsync)
    monkeypatch.setattr(filesystem, "sync_file_systems", sync)
    return counts


def _start(log_dir: Path) -> LogManager:
    return LogManager([str(log_dir)], LogConfig(segment_bytes=2_000), clock)


def test_shutdown_makes_restart_recover_and_replay_nothing(tmp_path: Path, counted: dict[str, int]) -> None:
    manager = _start(tmp_path)
    for p in range(IDLE):
        manager.get_or_create_log("idle", p)
    idem = manager.get_or_create_log("idem", 0)
    for seq in range(0, 60, 2):  # rolls at 2,000 bytes: a roll snapshot, then more in the active segment
        idem.append_as_leader(idempotent_batch(7, 0, seq, count=2, timestamp=1_000_000), 0)
    plain = manager.get_or_create_log("plain", 0)
    plain.append_as_leader(make_batch(count=1, timestamp=1_000_000), 0)
    ends = {"idem": idem.log_end_offset, "plain": 1}
    assert idem.recovery_point < ends["idem"] and plain.recovery_point == 0  # unflushed appends

    counted["fsync"] = 0
    manager.shutdown()
    # Checkpoints (3 files + their dir) and the marker (file + dir): no fsync per partition.
    assert counted["fsync"] <= 8 and counted["syncfs"] == 2
    assert (tmp_path / CLEAN_SHUTDOWN_FILE).exists()
    points = read_offsets(str(tmp_path / "recovery-point-offset-checkpoint"))
    assert points[TopicPartition("idem", 0)] == ends["idem"]
    assert points[TopicPartition("plain", 0)] == 1
    assert producer_snapshot.list_offsets(idem.dir)[-1] == ends["idem"]
    # Nothing to replay beyond what the start-up tail scan reads: no file created for it.
    assert producer_snapshot.list_offsets(plain.dir) == []

    again = _start(tmp_path)
    for tp in again.all_logs():
        reopened = again.get_log(*tp)
        assert reopened is not None and reopened.recovered_segments == 0
    reopened_idem = again.get_log("idem", 0)
    assert reopened_idem is not None and reopened_idem.replayed_batch_headers == 0
    assert reopened_idem.log_end_offset == ends["idem"]
    dup = reopened_idem.append_as_leader(idempotent_batch(7, 0, 58, count=2, timestamp=1_000_000), 0)
    assert dup.duplicate  # the producer state came back from the shutdown's snapshot
    reopened_plain = again.get_log("plain", 0)
    assert reopened_plain is not None and reopened_plain.log_end_offset == 1
    stored, sent = reopened_plain.read(0, 1_000), make_batch(count=1, timestamp=1_000_000)
    assert len(stored) == len(sent) and stored[16:] == sent[16:]  # all but the leader epoch stamped
    again.shutdown()


def test_shutdown_after_an_idle_run_writes_no_partition_file(tmp_path: Path, counted: dict[str, int]) -> None:
    manager = _start(tmp_path)
    for p in range(IDLE):
        lg = manager.get_or_create_log("t", p)
        lg.append_as_leader(idempotent_batch(p, 0, 0, count=3, timestamp=1_000_000), 0)
    manager.shutdown()
    before = _files(tmp_path)

    idle = _start(tmp_path)
    counted["fsync"] = 0
    idle.shutdown()
    assert _files(tmp_path) == before  # no file of any partition written, created or replaced
    assert counted["fsync"] <= 8
    third = _start(tmp_path)
    for p in range(IDLE):
        lg = third.get_log("t", p)
        assert lg is not None and lg.log_end_offset == 3
        assert (lg.recovered_segments, lg.replayed_batch_headers) == (0, 0)


def test_unclean_start_recovers_only_what_lies_past_the_recovery_point(tmp_path: Path) -> None:
    """No shutdown at all (as after kill -9): the segment holding the recovery point is recovered only
    if it holds bytes past it: a later append or a torn tail."""
    manager = _start(tmp_path)
    for p in range(3):
        manager.get_or_create_log("t", p).append_as_leader(make_batch(count=2, timestamp=1_000_000), 0)
    manager.shutdown()
    manager = _start(tmp_path)  # each log's recovery point is now its end, 2
    written = manager.get_log("t", 1)
    assert written is not None
    written.append_as_leader(make_batch(count=1, timestamp=1_000_000), 0)  # not flushed
    manager.checkpoint_all()
    torn = manager.get_log("t", 2)
    assert torn is not None
    with open(torn.active_segment.log_path, "ab") as f:
        f.write(b"\x00\x00\x00\x00\x00\x00\x00\x07\x00\x00")  # a header cut short
    for lg in manager.all_logs().values():
        lg.release_files()
    manager._unlock()  # the process "dies": no shutdown, no marker

    again = _start(tmp_path)
    recovered = {p: lg.recovered_segments for p in range(3) if (lg := again.get_log("t", p)) is not None}
    assert recovered == {0: 0, 1: 1, 2: 1}
    ends = {p: lg.log_end_offset for p in range(3) if (lg := again.get_log("t", p)) is not None}
    assert ends == {0: 2, 1: 3, 2: 2}
    again.shutdown()
