"""`LogManager`: every partition log under the broker's ``log.dirs`` (Kafka's ``LogManager``).

Layout of each log directory::

    <log dir>/
        .lock                                held (a POSIX lock) by the broker process using the dir
        .kafka_cleanshutdown                 present only between a clean shutdown and the next start
        recovery-point-offset-checkpoint     } dir_checkpoints.py; one line per partition in this dir
        log-start-offset-checkpoint          }
        replication-offset-checkpoint        } (high watermarks)
        <topic>-<partition>/                 one PartitionLog (see log.py)
        <topic>-<partition>.<uuid>-delete/   a deleted partition being removed

Start-up loads every ``<topic>-<partition>`` directory, passing each its checkpointed recovery point,
log start offset and high watermark. If the clean-shutdown marker exists, no segment is re-validated;
the marker is removed right after loading so that a crash from then on triggers recovery. New
partitions go to the log directory holding the fewest partitions, or to the one AlterReplicaLogDirs
named for them before they existed (`preferred_dirs`, as Kafka does). A replica moves between log
dirs through log_move.py (`finish_move` is its swap); `settle_moves` runs before anything is loaded.

A disk error in one of several log dirs takes it offline (`take_dir_offline`; log_dirs.py explains):
the logs report their own writes, and the manager reports its checkpoints and the creation and
deletion of partition directories.

Before anything is loaded, each log directory's ``.lock`` file is locked (as Kafka does): a second broker
started on the same directories (``make run`` twice) would otherwise recover, truncate and append to
logs the first one is writing. The lock is released at shutdown, or by the kernel when the process dies.

The manager is synchronous and not thread-safe; the broker calls it from its event loop (or a single
storage thread) and schedules `checkpoint_all`, `flush_dirty`, `run_retention` and
`remove_expired_producers` (``producer.id.expiration.check.interval.ms``) periodically.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import uuid
from collections.abc import Callable

from strom._util import filesystem
from strom._util.filesystem import fsync_dir
from strom.protocol.errors import ErrorCode, KafkaError
from strom.storage.checkpoint import TopicPartition
from strom.storage.config import LONG_MAX, LogConfig
from strom.storage.dir_checkpoints import read_dir_checkpoints, write_dir_checkpoints
from strom.storage.log import PartitionLog, TimeFn, system_time_ms
from strom.storage.log_dirs import (
    LogDirFailureChannel,
    LogDirUsage,
    describe_log_dirs,
    is_disk_failure,
    lock_log_dir,
    parse_partition_dir,
    partitions_in,
)
from strom.storage.log_move import (
    FUTURE_SUFFIX,
    MOVED_SUFFIX,
    Copied,
    copy_changed,
    mark_complete,
    settle_moves,
)
from strom.storage.open_files import OpenFiles, default_max_open_files
from strom.storage.producer_state import DEFAULT_PRODUCER_ID_EXPIRATION_MS
from strom.storage.shutdown import close_logs

log = logging.getLogger(__name__)


CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"
DELETE_SUFFIX = "-delete"
_LEGAL_TOPIC = re.compile(r"^[a-zA-Z0-9._-]{1,249}$")


class LogManager:
    """Owns the `PartitionLog` of every partition hosted by this broker."""

    def __init__(
        self,
        log_dirs: list[str],
        default_config: LogConfig,
        time_ms: TimeFn = system_time_ms,
        *,
        producer_id_expiration_ms: int = DEFAULT_PRODUCER_ID_EXPIRATION_MS,
        max_open_files: int | None = None,
    ) -> None:
        if not log_dirs:
            raise ValueError("at least one log directory is required")
        self.log_dirs = [os.path.abspath(d) for d in log_dirs]
        self.default_config = default_config
        self._time_ms = time_ms
        self.producer_id_expiration_ms = producer_id_expiration_ms
        # log.max.open.files: every log's segment files share this bound (open_files.py).
        bound = max_open_files if max_open_files is not None else default_max_open_files()
        self.open_files = OpenFiles(bound)
        log.info("log.max.open.files: at most %d segment files open", self.open_files.max_open)
        self._logs: dict[TopicPartition, PartitionLog] = {}
        self._log_dir_of: dict[TopicPartition, str] = {}
        self._dir_counts = dict.fromkeys(self.log_dirs, 0)  # partitions per log dir
        self._unsynced_dirs: set[str] = set()
        self._timed_flush: dict[TopicPartition, PartitionLog] = {}  # logs with a finite flush.ms
        self.topic_configs: dict[str, LogConfig] = {}
        self._lock_fds: list[int] = []
        # AlterReplicaLogDirs for a partition not hosted yet: the dir it is created in (Kafka's rule).
        self.preferred_dirs: dict[TopicPartition, str] = {}
        self.failures = LogDirFailureChannel(self.log_dirs)  # KIP-112: offline log dirs
        #: The partitions found in a log dir that failed at start: offline until the next restart.
        self.offline_at_start: set[TopicPartition] = set()
        try:
            self._each_online_dir(self._lock_dir)
        except OSError:
            self._unlock()
            raise
        settle_moves(self.online_dirs())
        self._each_online_dir(self._load_dir)

    def _lock_dir(self, log_dir: str) -> None:
        os.makedirs(log_dir, exist_ok=True)
        self._lock_fds.append(lock_log_dir(log_dir))

    def _each_online_dir(self, step: Callable[[str], None]) -> None:
        """``step`` on each online log dir. With JBOD, a dir the disk fails at start (its lock, its
        listing, a log's load) starts offline with the partitions found in it, as in Kafka, which only
        refuses to start when no dir is left."""
        for log_dir in self.online_dirs():
            try:
                step(log_dir)
            except OSError as exc:
                if not is_disk_failure(exc) or len(self.online_dirs()) < 2:
                    raise
                log.error("log dir %s failed at start: %s", log_dir, exc)
                self.offline_at_start.update(self.take_dir_offline(log_dir), partitions_in(log_dir))

    def _unlock(self) -> None:
        for fd in self._lock_fds:
            os.close(fd)
        self._lock_fds.clear()

    def _load_dir(self, log_dir: str) -> None:
        marker = os.path.join(log_dir, CLEAN_SHUTDOWN_FILE)
        clean = os.path.exists(marker)
        recovery_points, log_starts, high_watermarks = read_dir_checkpoints(log_dir)
        for name in sorted(os.listdir(log_dir)):
            path = os.path.join(log_dir, name)
            if name.endswith(DELETE_SUFFIX):
                shutil.rmtree(path, ignore_errors=True)  # a deletion interrupted by a crash
                continue
            tp = parse_partition_dir(name)
            if tp is None or not os.path.isdir(path):
                continue
            self._logs[tp] = PartitionLog(
                path,
                self.topic_configs.get(tp.topic, self.default_config),
                self._time_ms,
                recovery_point=recovery_points.get(tp, 0),
                log_start_offset=log_starts.get(tp, 0),
                high_watermark=high_watermarks.get(tp, 0),
                clean_shutdown=clean,
                producer_id_expiration_ms=self.producer_id_expiration_ms,
                open_files=self.open_files,
            )
            self._log_dir_of[tp] = log_dir
            self._dir_counts[log_dir] += 1
            self._note_flush_policy(tp, self._logs[tp])
            self._logs[tp].on_io_error = self.failures.report
        if clean:
            filesystem.unlink(marker)
            fsync_dir(log_dir)
        previous = "clean" if clean else "unclean" if self._dir_counts[log_dir] else "none (no logs yet)"
        log.info("loaded %d logs from %s (last shutdown: %s)", len(self._logs), log_dir, previous)

    # -- lookup and creation ----------------------------------------------------------------------
    def get_log(self, topic: str, partition: int) -> PartitionLog | None:
        return self._logs.get(TopicPartition(topic, partition))

    def all_logs(self) -> dict[TopicPartition, PartitionLog]:
        return dict(self._logs)

    def describe_dirs(self) -> list[LogDirUsage]:
        """DescribeLogDirs (`strom.storage.log_dirs.describe_log_dirs`)."""
        replicas = [
            (self._log_dir_of[tp], tp, lg.size_bytes, max(lg.high_watermark - lg.log_end_offset, 0))
            for tp, lg in sorted(self._logs.items())
        ]
        return describe_log_dirs(self.log_dirs, self.offline_dirs, replicas)

    def get_or_create_log(
        self, topic: str, partition: int, config: LogConfig | None = None, sync_dir: bool = True
    ) -> PartitionLog:
        """The partition's log, made if it does not exist yet.

        A new partition directory is made durable by an fsync of its log dir; with ``sync_dir=False``
        the caller creates many and calls `sync_new_dirs` once after them (one fsync, not one each).
        """
        tp = TopicPartition(topic, partition)
        existing = self._logs.get(tp)
        if existing is not None:
            if config is not None and config != existing.config:
                # Logs loaded at start-up got the default config: topic configs live in the broker's
                # catalogue, which hands them over here (else compacted topics stop compacting).
                # Only this log: each partition of the topic comes here (all of them at once would
                # make a start-up quadratic).
                self.topic_configs[topic] = config
                existing.update_config(config)
                self._note_flush_policy(tp, existing)
            return existing
        if not _LEGAL_TOPIC.match(topic) or topic in (".", "..") or partition < 0:
            raise KafkaError(
                ErrorCode.INVALID_TOPIC_EXCEPTION, f"illegal topic partition {topic}-{partition}"
            )
        if config is not None:
            self.topic_configs[topic] = config
        log_dir = self.preferred_dirs.pop(tp, None)
        if log_dir is None or log_dir in self.offline_dirs:
            log_dir = self._least_loaded_dir()
        path = os.path.join(log_dir, f"{topic}-{partition}")
        created = None
        try:
            created = PartitionLog(
                path,
                self.topic_configs.get(topic, self.default_config),
                self._time_ms,
                producer_id_expiration_ms=self.producer_id_expiration_ms,
                open_files=self.open_files,
            )
            if sync_dir:
                fsync_dir(log_dir)
        except OSError as exc:
            # Out of descriptors or disk: leave no half-made directory for the next start to load.
            if created is not None:
                for segment in created.segments:
                    segment.close()
            shutil.rmtree(path, ignore_errors=True)
            self._report(log_dir, exc)
            raise
        created.on_io_error = self.failures.report
        self._logs[tp] = created
        self._log_dir_of[tp] = log_dir
        self._dir_counts[log_dir] += 1
        self._note_flush_policy(tp, created)
        if not sync_dir:
            self._unsynced_dirs.add(log_dir)
        return created

    def sync_new_dirs(self) -> None:
        """Fsync the log dirs that got partition directories through ``sync_dir=False``."""
        while self._unsynced_dirs:
            log_dir = self._unsynced_dirs.pop()  # a failed sync is not retried: the dir fails (log_dirs.py)
            try:
                fsync_dir(log_dir)
            except OSError as exc:
                self._report(log_dir, exc)
                raise

    def log_dir_of(self, tp: TopicPartition) -> str | None:
        return self._log_dir_of.get(tp)

    def finish_move(
        self, tp: TopicPartition, future: str, copied: Copied
    ) -> tuple[PartitionLog, OSError | None, str | None]:
        """Steps 2 and 3 of a replica's move (log_move.py) into the log dir holding ``future``, after
        step 1 copied and fsynced all but the delta: the log closed, the delta copied, the copy swapped
        in and opened. Returns the partition's log now (the moved one; on a failure the complete replica
        that remains, reopened), the error, and the source's ``-delete`` dir the caller removes (in a
        worker thread: it holds the whole log)."""
        old = self._logs[tp]
        source_dir = self._log_dir_of[tp]
        dest_dir = os.path.dirname(future)
        name = os.path.basename(old.dir)
        path = os.path.join(dest_dir, name)

        def reopen(where: str, closed: bool = True) -> PartitionLog:
            opened = PartitionLog(
                where,
                self.topic_configs.get(tp.topic, self.default_config),
                self._time_ms,
                recovery_point=old.log_end_offset if closed else old.recovery_point,
                log_start_offset=old.log_start_offset,
                high_watermark=old.high_watermark,
                clean_shutdown=closed,  # closed just now: nothing to recover
                producer_id_expiration_ms=self.producer_id_expiration_ms,
                open_files=self.open_files,
            )
            opened.highest_offset_in_remote_storage = old.highest_offset_in_remote_storage
            return opened

        try:
            old.close()  # flushed, its producer snapshot and leader epochs written, its files released
        except OSError as exc:
            shutil.rmtree(future, ignore_errors=True)
            back = self._logs[tp] = reopen(old.dir, closed=False)  # recovered from its recovery point
            return back, exc, None
        moved = future[: -len(FUTURE_SUFFIX)] + MOVED_SUFFIX
        doomed = os.path.join(source_dir, f"{name}.{uuid.uuid4().hex}{DELETE_SUFFIX}")
        copies = [future, moved]  # what is ours to remove if the source stays
        try:
            copy_changed(old.dir, future, copied, final=True)
            mark_complete(future)
            filesystem.replace(old.dir, doomed)
            fsync_dir(source_dir)
            filesystem.replace(moved, path)
            copies.append(path)  # only now: before, that name may be someone else's
            fsync_dir(dest_dir)
            new = reopen(path)
        except OSError as exc:
            return self._undo_move(tp, reopen, old.dir, copies, doomed, path), exc, None
        self._logs[tp] = new
        self._log_dir_of[tp] = dest_dir
        self._dir_counts[source_dir] -= 1
        self._dir_counts[dest_dir] += 1
        self._note_flush_policy(tp, new)
        try:
            self.checkpoint_all()
        except OSError as exc:  # the move stands; the periodic checkpoint writes them again
            log.error("writing checkpoints after moving %s failed: %s", name, exc)
        log.info("moved %s from %s to %s", name, source_dir, dest_dir)
        return new, None, doomed

    def _undo_move(
        self,
        tp: TopicPartition,
        reopen: Callable[[str], PartitionLog],
        source: str,
        copies: list[str],
        doomed: str,
        swapped: str,
    ) -> PartitionLog:
        """After a failed step of a swap (the log closed): reopen the complete replica that remains.
        The source, renamed back from ``-delete`` if it got that far, is complete, so the copy goes;
        if only the swapped-in copy remains, the move had in fact finished. (A crash instead of this
        leaves the same choice to `settle_moves`.)"""
        if not os.path.isdir(source) and os.path.isdir(doomed):
            try:
                filesystem.replace(doomed, source)
                fsync_dir(os.path.dirname(source))
            except OSError as exc:
                log.error("renaming %s back to %s failed: %s", doomed, source, exc)
        if os.path.isdir(source):
            for copy in copies:
                shutil.rmtree(copy, ignore_errors=True)
            back = self._logs[tp] = reopen(source)
            return back
        # The source is gone for good: the swapped-in copy (or a complete one under its -moved name).
        dest_dir = os.path.dirname(swapped)
        if swapped not in copies:  # raises if that name is taken: no replica is left to open
            filesystem.replace(copies[1], swapped)
            fsync_dir(dest_dir)
        back = self._logs[tp] = reopen(swapped)
        self._dir_counts[self._log_dir_of[tp]] -= 1
        self._log_dir_of[tp] = dest_dir
        self._dir_counts[dest_dir] += 1
        self._note_flush_policy(tp, back)
        return back

    def _least_loaded_dir(self) -> str:
        counts = self._dir_counts  # kept up to date: counting per creation would be quadratic
        online = [d for d in self.log_dirs if d not in self.offline_dirs]
        if not online:
            raise KafkaError(ErrorCode.KAFKA_STORAGE_ERROR, "every log dir is offline")
        return min(online, key=lambda d: counts[d])

    def take_dir_offline(self, log_dir: str) -> list[TopicPartition]:
        """Mark ``log_dir`` offline and close and forget its logs; returns their partitions."""
        self.failures.taken_offline(log_dir)
        doomed = sorted(tp for tp, d in self._log_dir_of.items() if d == log_dir)
        for tp in doomed:
            del self._log_dir_of[tp]
            self._timed_flush.pop(tp, None)
            try:
                self._logs.pop(tp).release_files()
            except OSError as exc:  # the dir is broken: what is lost is recovered at the restart
                log.warning("%s: closing its files failed: %s", tp, exc)
        self._dir_counts[log_dir] = 0
        self._unsynced_dirs.discard(log_dir)
        log.error("log dir %s is offline with %d replica(s)", log_dir, len(doomed))
        return doomed

    @property
    def offline_dirs(self) -> set[str]:
        return self.failures.offline

    def online_dirs(self) -> list[str]:
        return [d for d in self.log_dirs if d not in self.failures.offline]

    def delete_log(self, topic: str, partition: int, checkpoint: bool = True) -> bool:
        """Rename the partition directory aside, then remove it; returns whether it existed.

        The checkpoints are rewritten (so that a partition created again under the same name does not
        inherit its offsets after a crash) unless the caller deletes several and checkpoints once.
        """
        tp = TopicPartition(topic, partition)
        removed = self._logs.pop(tp, None)
        if removed is None:
            return False
        self._timed_flush.pop(tp, None)
        log_dir = self._log_dir_of.pop(tp)
        self._dir_counts[log_dir] -= 1
        for segment in removed.segments:
            segment.close()
        doomed = os.path.join(log_dir, f"{topic}-{partition}.{uuid.uuid4().hex}{DELETE_SUFFIX}")
        try:
            filesystem.replace(removed.dir, doomed)
            fsync_dir(log_dir)
        except OSError as exc:
            self._report(log_dir, exc)
            raise
        shutil.rmtree(doomed, ignore_errors=True)
        if checkpoint:
            self.checkpoint_all()
        return True

    def update_config(self, topic: str, config: LogConfig) -> None:
        self.topic_configs[topic] = config
        for tp, partition_log in self._logs.items():
            if tp.topic == topic:
                partition_log.update_config(config)
                self._note_flush_policy(tp, partition_log)

    def _note_flush_policy(self, tp: TopicPartition, partition_log: PartitionLog) -> None:
        """Keep `flush_dirty`'s sweep to the logs with a flush.ms (an idle broker visits no others)."""
        if partition_log.config.flush_ms < LONG_MAX:
            self._timed_flush[tp] = partition_log
        else:
            self._timed_flush.pop(tp, None)

    # -- periodic work ----------------------------------------------------------------------------
    def _report(self, log_dir: str, exc: OSError) -> None:
        if is_disk_failure(exc):
            self.failures.report(log_dir, exc)

    def checkpoint_all(self) -> None:
        """Write the recovery-point, log-start-offset and high-watermark checkpoints of every online
        log dir.

        Raises:
            OSError: the first dir's failure, once every dir was tried (a failed one is reported).
        """
        failed = self._write_checkpoints()
        if failed:
            raise next(iter(failed.values()))

    def _write_checkpoints(self) -> dict[str, OSError]:
        """`checkpoint_all`; returns the dirs whose checkpoints failed, with the error."""
        failed: dict[str, OSError] = {}
        for log_dir in self.online_dirs():
            try:
                logs = {tp: lg for tp, lg in self._logs.items() if self._log_dir_of[tp] == log_dir}
                write_dir_checkpoints(log_dir, logs)
            except OSError as exc:
                log.error("writing the checkpoints of %s failed: %s", log_dir, exc)
                self._report(log_dir, exc)
                failed[log_dir] = exc
        return failed

    def flush_dirty(self, now_ms: int) -> int:
        """Flush logs whose flush.ms has elapsed; returns how many were flushed."""
        flushed = 0
        for tp, partition_log in self._timed_flush.items():
            try:
                flushed += partition_log.maybe_flush_by_time(now_ms)
            except OSError as e:  # e.g. a full disk: the recovery point stays, the others still flush
                log.error("flush failed for %s: %s", tp, e)
        return flushed

    def run_retention(self, now_ms: int) -> int:
        """Apply retention to every log; returns the number of segments deleted."""
        deleted = 0
        for tp, partition_log in self._logs.items():
            try:
                deleted += partition_log.apply_retention(now_ms)
            except OSError as e:
                log.error("retention failed for %s: %s", tp, e)
        return deleted

    def remove_expired_producers(self, now_ms: int) -> int:
        """Apply producer.id.expiration.ms to every log (Kafka's periodic check); returns how many went."""
        return sum(lg.producer_state.remove_expired_producers(now_ms) for lg in self._logs.values())

    def shutdown(self) -> None:
        """Close every log (shutdown.py), write checkpoints, then mark each log dir cleanly shut down.

        A log dir where anything failed (a full disk) gets no marker: the next start recovers it.
        """
        self.failures.on_dir_failure = None  # a failure now only keeps the dir's clean-shutdown marker off
        failed = close_logs(self._logs, self._log_dir_of)  # two file-system syncs, not fsyncs per log
        failed.update(self._write_checkpoints())  # older checkpoints only mean a longer recovery
        for log_dir in self.log_dirs:
            if log_dir in failed or log_dir in self.offline_dirs:
                continue
            filesystem.write_file(os.path.join(log_dir, CLEAN_SHUTDOWN_FILE), b"", sync=True)
            fsync_dir(log_dir)
        self._logs.clear()
        self._log_dir_of.clear()
        self._timed_flush.clear()
        self._unlock()
        self._dir_counts = dict.fromkeys(self.log_dirs, 0)
