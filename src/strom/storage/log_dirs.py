"""A log dir as a whole: its lock, what DescribeLogDirs reports of it, and its failure (KIP-112).

**The failure channel** (Kafka's ``LogDirFailureChannel``). Every write or sync to a log dir that
fails with an error of the disk is reported here: a partition log's append, flush (fsync), index and
time-index entries, segment roll, retention or DeleteRecords delete, truncation, leader-epoch
checkpoint and producer-state snapshot (`PartitionLog.report_io_error`, with the log's directory), the
log manager's checkpoints (recovery point, log start offset, high watermark), the creation or deletion
of a partition directory, and the log cleaner's swap. Which errors are the disk's is a pure decision
(`is_disk_failure`): an ``OSError`` whose errno says the device or file system refused (EIO, ENOSPC,
EROFS, EDQUOT, EACCES, ...); Strom's own errors (a segment closed under a reader, errno-less) and the
process's limits (EMFILE, ENOMEM) are not, and leave the dir online.

What a failure does is another pure decision (`failure_action`, given the dirs still online):

* With another log dir online (JBOD, KIP-112) the dir goes offline. The first report of each dir tells
  the listener (the replica manager), which has the `LogManager` take the dir offline: its logs are
  closed and forgotten, no partition is created there any more, no checkpoint or clean-shutdown marker
  is written there, DescribeLogDirs reports it failed (KAFKA_STORAGE_ERROR), and the other dirs keep
  serving. Only a restart brings it back (its logs are loaded and recovered again).
* With none left, a failed **sync** (fsync, syncfs; the file-system port raises `SyncFailedError`)
  halts the broker (`strom._util.halt`): one fatal log line naming the dir and the error, then the
  process exits with code 1 and no clean-shutdown marker, so the restart recovers the logs from their
  recovery point. A failed sync is never retried: on Linux a failed write-back may leave the pages
  marked clean though they never reached the disk, so a later fsync can report success for them
  ("fsyncgate") and the recovery point would move over records a machine crash then loses unseen.
  Kafka halts likewise once its last log dir fails.
* With none left, a refused **write** (no sync) on a single log dir keeps the dir online: nothing
  reached the page cache, the call answers KAFKA_STORAGE_ERROR and a later one is tried again, so a
  disk that was only full serves again once space returns (docs/faults.md). The last of several dirs
  halts the broker, as in Kafka.

A dir the disk fails at start (its lock, its listing, a log's load) starts offline, with the partitions
found in it (`partitions_in`), unless no dir is left (the start fails).
"""

from __future__ import annotations

import errno
import fcntl
import functools
import logging
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum
from typing import Concatenate, ParamSpec, Protocol, TypeVar

from strom._util import halt
from strom._util.filesystem import SyncFailedError
from strom.storage.checkpoint import TopicPartition

log = logging.getLogger(__name__)

__all__ = [
    "DISK_ERRNOS",
    "LOCK_FILE",
    "FailureAction",
    "LogDirFailureChannel",
    "LogDirInUseError",
    "LogDirUsage",
    "describe_log_dirs",
    "failure_action",
    "is_disk_failure",
    "lock_log_dir",
    "parse_partition_dir",
    "partitions_in",
    "reports_io_errors",
]

LOCK_FILE = ".lock"

#: Errors by which a device or file system refuses a write: a dir answering one of these is failed.
DISK_ERRNOS = frozenset(
    {
        errno.EIO,  # the device failed
        errno.ENOSPC,  # full
        errno.EDQUOT,  # over quota
        errno.EROFS,  # remounted read-only (as file systems do on errors)
        errno.EACCES,  # permissions taken away
        errno.EPERM,
        errno.ENXIO,  # the device went away
        errno.ENODEV,
        errno.ESTALE,  # a network file system lost the file
        errno.EFBIG,
        errno.EUCLEAN,  # the file system is corrupt
        errno.ENOTCONN,  # a FUSE file system whose daemon died
    }
)


def is_disk_failure(exc: BaseException) -> bool:
    """Whether ``exc`` is the disk refusing (the dir fails), not Strom's own error or a process limit."""
    return isinstance(exc, OSError) and exc.errno in DISK_ERRNOS


class FailureAction(Enum):
    """What a log dir's failure does (`failure_action`)."""

    STAY_ONLINE = "stay online"  # the failed call answers its error; a later one is tried again
    OFFLINE = "offline"  # the dir goes offline until the restart, the others serve
    HALT = "halt"  # the broker stops at once: nothing is left it could serve from


def failure_action(exc: BaseException, log_dirs: int, others_online: int) -> FailureAction:
    """What ``exc``, raised by a write or sync in one of ``log_dirs`` log dirs, does to the broker, with
    ``others_online`` other dirs still online (module docstring)."""
    if not is_disk_failure(exc):
        return FailureAction.STAY_ONLINE
    if others_online > 0:
        return FailureAction.OFFLINE
    if log_dirs < 2 and not isinstance(exc, SyncFailedError):
        return FailureAction.STAY_ONLINE  # a single dir's refused write: nothing reached the page cache
    return FailureAction.HALT


@dataclass(slots=True)
class LogDirUsage:
    """One log dir as DescribeLogDirs reports it: its volume's total and usable bytes, and per partition
    replica in it ``(topic-partition, size in bytes, offset lag)``."""

    path: str
    total_bytes: int
    usable_bytes: int
    replicas: list[tuple[TopicPartition, int, int]]
    failed: bool = False
    # Replicas being moved into this dir (AlterReplicaLogDirs): (topic-partition, bytes copied, lag).
    futures: list[tuple[TopicPartition, int, int]] = field(default_factory=list)


def describe_log_dirs(
    log_dirs: list[str], offline: set[str], replicas: list[tuple[str, TopicPartition, int, int]]
) -> list[LogDirUsage]:
    """DescribeLogDirs: each log dir's volume and ``replicas``, ``(log dir, topic-partition, size in
    bytes, offset lag)`` (the lag: the high watermark minus the log end offset, floored at 0, Kafka's
    measure); an offline dir, or one whose volume cannot be read, is reported failed."""
    out: dict[str, LogDirUsage] = {}
    for log_dir in log_dirs:
        if log_dir in offline:
            out[log_dir] = LogDirUsage(log_dir, -1, -1, [], failed=True)
            continue
        try:
            fs = os.statvfs(log_dir)
            out[log_dir] = LogDirUsage(log_dir, fs.f_blocks * fs.f_frsize, fs.f_bavail * fs.f_frsize, [])
        except OSError:
            out[log_dir] = LogDirUsage(log_dir, -1, -1, [], failed=True)
    for log_dir, tp, size, lag in replicas:
        out[log_dir].replicas.append((tp, size, lag))
    return list(out.values())


_PARTITION_DIR = re.compile(r"^(.+)-(\d+)$")


def parse_partition_dir(name: str) -> TopicPartition | None:
    """``orders-3`` -> TopicPartition("orders", 3); None for anything else (e.g. deleted dirs)."""
    match = _PARTITION_DIR.match(name)
    if match is None:
        return None
    return TopicPartition(match.group(1), int(match.group(2)))


def partitions_in(log_dir: str) -> list[TopicPartition]:
    """The partition directories of a failed log dir, if it can still be listed."""
    try:
        names = os.listdir(log_dir)
    except OSError:
        return []  # unreadable: a replica named by the controller is made again in an online dir
    return [tp for tp in map(parse_partition_dir, names) if tp is not None]


class LogDirInUseError(OSError):
    """Another process holds a log directory's lock."""


class _Reporter(Protocol):
    def report_io_error(self, exc: OSError) -> None: ...


_S = TypeVar("_S", bound=_Reporter)
_P = ParamSpec("_P")
_R = TypeVar("_R")


def reports_io_errors(method: Callable[Concatenate[_S, _P], _R]) -> Callable[Concatenate[_S, _P], _R]:
    """A method of a log whose failed writes go to its ``report_io_error`` (then raise as before)."""

    @functools.wraps(method)
    def reporting(self: _S, /, *args: _P.args, **kwargs: _P.kwargs) -> _R:
        try:
            return method(self, *args, **kwargs)
        except OSError as exc:
            self.report_io_error(exc)
            raise

    return reporting


def lock_log_dir(log_dir: str) -> int:
    """Lock ``<log_dir>/.lock`` for this process; returns the descriptor that holds the lock.

    POSIX record locks (lockf) belong to the process, so a broker re-created in the same process (tests
    that simulate a crash) is not refused; another process is.
    """
    fd = os.open(os.path.join(log_dir, LOCK_FILE), os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        raise LogDirInUseError(
            f"log dir {log_dir} is in use by another broker process ({LOCK_FILE} is locked): stop that "
            "broker, or give this one its own directory (--set log.dirs=DIR)"
        ) from None
    return fd


class LogDirFailureChannel:
    """The log dirs that failed: reported once each to ``on_dir_failure``, then offline; or the broker
    halts when none would be left (module docstring)."""

    def __init__(self, log_dirs: list[str]) -> None:
        self._log_dirs = list(log_dirs)
        self.offline: set[str] = set()
        self._reported: set[str] = set()  # told to the listener, not taken offline yet
        self.on_dir_failure: Callable[[str], None] | None = None

    def report(self, path: str, exc: OSError) -> None:
        """A write or sync in ``path`` (a log dir, or a partition directory in one) failed with ``exc``."""
        log_dir = path if path in self._log_dirs else os.path.dirname(path)
        if log_dir not in self._log_dirs:
            return  # a replica's copy being moved fails its move only
        if log_dir in self.offline or log_dir in self._reported:
            return
        failed = self.offline | self._reported | {log_dir}
        others = sum(d not in failed for d in self._log_dirs)
        action = failure_action(exc, len(self._log_dirs), others)
        if action is FailureAction.HALT:
            what = "a sync" if isinstance(exc, SyncFailedError) else "a write"
            log.critical(
                "halting the broker: %s in log dir %s failed (%s) and no log dir is left online "
                "(exit code 1, no clean-shutdown marker: the restart recovers the logs)",
                what,
                log_dir,
                exc,
            )
            halt.halt(1)
        if action is not FailureAction.OFFLINE:
            return
        self._reported.add(log_dir)
        log.error("log dir %s had an I/O error: %s", log_dir, exc)
        if self.on_dir_failure is not None:
            self.on_dir_failure(log_dir)

    def taken_offline(self, log_dir: str) -> None:
        self._reported.discard(log_dir)
        self.offline.add(log_dir)
