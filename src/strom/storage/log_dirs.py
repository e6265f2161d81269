"""A log dir as a whole: its lock, what DescribeLogDirs reports of it, and its failure (KIP-112).

**The failure channel** (Kafka's ``LogDirFailureChannel``; only with more than one log dir, JBOD).
A write of a partition log that fails with an I/O error (a read-only or broken file system, a full
disk) is reported here by the log (`PartitionLog.on_io_error`, with the log's directory); the first
report of each dir tells the listener (the replica manager), which has the `LogManager` take the dir
offline: its logs are closed and forgotten, no partition is created there any more, no checkpoint or
clean-shutdown marker is written there, DescribeLogDirs reports it failed (KAFKA_STORAGE_ERROR), and
the other dirs keep serving. Only a restart brings it back (its logs are loaded and recovered again).
With a single log dir nothing is taken offline (Kafka would stop the broker: nothing would be left
to serve): the append answers KAFKA_STORAGE_ERROR and the next one is tried again, so a disk that was
only full serves again once space returns (docs/faults.md).
"""

from __future__ import annotations

import fcntl
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass, field

from strom.storage.checkpoint import TopicPartition

log = logging.getLogger(__name__)

__all__ = ["LOCK_FILE", "LogDirFailureChannel", "LogDirInUseError", "LogDirUsage", "lock_log_dir"]

LOCK_FILE = ".lock"


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


class LogDirInUseError(OSError):
    """Another process holds a log directory's lock."""


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

    def report(self, partition_dir: str) -> None:
        """A write under ``partition_dir`` failed with an I/O error."""
        log_dir = os.path.dirname(partition_dir)
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
