"""A write that fails (ENOSPC) leaves the log as it was; reads go on; the next append succeeds.

Failures are injected at each file operation of an append (the batch write, the flush.messages
fsync, the leader-epoch checkpoint, a roll's new segment), then a real full disk is made with a
small tmpfs mounted for the test.
"""

from __future__ import annotations

import errno
import os
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from test_storage_support import idempotent_batch, make_batch
from tests.prerequisites import require

from strom._util import filesystem
from strom.protocol.errors import ErrorCode, KafkaError
from strom.protocol.records.batch import crc_ok, iter_headers
from strom.storage import checkpoint
from strom.storage.config import LogConfig
from strom.storage.log import PartitionLog
from strom.storage.log_manager import CLEAN_SHUTDOWN_FILE, LogManager


def open_log(path: Path, **config: Any) -> PartitionLog:
    return PartitionLog(str(path / "t-0"), LogConfig(**config), lambda: 1_000_000)


def enospc(*_: object, **__: object) -> Any:
    raise OSError(errno.ENOSPC, "No space left on device")


def assert_storage_error(append: Callable[[], object]) -> None:
    with pytest.raises(KafkaError) as err:
        append()
    assert err.value.code is ErrorCode.KAFKA_STORAGE_ERROR


def state(log: PartitionLog) -> tuple[object, ...]:
    """What a failed append must leave unchanged, in memory and on disk.

    (A rollback may keep a time-index entry naming an offset below the rollback point: still true.)
    """
    seg = log.active_segment
    assert all(seg.base_offset + o < log.log_end_offset for o in seg.time_index.values)
    return (
        log.log_end_offset,
        len(log.segments),
        seg.size,
        os.path.getsize(seg.log_path),
        list(seg.offset_index.keys),
        seg.max_timestamp,
        {pid: e.last_seq for pid, e in log.producer_state.producers.items()},
        log.read(0, 1 << 20),
    )


def assert_intact(path: Path, expected_offsets: list[tuple[int, int]]) -> None:
    """Reopen as after a crash (recovery of every segment): nothing to cut, every batch valid."""
    reopened = open_log(path)
    data = reopened.read(0, 1 << 24)
    assert reopened.truncated_bytes == 0
    assert [(h.base_offset, h.last_offset) for _, h in iter_headers(data)] == expected_offsets
    assert all(crc_ok(data, p, h) for p, h in iter_headers(data))


def test_a_partial_batch_write_is_cut_off(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    log = open_log(tmp_path)
    log.append_as_leader(idempotent_batch(7, 0, 0, count=3), 0)
    before = state(log)
    real_pwrite = os.pwrite

    def half_then_full(fd: int, data: Any, offset: int) -> int:
        if len(data) > 20:
            return real_pwrite(fd, bytes(data)[: len(data) // 2], offset)  # part of it lands...
        raise OSError(errno.ENOSPC, "No space left on device")  # ...then the disk is full

    monkeypatch.setattr(filesystem, "pwrite", half_then_full)
    assert_storage_error(lambda: log.append_as_leader(idempotent_batch(7, 0, 3, count=5), 0))
    assert state(log) == before
    monkeypatch.setattr(filesystem, "pwrite", real_pwrite)  # space returns
    info = log.append_as_leader(idempotent_batch(7, 0, 3, count=5), 0)
    assert (info.base_offset, info.duplicate) == (3, False)  # the failed batch was never recorded
    log.close()
    assert_intact(tmp_path, [(0, 2), (3, 7)])


def test_a_failed_flush_messages_fsync_rolls_the_append_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = open_log(tmp_path, flush_messages=1, index_interval_bytes=0)
    log.append_as_leader(make_batch(count=2), 0)
    before = state(log)
    monkeypatch.setattr(filesystem, "fsync", enospc)
    assert_storage_error(lambda: log.append_as_leader(make_batch(count=4), 0))
    assert state(log) == before
    monkeypatch.undo()
    assert log.append_as_leader(make_batch(count=4), 0).base_offset == 2
    assert log.recovery_point == 6
    assert_intact(tmp_path, [(0, 1), (2, 5)])


def test_a_failed_leader_epoch_checkpoint_rolls_the_append_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = open_log(tmp_path)
    log.append_as_leader(make_batch(count=2), 0)
    before = state(log)
    monkeypatch.setattr(checkpoint, "write_atomically", enospc)
    assert_storage_error(lambda: log.append_as_leader(make_batch(count=3), 1))  # a new leader epoch
    assert state(log) == before
    monkeypatch.undo()
    assert log.append_as_leader(make_batch(count=3), 1).base_offset == 2
    assert log.leader_epoch_end_offset(0) == (0, 2)
    log.close()
    assert_intact(tmp_path, [(0, 1), (2, 4)])


def test_a_roll_that_cannot_create_the_new_segment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    log = open_log(tmp_path, segment_bytes=300)
    log.append_as_leader(make_batch(count=8), 0)
    before = state(log)
    real_open = os.open

    def no_new_files(path: str, flags: int, *args: Any) -> int:
        if flags & os.O_CREAT and not os.path.exists(path):
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_open(path, flags, *args)

    monkeypatch.setattr(filesystem, "open", no_new_files)
    assert_storage_error(lambda: log.append_as_leader(make_batch(count=8), 0))
    monkeypatch.undo()
    assert state(log)[0] == before[0] and log.read(0, 1 << 20) == before[-1]
    assert log.append_as_leader(make_batch(count=8), 0).base_offset == 8
    assert [s.base_offset for s in log.segments] == [0, 8]
    log.close()
    assert_intact(tmp_path, [(0, 7), (8, 15)])


def test_a_failed_index_flush_leaves_only_whole_entries(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = open_log(tmp_path, index_interval_bytes=0)
    for _ in range(4):
        log.append_as_leader(make_batch(count=1), 0)
    index = log.active_segment.offset_index
    assert index.entries == 3 and not os.path.exists(index.path)  # buffered until a flush

    real_write = os.write

    def half_written(fd: int, data: Any) -> int:  # part of the entries land, then the disk is full
        real_write(fd, bytes(data)[: len(data) // 2 + 1])
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(filesystem, "write", half_written)
    with pytest.raises(OSError, match="No space"):
        index.flush()
    assert os.path.getsize(index.path) == 0  # the partial entries were cut off again
    monkeypatch.undo()
    index.flush()  # space returns: the buffered entries are written whole
    assert os.path.getsize(index.path) == 3 * index.ENTRY.size
    log.close()
    assert_intact(tmp_path, [(0, 0), (1, 1), (2, 2), (3, 3)])


# -- a real full disk ----------------------------------------------------------------------------------


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    require(os.geteuid() == 0, "root, to mount a small tmpfs")
    mount_point = tmp_path / "disk"
    mount_point.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=512k", "tmpfs", str(mount_point)], check=True)
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], check=True)


def test_a_full_tmpfs(small_disk: Path) -> None:
    log = open_log(small_disk, segment_bytes=64 * 1024, index_interval_bytes=512)
    filler = small_disk / "filler"
    filler.write_bytes(b"\x00" * (300 * 1024))
    acknowledged: list[tuple[int, int]] = []
    refused = 0
    for _ in range(400):
        try:
            info = log.append_as_leader(make_batch(count=8, value_size=200), 0)
        except KafkaError as exc:
            assert exc.code is ErrorCode.KAFKA_STORAGE_ERROR
            refused += 1
            if refused == 5:
                break
            continue
        acknowledged.append((info.base_offset, info.last_offset))
    assert refused == 5 and len(acknowledged) > 10
    data = log.read(0, 1 << 24)  # reads keep working on the full disk
    assert [(h.base_offset, h.last_offset) for _, h in iter_headers(data)] == acknowledged
    filler.unlink()  # space returns: the same log takes writes again, no reopen
    for _ in range(5):
        info = log.append_as_leader(make_batch(count=8, value_size=200), 0)
        acknowledged.append((info.base_offset, info.last_offset))
    assert acknowledged[-1][1] == 8 * len(acknowledged) - 1  # contiguous offsets, no gap
    log.close()
    assert_intact(small_disk, acknowledged)


def test_shutdown_on_a_full_disk_leaves_no_clean_shutdown_marker(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    manager = LogManager([str(tmp_path)], LogConfig(), lambda: 1_000_000)
    manager.get_or_create_log("t", 0).append_as_leader(make_batch(count=3), 0)
    monkeypatch.setattr(filesystem, "fsync", enospc)
    manager.shutdown()  # logs the failure instead of raising: the other logs still close
    monkeypatch.undo()
    assert not (tmp_path / CLEAN_SHUTDOWN_FILE).exists()
    reopened = LogManager([str(tmp_path)], LogConfig(), lambda: 1_000_000)
    plog = reopened.get_log("t", 0)
    assert plog is not None and plog.recovered_segments == 1 and plog.log_end_offset == 3
    reopened.shutdown()
