"""A replica's move between log dirs (storage/log_move.py, LogManager.finish_move): the copy that
catches up with a log changing under it, the swap, and what a crash at each step leaves."""

from __future__ import annotations

import os
from pathlib import Path

from test_storage_support import idempotent_batch

from strom.storage.checkpoint import TopicPartition
from strom.storage.config import LogConfig
from strom.storage.log_manager import LogManager
from strom.storage.log_move import FUTURE_SUFFIX, MOVED_SUFFIX, copy_changed, future_dir, settle_moves


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
    copied: dict[str, tuple[int, int, int]] = {}
    copy_changed(plog.dir, future, copied)  # the background round
    for seq in range(60, 75, 3):  # written after it: caught up in the swap
        plog.append_as_leader(idempotent_batch(7, 0, seq, count=3, value_size=40), 0)
    plog.high_watermark = plog.log_end_offset
    expected = plog.read(0, 10_000_000)
    assert len(plog.segments) > 2 and expected != before

    moved, error = manager.finish_move(tp, future, copied)
    assert error is None
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


def test_copy_changed_copies_again_only_what_changed(tmp_path: Path) -> None:
    source, target = tmp_path / "src", tmp_path / "dst"
    source.mkdir()
    (source / "00000000000000000000.log").write_bytes(b"x" * 100)
    (source / "00000000000000000000.index").write_bytes(b"i" * 10)
    copied: dict[str, tuple[int, int, int]] = {}
    assert copy_changed(str(source), str(target), copied) == 110
    assert copy_changed(str(source), str(target), copied) == 0  # nothing changed
    (source / "00000000000000000000.log").write_bytes(b"y" * 120)
    (source / "00000000000000000100.log").write_bytes(b"z" * 5)
    assert copy_changed(str(source), str(target), copied) == 125
    os.unlink(source / "00000000000000000100.log")
    # The final pass: small files always, removed ones dropped.
    assert copy_changed(str(source), str(target), copied, final=True) == 10
    assert sorted(os.listdir(target)) == ["00000000000000000000.index", "00000000000000000000.log"]
    assert (target / "00000000000000000000.log").read_bytes() == b"y" * 120


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
