"""A replica's move between log dirs (storage/log_move.py, LogManager.finish_move): the copy that
catches up with a log changing under it, the swap, and what a crash at each step leaves."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from test_storage_support import idempotent_batch

from strom._util import filesystem
from strom.sim.disk import SimFileSystem
from strom.storage.checkpoint import RECOVERY_POINT_CHECKPOINT, TopicPartition
from strom.storage.config import LogConfig
from strom.storage.log_manager import LogManager
from strom.storage.log_move import (
    APPEND,
    COPY,
    FUTURE_SUFFIX,
    MOVED_SUFFIX,
    SKIP,
    Copied,
    copy_changed,
    fsync_copy,
    future_dir,
    plan_copy,
    settle_moves,
)


def clock() -> int:
    return 1_000_000


def test_a_moved_log_keeps_every_record_and_its_producer_state(tmp_path: Path) -> None:
    dirs = [str(tmp_path / "a"), str(tmp_path / "b")]
    manager = LogManager(dirs, LogConfig(segment_bytes=2_000), clock)
    tp = TopicPartition("orders", 0)
    plog = manager.get_or_create_log(*tp)
    for seq in range(0, 60, 3):
        plog.append_as_leader(idempotent_batch(7, 0, seq, count=3, value_size=40), 0)
    plog.high_watermark = plog.log_end_offset
    before = plog.read(0, 10_000_000)
    source = manager.log_dir_of(tp)
    dest = dirs[1] if source == dirs[0] else dirs[0]
    future = future_dir(dest, os.path.basename(plog.dir))
    copied: Copied = {}
    copy_changed(plog.dir, future, copied)  # the background round
    fsync_copy(future)
    for seq in range(60, 75, 3):  # written after it: caught up in the swap
        plog.append_as_leader(idempotent_batch(7, 0, seq, count=3, value_size=40), 0)
    plog.high_watermark = plog.log_end_offset
    expected = plog.read(0, 10_000_000)
    assert len(plog.segments) > 2 and expected != before

    moved, error, doomed = manager.finish_move(tp, future, copied)
    assert error is None and doomed is not None and os.path.dirname(doomed) == source
    shutil.rmtree(doomed)
    assert manager.log_dir_of(tp) == dest and manager.get_log(*tp) is moved
    assert os.path.dirname(moved.dir) == dest
    assert [n for n in os.listdir(source) if n.startswith("orders")] == []  # the source is gone
    assert moved.read(0, 10_000_000) == expected
    assert (moved.log_end_offset, moved.high_watermark) == (75, 75)
    assert moved.producer_state.producers[7].last_seq == 74
    moved.append_as_leader(idempotent_batch(7, 0, 75, count=1), 0)  # the next sequence is accepted
    manager.shutdown()

    again = LogManager(dirs, LogConfig(segment_bytes=2_000), clock)
    reloaded = again.get_log(*tp)
    assert reloaded is not None and os.path.dirname(reloaded.dir) == dest
    assert reloaded.log_end_offset == 76
    again.shutdown()


def test_plan_copy_trusts_an_identity_only_when_older_than_the_clock_tick() -> None:
    second = 1_000_000_000
    old = (7, 100, 5 * second, 5 * second)
    assert plan_copy("0.index", old, None) == COPY
    assert plan_copy("0.index", old, (old, 10 * second)) == SKIP
    # Changed within the clock tick before its copy: a later write might not have moved the times.
    assert plan_copy("0.index", old, (old, 6 * second)) == COPY
    assert plan_copy("0.log", old, (old, 6 * second)) == APPEND
    grown = (7, 150, 11 * second, 11 * second)
    assert plan_copy("0.log", grown, (old, 10 * second)) == APPEND
    assert plan_copy("0.index", grown, (old, 10 * second)) == COPY
    # Another inode under the name (a compaction swap, a reused inode), or a shorter log: whole.
    assert plan_copy("0.log", (8, 150, 5 * second, 11 * second), (old, 10 * second)) == COPY
    assert plan_copy("0.log", (7, 90, 11 * second, 11 * second), (old, 10 * second)) == COPY


def test_copy_changed_copies_again_only_what_changed(tmp_path: Path) -> None:
    source, target = tmp_path / "src", tmp_path / "dst"
    source.mkdir()
    (source / "00000000000000000000.log").write_bytes(b"x" * 100)
    (source / "00000000000000000000.index").write_bytes(b"i" * 10)
    copied: Copied = {}
    assert copy_changed(str(source), str(target), copied) == 110
    # Just written: within the clock tick, so copied again (the log's tail only, after its prefix
    # proved the same: nothing).
    assert copy_changed(str(source), str(target), copied) == 10
    age = {name: (ident, at + 10**10) for name, (ident, at) in copied.items()}
    copied.update(age)  # as if copied long after their last change
    (source / "00000000000000000100.log").write_bytes(b"z" * 5)
    assert copy_changed(str(source), str(target), copied) == 5  # only the new file
    with open(source / "00000000000000000000.log", "ab") as appended:
        appended.write(b"x" * 20)
    # The tail appended; the new file, just written, proved unchanged by its bytes (nothing appended).
    assert copy_changed(str(source), str(target), copied) == 20
    os.unlink(source / "00000000000000000100.log")
    # The final pass drops what the source no longer has.
    copy_changed(str(source), str(target), copied, final=True)
    assert sorted(os.listdir(target)) == ["00000000000000000000.index", "00000000000000000000.log"]
    assert (target / "00000000000000000000.log").read_bytes() == b"x" * 120


def test_a_rewritten_log_tail_is_copied_whole(tmp_path: Path) -> None:
    """A truncation followed by appends past the old end: the copied prefix no longer matches."""
    source, target = tmp_path / "src", tmp_path / "dst"
    source.mkdir()
    segment = source / "00000000000000000000.log"
    segment.write_bytes(b"a" * 1000)
    copied: Copied = {}
    copy_changed(str(source), str(target), copied)
    with open(segment, "r+b") as rewritten:  # same inode
        rewritten.truncate(400)
        rewritten.seek(400)
        rewritten.write(b"b" * 900)
    assert copy_changed(str(source), str(target), copied) == 1300
    assert (target / segment.name).read_bytes() == segment.read_bytes()


def _moved_fixture(tmp_path: Path) -> tuple[LogManager, TopicPartition, list[str], str, str, Copied]:
    dirs = [str(tmp_path / "a"), str(tmp_path / "b")]
    manager = LogManager(dirs, LogConfig(segment_bytes=2_000), clock)
    tp = TopicPartition("orders", 0)
    plog = manager.get_or_create_log(*tp)
    for seq in range(0, 30, 3):
        plog.append_as_leader(idempotent_batch(7, 0, seq, count=3, value_size=40), 0)
    plog.high_watermark = plog.log_end_offset
    source = str(manager.log_dir_of(tp))
    dest = dirs[1] if source == dirs[0] else dirs[0]
    future = future_dir(dest, os.path.basename(plog.dir))
    copied: Copied = {}
    copy_changed(plog.dir, future, copied)
    fsync_copy(future)
    return manager, tp, dirs, source, future, copied


def test_a_failed_rename_leaves_the_partition_on_its_source(tmp_path: Path) -> None:
    """The copy's first rename refused (its ``-moved`` name taken by a non-empty dir): the source log
    is reopened and serves, the copy is gone, and only the source remains after a restart."""
    manager, tp, dirs, source, future, copied = _moved_fixture(tmp_path)
    expected = manager.get_log(*tp).read(0, 10_000_000)  # type: ignore[union-attr]
    blocker = future[: -len(FUTURE_SUFFIX)] + MOVED_SUFFIX
    os.mkdir(blocker)
    open(os.path.join(blocker, "x"), "wb").close()
    back, error, doomed = manager.finish_move(tp, future, copied)
    assert error is not None and doomed is None
    assert manager.get_log(*tp) is back and manager.log_dir_of(tp) == source
    assert os.path.dirname(back.dir) == source
    assert back.read(0, 10_000_000) == expected
    back.append_as_leader(idempotent_batch(7, 0, 30, count=1), 0)  # it serves again
    assert not os.path.exists(future) and not os.path.exists(blocker)  # no copy left behind
    manager.shutdown()
    again = LogManager(dirs, LogConfig(segment_bytes=2_000), clock)
    reloaded = again.get_log(*tp)
    assert reloaded is not None and os.path.dirname(reloaded.dir) == source
    assert reloaded.log_end_offset == 31
    again.shutdown()


def test_a_failed_checkpoint_after_the_swap_keeps_the_move(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The checkpoints written after the swap fail (a directory in the way of one): the partition is
    on its moved log all the same; the next checkpoint writes it."""
    manager, tp, _dirs, source, future, copied = _moved_fixture(tmp_path)
    dest = os.path.dirname(future)
    in_the_way = os.path.join(source, RECOVERY_POINT_CHECKPOINT)
    if os.path.exists(in_the_way):
        os.unlink(in_the_way)
    os.mkdir(in_the_way)
    open(os.path.join(in_the_way, "x"), "wb").close()
    moved, error, doomed = manager.finish_move(tp, future, copied)
    assert error is None and doomed is not None
    assert "writing checkpoints after moving orders-0 failed" in caplog.text
    assert manager.get_log(*tp) is moved and manager.log_dir_of(tp) == dest
    assert os.path.dirname(moved.dir) == dest and moved.log_end_offset == 30
    shutil.rmtree(in_the_way)
    shutil.rmtree(doomed)
    manager.shutdown()


def test_a_failed_last_rename_goes_back_to_the_source(tmp_path: Path) -> None:
    """The destination dir refuses the copy's last rename after the source went aside: the source is
    renamed back and reopened."""
    manager, tp, _dirs, source, future, copied = _moved_fixture(tmp_path)
    dest = os.path.dirname(future)
    name = os.path.basename(manager.get_log(*tp).dir)  # type: ignore[union-attr]
    os.mkdir(os.path.join(dest, name))  # the swapped-in name taken by a non-empty dir: rename fails
    open(os.path.join(dest, name, "x"), "wb").close()
    back, error, doomed = manager.finish_move(tp, future, copied)
    assert error is not None and doomed is None
    assert os.path.dirname(back.dir) == source and manager.log_dir_of(tp) == source
    assert [n for n in os.listdir(source) if n.startswith("orders")] == [name]
    assert back.log_end_offset == 30
    shutil.rmtree(os.path.join(dest, name))
    manager.shutdown()


def test_a_crash_leaves_exactly_one_replica(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    for d in (a, b):
        d.mkdir()
    # Unfinished copy: removed, the source stays.
    (a / "t-0").mkdir()
    (b / f"t-0.{'1' * 32}{FUTURE_SUFFIX}").mkdir()
    # Complete copy, source still there (crash before the source was renamed): the copy goes.
    (a / "t-1").mkdir()
    (b / f"t-1.{'2' * 32}{MOVED_SUFFIX}").mkdir()
    # Complete copy, source already renamed aside: the copy becomes the replica.
    (a / f"t-2.{'3' * 32}-delete").mkdir()
    (b / f"t-2.{'4' * 32}{MOVED_SUFFIX}").mkdir()
    (b / f"t-2.{'4' * 32}{MOVED_SUFFIX}" / "00000000000000000000.log").write_bytes(b"kept")
    settle_moves([str(a), str(b)])
    assert sorted(os.listdir(a)) == ["t-0", "t-1", f"t-2.{'3' * 32}-delete"]
    assert sorted(os.listdir(b)) == ["t-2"]
    assert (b / "t-2" / "00000000000000000000.log").read_bytes() == b"kept"


def test_a_preferred_dir_takes_a_new_partition(tmp_path: Path) -> None:
    dirs = [str(tmp_path / "a"), str(tmp_path / "b")]
    manager = LogManager(dirs, LogConfig(), clock)
    manager.get_or_create_log("busy", 0)  # now the other dir is the least loaded one
    loaded = manager.log_dir_of(TopicPartition("busy", 0))
    manager.preferred_dirs[TopicPartition("new", 0)] = str(loaded)
    created = manager.get_or_create_log("new", 0)
    assert os.path.dirname(created.dir) == loaded
    manager.shutdown()


def test_the_copy_writes_through_the_file_system_port(tmp_path: Path) -> None:
    """The simulated disk sees the copy's pages as unsynced until `fsync_copy`, as it sees a segment's."""
    source, target = tmp_path / "src", tmp_path / "dst"
    source.mkdir()
    (source / "00000000000000000000.log").write_bytes(b"x" * 10_000)
    (source / "00000000000000000000.index").write_bytes(b"i" * 10)
    fs = SimFileSystem()
    disk = fs.add_disk(str(target))
    with filesystem.use(fs):
        copy_changed(str(source), str(target), {})
        assert disk.unsynced_files == 2
        fsync_copy(str(target))
        assert disk.unsynced_files == 0
    assert (target / "00000000000000000000.log").read_bytes() == b"x" * 10_000
