"""A log dir as a whole: its lock, what DescribeLogDirs reports of it, and its failure (KIP-112).

**The failure channel** (Kafka's ``LogDirFailureChannel``; only with more than one log dir, JBOD).
Every write to a log dir that fails with an error of the disk is reported here: a partition log's
append, flush (fsync), index and time-index entries, segment roll, retention or DeleteRecords delete,
truncation, leader-epoch checkpoint and producer-state snapshot (`PartitionLog.report_io_error`, with
the log's directory), the log manager's checkpoints (recovery point, log start offset, high
watermark), the creation or deletion of a partition directory, and the log cleaner's swap. Which
errors are the disk's is a pure decision (`is_disk_failure`): an ``OSError`` whose errno says the
device or file system refused (EIO, ENOSPC, EROFS, EDQUOT, EACCES, ...); Strom's own errors (a
segment closed under a reader, errno-less) and the process's limits (EMFILE, ENOMEM) are not, and
leave the dir online. The first report of each dir tells the listener (the replica manager), which
has the `LogManager` take the dir offline: its logs are closed and forgotten, no partition is created
there any more, no checkpoint or clean-shutdown marker is written there, DescribeLogDirs reports it
failed (KAFKA_STORAGE_ERROR), and the other dirs keep serving. Only a restart brings it back (its
logs are loaded and recovered again); a dir the disk fails at start (its lock, its listing, a log's
load) starts offline, with the partitions found in it (`partitions_in`), unless no dir is left.
With a single log dir nothing is taken offline (Kafka would stop the broker: nothing would be left to
serve): the append answers KAFKA_STORAGE_ERROR and the next one is tried again, so a disk that was
only full serves again once space returns (docs/faults.md).
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
from typing import Concatenate, ParamSpec, Protocol, TypeVar

from strom.storage.checkpoint import TopicPartition

log = logging.getLogger(__name__)

__all__ = [
    "DISK_ERRNOS",
    "LOCK_FILE",
    "LogDirFailureChannel",
    "LogDirInUseError",
    "LogDirUsage",
    "describe_log_dirs",
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
    """The log dirs that failed: reported once each to ``on_dir_failure``, then offline."""

    def __init__(self, log_dirs: list[str]) -> None:
        self._log_dirs = list(log_dirs)
        self.offline: set[str] = set()
        self._reported: set[str] = set()  # told to the listener, not taken offline yet
        self.on_dir_failure: Callable[[str], None] | None = None

    def report(self, path: str) -> None:
        """A write in ``path`` (a log dir, or a partition directory in one) failed with a disk error."""
        log_dir = path if path in self._log_dirs else os.path.dirname(path)
        if len(self._log_dirs) < 2 or log_dir not in self._log_dirs:
            return  # one log dir stays online; a replica's copy being moved fails its move only
        if log_dir in self.offline or log_dir in self._reported:
            return
        self._reported.add(log_dir)
        log.error("log dir %s had an I/O error", log_dir)
        if self.on_dir_failure is not None:
            self.on_dir_failure(log_dir)

    def taken_offline(self, log_dir: str) -> None:
        self._reported.discard(log_dir)
        self.offline.add(log_dir)
