"""Every write path of a log dir fails the dir (KIP-112), on a real read-only file system.

A `LogManager` with two log dirs; the second is made read-only under it (a read-only bind mount: files
open for writing keep working, anything that creates, renames or removes a file gets EROFS), then one
write path at a time runs: each reports that dir to the failure channel and no other, and the first
dir keeps serving. Which errors are the disk's is the pure `is_disk_failure`, and what a failure does
(a dir offline, or the broker halted when none is left) the pure `failure_action` and the channel.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Iterator
from pathlib import Path
from typing import NoReturn

import pytest
from cleaner_support import COMPACT
from test_storage_support import make_batch
from tests.tmpfs import read_only

from strom._util import filesystem, halt
from strom._util.filesystem import SyncFailedError
from strom.protocol.errors import ErrorCode, KafkaError
from strom.protocol.records.builder import build_batch
from strom.storage.checkpoint import (
    RECOVERY_POINT_CHECKPOINT,
    LeaderEpochFileCache,
    TopicPartition,
    read_offsets,
)
from strom.storage.cleaner import LogCleaner
from strom.storage.config import LogConfig
from strom.storage.log import PartitionLog
from strom.storage.log_dirs import FailureAction, LogDirFailureChannel, failure_action, is_disk_failure
from strom.storage.log_manager import LogManager

NOW_MS = 1_000_000
CONFIG = LogConfig(segment_bytes=400, retention_ms=1_000)


class Jbod:
    """Two log dirs, partition 0 of topic ``t`` in the healthy one and partition 1 in the failing one."""

    def __init__(self, base: Path, config: LogConfig) -> None:
        self.healthy, self.failing = str(base / "a"), str(base / "b")
        self.manager = LogManager([self.healthy, self.failing], config, lambda: NOW_MS)
        self.reported: list[str] = []
        self.manager.failures.on_dir_failure = self.reported.append
        self.manager.preferred_dirs[TopicPartition("t", 1)] = self.failing
        self.good = self.manager.get_or_create_log("t", 0, config)
        self.bad = self.manager.get_or_create_log("t", 1, config)
        assert os.path.dirname(self.bad.dir) == self.failing

    def fill(self, plog: PartitionLog, batches: int, **batch: int) -> None:
        for _ in range(batches):
            plog.append_as_leader(make_batch(count=2, value_size=40, **batch), 0)
        plog.high_watermark = plog.log_end_offset

    def assert_only_failing_reported(self) -> None:
        assert self.reported == [self.failing]
        self.fill(self.good, 3)  # the healthy dir keeps serving, rolls included
        assert len(self.good.segments) > 1


@pytest.fixture
def jbod(tmp_path: Path) -> Iterator[Jbod]:
    fixture = Jbod(tmp_path, CONFIG)
    fixture.fill(fixture.bad, 6)
    assert len(fixture.bad.segments) > 2
    yield fixture
    fixture.manager.shutdown()


def test_a_checkpoint_write_fails_the_dir_and_the_other_dir_is_checkpointed(jbod: Jbod) -> None:
    with read_only(Path(jbod.failing)), pytest.raises(OSError) as raised:
        jbod.manager.checkpoint_all()
    assert raised.value.errno == errno.EROFS
    assert jbod.reported == [jbod.failing]
    assert TopicPartition("t", 0) in read_offsets(os.path.join(jbod.healthy, RECOVERY_POINT_CHECKPOINT))


def test_a_segment_roll_fails_the_dir_and_the_append_answers_storage_error(jbod: Jbod) -> None:
    with read_only(Path(jbod.failing)):
        with pytest.raises(KafkaError) as raised:
            jbod.fill(jbod.bad, 3)
        jbod.assert_only_failing_reported()
    assert raised.value.code == ErrorCode.KAFKA_STORAGE_ERROR


def test_a_retention_delete_fails_the_dir(jbod: Jbod) -> None:
    with read_only(Path(jbod.failing)):
        jbod.manager.run_retention(NOW_MS + 60_000)  # logged per log, the other logs go on
        jbod.assert_only_failing_reported()


def test_delete_records_fails_the_dir(jbod: Jbod) -> None:
    with read_only(Path(jbod.failing)):
        with pytest.raises(OSError):
            jbod.bad.delete_records_before(jbod.bad.log_end_offset - 1)
        jbod.assert_only_failing_reported()


def test_a_follower_truncation_fails_the_dir(jbod: Jbod) -> None:
    with read_only(Path(jbod.failing)):
        with pytest.raises(OSError):
            jbod.bad.truncate_to(2)
        jbod.assert_only_failing_reported()


def test_a_producer_state_snapshot_fails_the_dir(tmp_path: Path) -> None:
    fixture = Jbod(tmp_path, CONFIG)
    try:
        fixture.fill(fixture.bad, 1, producer_id=7, producer_epoch=0, base_sequence=0)
        with read_only(Path(fixture.failing)):
            assert not fixture.bad.producer_state.take_snapshot(fixture.bad.log_end_offset)
            fixture.assert_only_failing_reported()
    finally:
        fixture.manager.shutdown()


def test_a_leader_epoch_checkpoint_write_fails_the_dir(jbod: Jbod) -> None:
    with read_only(Path(jbod.failing)):
        with pytest.raises(OSError):
            jbod.bad.close()  # flush, producer snapshot, leader-epoch checkpoint
        jbod.assert_only_failing_reported()


def test_a_refused_leader_epoch_is_forgotten_and_assigned_again_once_the_disk_works(jbod: Jbod) -> None:
    """A new leader's epoch is all or nothing: the checkpoint the disk refused leaves neither the file
    nor the cache holding it, so the same epoch is assigned again (at the log end offset of then) and
    written when the leader's state is applied again."""
    epochs = jbod.bad.leader_epoch_cache
    before = list(epochs.entries)
    with read_only(Path(jbod.failing)), pytest.raises(OSError):
        jbod.bad.assign_leader_epoch(5)
    assert epochs.entries == before
    jbod.fill(jbod.bad, 1)
    jbod.bad.assign_leader_epoch(5)
    assert epochs.latest_epoch == 5
    assert epochs.entries[-1].start_offset == jbod.bad.log_end_offset
    assert LeaderEpochFileCache(epochs.path).entries == epochs.entries


def test_log_cleaning_fails_the_dir(tmp_path: Path) -> None:
    fixture = Jbod(tmp_path, COMPACT)
    try:
        for i in range(60):
            batch = build_batch([(b"key-%d" % (i % 5), b"v" * 40, (), NOW_MS)])
            fixture.bad.append_as_leader(batch, 0)
        fixture.bad.high_watermark = fixture.bad.log_end_offset
        assert len(fixture.bad.segments) > 2
        with read_only(Path(fixture.failing)):
            assert LogCleaner(fixture.manager, lambda: NOW_MS).clean_once() is None  # abandoned
            assert fixture.reported == [fixture.failing]
    finally:
        fixture.manager.shutdown()


def test_creating_a_partition_in_a_failing_dir_fails_it(jbod: Jbod) -> None:
    jbod.manager.preferred_dirs[TopicPartition("t", 2)] = jbod.failing
    with read_only(Path(jbod.failing)):
        with pytest.raises(OSError):
            jbod.manager.get_or_create_log("t", 2)
        jbod.assert_only_failing_reported()


def test_a_dir_failing_at_start_starts_offline_with_its_partitions(tmp_path: Path) -> None:
    fixture = Jbod(tmp_path, CONFIG)
    fixture.fill(fixture.bad, 2)
    fixture.manager.shutdown()
    dirs = [fixture.healthy, fixture.failing]
    with read_only(Path(fixture.failing)):  # its lock cannot be taken
        manager = LogManager(dirs, CONFIG, lambda: NOW_MS)
        try:
            assert manager.offline_dirs == {fixture.failing}
            assert manager.offline_at_start == {TopicPartition("t", 1)}
            assert sorted(manager.all_logs()) == [TopicPartition("t", 0)]
            assert [d.path for d in manager.describe_dirs() if d.failed] == [fixture.failing]
            assert os.path.dirname(manager.get_or_create_log("u", 0).dir) == fixture.healthy
        finally:
            manager.shutdown()
        with pytest.raises(OSError):  # no dir left: the broker does not start
            LogManager([fixture.failing], CONFIG, lambda: NOW_MS)


@pytest.mark.parametrize(
    ("exc", "disk"),
    [
        (OSError(errno.EIO, "I/O error"), True),
        (OSError(errno.ENOSPC, "No space left on device"), True),
        (OSError(errno.EROFS, "Read-only file system"), True),
        (OSError(errno.EDQUOT, "Disk quota exceeded"), True),
        (OSError(errno.EMFILE, "Too many open files"), False),  # the process's limit, not the disk
        (OSError(errno.ENOMEM, "Cannot allocate memory"), False),
        (OSError("segment is closed"), False),  # Strom's own: a reader raced a deletion
        (ValueError("a programming error"), False),
    ],
)
def test_which_errors_fail_a_dir(exc: BaseException, disk: bool) -> None:
    assert is_disk_failure(exc) is disk


EIO = OSError(errno.EIO, "Input/output error")
FULL = OSError(errno.ENOSPC, "No space left on device")
SYNC_EIO = SyncFailedError(errno.EIO, "Input/output error")
SYNC_FULL = SyncFailedError(errno.ENOSPC, "No space left on device")  # a write-back that found no space
STAY, OFFLINE, HALT = FailureAction.STAY_ONLINE, FailureAction.OFFLINE, FailureAction.HALT


@pytest.mark.parametrize(
    ("exc", "log_dirs", "others_online", "action"),
    [
        (FULL, 1, 0, STAY),  # a single dir's refused write: tried again once space returns
        (EIO, 1, 0, STAY),
        (SYNC_EIO, 1, 0, HALT),  # a single dir's failed sync is never retried
        (SYNC_FULL, 1, 0, HALT),
        (FULL, 2, 1, OFFLINE),  # JBOD: the dir goes offline, the other serves
        (SYNC_EIO, 3, 1, OFFLINE),
        (FULL, 2, 0, HALT),  # the last online dir of several: nothing is left to serve from
        (SYNC_EIO, 2, 0, HALT),
        (SyncFailedError(errno.EBADF, "Bad file descriptor"), 1, 0, STAY),  # Strom's own bug, not the disk
        (OSError("segment is closed"), 2, 1, STAY),
    ],
)
def test_what_a_failure_does(exc: OSError, log_dirs: int, others_online: int, action: FailureAction) -> None:
    assert failure_action(exc, log_dirs, others_online) is action


def test_a_failed_sync_of_the_port_says_so() -> None:
    """The file-system port raises a sync's failure as `SyncFailedError`, with the errno it had."""
    read_end, write_end = os.pipe()  # a pipe cannot be synced (EINVAL), nor its read end written (EBADF)
    try:
        with pytest.raises(SyncFailedError) as raised:
            filesystem.fsync(write_end)
        assert raised.value.errno == errno.EINVAL
        with pytest.raises(OSError) as written:
            filesystem.write(read_end, b"x")
        assert written.value.errno == errno.EBADF and not isinstance(written.value, SyncFailedError)
    finally:
        os.close(read_end)
        os.close(write_end)


class _HaltRecorder:
    def __init__(self) -> None:
        self.codes: list[int] = []

    def __call__(self, code: int) -> NoReturn:
        self.codes.append(code)
        raise halt.Halted


def test_the_channel_reports_each_dir_once_and_halts_when_none_is_left(
    caplog: pytest.LogCaptureFixture,
) -> None:
    reported: list[str] = []
    halts = _HaltRecorder()
    channel = LogDirFailureChannel(["/d/a", "/d/b", "/d/c"])
    channel.on_dir_failure = reported.append
    with halt.use(halts):
        channel.report("/d/b/t-0", FULL)
        channel.report("/d/b", SYNC_EIO)  # the log manager's own writes name the dir itself
        channel.report("/d/c", SYNC_EIO)
        assert reported == ["/d/b", "/d/c"]
        channel.taken_offline("/d/b")
        channel.report("/d/b/t-1", EIO)
        assert reported == ["/d/b", "/d/c"] and channel.offline == {"/d/b"} and halts.codes == []
        with pytest.raises(halt.Halted):
            channel.report("/d/a/t-2", FULL)  # the last one: the broker halts
    assert halts.codes == [1] and reported == ["/d/b", "/d/c"]
    fatal = [r.getMessage() for r in caplog.records if r.levelname == "CRITICAL"]
    assert len(fatal) == 1 and "/d/a" in fatal[0] and "No space left on device" in fatal[0], fatal


def test_a_single_dir_retries_a_refused_write_but_halts_on_a_failed_sync() -> None:
    reported: list[str] = []
    halts = _HaltRecorder()
    alone = LogDirFailureChannel(["/d/a"])
    alone.on_dir_failure = reported.append
    with halt.use(halts):
        alone.report("/d/a/t-0", FULL)  # nothing reached the page cache: the append is tried again
        alone.report("/d/a/t-0", EIO)
        assert halts.codes == [] and alone.offline == set()
        with pytest.raises(halt.Halted):
            alone.report("/d/a/t-0", SYNC_EIO)
    assert halts.codes == [1] and reported == []
