"""Retention and DeleteRecords of one `PartitionLog`: the leading segments that go, and the log start
offset moved past them.

Which segments go is retention.py's pure decision (time, size, the log start offset; with tiered
storage only what the remote store holds); here they are deleted, after a roll if every segment goes
(Kafka keeps a log non-empty), and the log start offset moves to the first remaining offset, taking
the leader epochs, the producer state and the producer snapshots with it. A delete the disk refuses
raises ``OSError`` to the log's caller, which reports it (log_dirs.py).
"""

from __future__ import annotations

from typing import Protocol

from strom.storage import retention
from strom.storage.checkpoint import LeaderEpochFileCache
from strom.storage.config import LogConfig
from strom.storage.producer_state import ProducerStateManager
from strom.storage.retention import RetentionPolicy, SegmentSummary, segments_to_delete
from strom.storage.segment import LogSegment

__all__ = ["count_deletable", "delete_leading_segments", "move_log_start_offset"]


class PartitionLog(Protocol):
    """What of a `strom.storage.log.PartitionLog` retention uses."""

    log_start_offset: int
    segments: list[LogSegment]
    leader_epoch_cache: LeaderEpochFileCache
    producer_state: ProducerStateManager
    highest_offset_in_remote_storage: int | None

    @property
    def config(self) -> LogConfig: ...
    @property
    def log_end_offset(self) -> int: ...
    @property
    def high_watermark(self) -> int: ...
    def segment_summaries(self) -> list[SegmentSummary]: ...
    def roll(self) -> LogSegment: ...


def move_log_start_offset(log: PartitionLog, offset: int) -> None:
    log.log_start_offset = offset
    log.leader_epoch_cache.truncate_from_start(offset)
    log.producer_state.evict_before(offset)
    log.producer_state.delete_snapshots_outside(offset, log.log_end_offset)


def count_deletable(log: PartitionLog, now_ms: int, only_log_start: bool = False) -> int:
    """How many leading segments retention (or, ``only_log_start``, the log start offset) removes."""
    summaries, remote = log.segment_summaries(), log.highest_offset_in_remote_storage
    if remote is not None and not only_log_start:  # tiered
        args = (summaries, log.config, now_ms, log.log_start_offset, log.high_watermark)
        return retention.local_segments_to_delete(*args, remote)
    policy = RetentionPolicy.of(log.config, only_log_start)
    return segments_to_delete(summaries, policy, now_ms, log.log_start_offset, log.high_watermark)


def delete_leading_segments(log: PartitionLog, count: int) -> int:
    """Delete the first ``count`` segments; returns ``count``."""
    if count == 0:
        return 0
    if count == len(log.segments):
        log.roll()  # Kafka keeps the log non-empty by rolling before deleting the active segment
    doomed, log.segments = log.segments[:count], log.segments[count:]
    for segment in doomed:
        segment.delete()
    if log.segments[0].base_offset > log.log_start_offset:
        move_log_start_offset(log, log.segments[0].base_offset)
    return count
