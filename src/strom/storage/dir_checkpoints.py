"""A log dir's offset checkpoints: the recovery point, the log start offset and the high watermark of
each partition in it (Kafka's ``recovery-point-offset-checkpoint``, ``log-start-offset-checkpoint`` and
``replication-offset-checkpoint``; checkpoint.py holds the file format).

The log manager reads them when it loads the dir (a corrupt one is ignored: the logs recover from
their segments instead) and writes them periodically (``log.flush.offset.checkpoint.interval.ms``),
after partitions are deleted, and at shutdown. A write raises ``OSError`` as the disk does; the log
manager reports it (log_dirs.py).
"""

from __future__ import annotations

import logging
import os
from typing import NamedTuple

from strom.storage.checkpoint import (
    LOG_START_OFFSET_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT,
    REPLICATION_OFFSET_CHECKPOINT,
    CorruptCheckpointError,
    TopicPartition,
    read_offsets,
    write_offsets,
)
from strom.storage.log import PartitionLog
from strom.storage.retention import checkpointed_log_start

log = logging.getLogger(__name__)

__all__ = ["DirCheckpoints", "read_dir_checkpoints", "write_dir_checkpoints"]


class DirCheckpoints(NamedTuple):
    recovery_points: dict[TopicPartition, int]
    log_starts: dict[TopicPartition, int]
    high_watermarks: dict[TopicPartition, int]


def _read(path: str) -> dict[TopicPartition, int]:
    try:
        return read_offsets(path)
    except CorruptCheckpointError as e:
        log.warning("ignoring corrupt checkpoint: %s", e)
        return {}


def read_dir_checkpoints(log_dir: str) -> DirCheckpoints:
    return DirCheckpoints(
        _read(os.path.join(log_dir, RECOVERY_POINT_CHECKPOINT)),
        _read(os.path.join(log_dir, LOG_START_OFFSET_CHECKPOINT)),
        _read(os.path.join(log_dir, REPLICATION_OFFSET_CHECKPOINT)),
    )


def write_dir_checkpoints(log_dir: str, logs: dict[TopicPartition, PartitionLog]) -> None:
    """Write the three checkpoints of ``log_dir`` for ``logs``, the partitions in it."""
    write_offsets(
        os.path.join(log_dir, RECOVERY_POINT_CHECKPOINT), {tp: lg.recovery_point for tp, lg in logs.items()}
    )
    write_offsets(
        os.path.join(log_dir, LOG_START_OFFSET_CHECKPOINT),
        {
            tp: checkpointed_log_start(lg.config, lg.log_start_offset, lg.deleted_records_before)
            for tp, lg in logs.items()
        },
    )
    write_offsets(
        os.path.join(log_dir, REPLICATION_OFFSET_CHECKPOINT),
        {tp: lg.high_watermark for tp, lg in logs.items()},
    )
