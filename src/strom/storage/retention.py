"""Retention as a pure decision: which leading segments of a log to delete.

Kafka's ``UnifiedLog.deleteOldSegments`` rules, applied in its order to the oldest segments first
(only a prefix of the log is ever deleted, never a hole):

* retention.ms   (cleanup.policy contains delete): a segment whose largest timestamp is older than
  ``now - retention.ms``;
* retention.bytes (cleanup.policy contains delete): oldest segments while the log stays at or above
  ``retention.bytes`` without them;
* log start offset (any policy): a segment whose successor starts at or below the log start offset.

A segment is deletable only if everything in it is below the high watermark (its end, the next
segment's base offset or the log end offset for the last one, is <= the high watermark) and it is not
the last segment while empty. So the active segment can go, as in Kafka, when all of it has expired;
the log then rolls a fresh empty segment first. The caller does the I/O.

With tiered storage (``remote.storage.enable``, KIP-405) the local log keeps less than the whole log:
``local.retention.ms`` / ``local.retention.bytes`` replace ``retention.ms`` / ``retention.bytes``
(-2: the same value) and a segment is deleted locally only once it is remote, its last offset at or
below the highest offset in remote storage (`RetentionPolicy.local_of`, `remote_prefix`); the remote
log's own retention is the remote log manager's. DeleteRecords may move a tiered log's start below its
local start (into the remote part), which the log-start-offset checkpoint then keeps
(`checkpointed_log_start`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import NamedTuple

from strom.storage.config import LogConfig


class SegmentSummary(NamedTuple):
    base_offset: int
    next_offset: int  # one past the last offset stored in the segment
    size_bytes: int
    largest_timestamp: int  # -1 when unknown (the caller may substitute the file's mtime)


class RetentionPolicy(NamedTuple):
    retention_ms: int  # -1 = unlimited
    retention_bytes: int  # -1 = unlimited
    delete_enabled: bool  # cleanup.policy contains "delete"

    @classmethod
    def of(cls, config: LogConfig, only_log_start: bool = False) -> RetentionPolicy:
        """The topic's policy; ``only_log_start`` keeps just the log-start rule (DeleteRecords)."""
        return cls(config.retention_ms, config.retention_bytes, config.delete_enabled and not only_log_start)

    @classmethod
    def local_of(cls, config: LogConfig) -> RetentionPolicy:
        """The local log's policy of a tiered topic (local.retention.*, -2 meaning the total's)."""
        return cls(
            local_limit(config.retention_ms, config.local_retention_ms),
            local_limit(config.retention_bytes, config.local_retention_bytes),
            config.delete_enabled,
        )


# Kafka's value of local.retention.ms/bytes meaning "as retention.ms/bytes".
SAME_AS_TOTAL = -2


def local_limit(total: int, local: int) -> int:
    return total if local == SAME_AS_TOTAL else local


def remote_prefix(
    segments: Sequence[SegmentSummary], count: int, highest_offset_in_remote_storage: int
) -> int:
    """How many of the first ``count`` segments are wholly remote (may be deleted locally)."""
    remote = 0
    for segment in segments[:count]:
        if segment.next_offset - 1 > highest_offset_in_remote_storage:
            break
        remote += 1
    return remote


def _deletable_prefix(
    segments: Sequence[SegmentSummary],
    high_watermark: int,
    predicate: Callable[[SegmentSummary, SegmentSummary | None], bool],
) -> int:
    """How many leading segments satisfy ``predicate`` and the high-watermark/empty-last rules."""
    count = 0
    for i, segment in enumerate(segments):
        following = segments[i + 1] if i + 1 < len(segments) else None
        upper_bound = following.base_offset if following else segment.next_offset
        last_and_empty = following is None and segment.size_bytes == 0
        if high_watermark < upper_bound or last_and_empty or not predicate(segment, following):
            break
        count += 1
    return count


def segments_to_delete(
    segments: Sequence[SegmentSummary],
    policy: RetentionPolicy,
    now_ms: int,
    log_start_offset: int,
    high_watermark: int,
) -> int:
    """Number of leading segments (oldest first) retention deletes now."""
    deleted = 0
    if policy.delete_enabled and policy.retention_ms >= 0:
        deleted += _deletable_prefix(
            segments, high_watermark, lambda s, _: now_ms - s.largest_timestamp > policy.retention_ms
        )
    if policy.delete_enabled and policy.retention_bytes >= 0:
        excess = sum(s.size_bytes for s in segments[deleted:]) - policy.retention_bytes

        def over_size(segment: SegmentSummary, _: SegmentSummary | None) -> bool:
            nonlocal excess
            if excess - segment.size_bytes < 0:
                return False
            excess -= segment.size_bytes
            return True

        deleted += _deletable_prefix(segments[deleted:], high_watermark, over_size)
    deleted += _deletable_prefix(
        segments[deleted:],
        high_watermark,
        lambda _, nxt: nxt is not None and nxt.base_offset <= log_start_offset,
    )
    return deleted


def local_segments_to_delete(
    segments: Sequence[SegmentSummary],
    config: LogConfig,
    now_ms: int,
    log_start_offset: int,
    high_watermark: int,
    highest_offset_in_remote_storage: int,
) -> int:
    """A tiered log's local retention: local.retention.*, over the segments already remote only."""
    count = segments_to_delete(
        segments, RetentionPolicy.local_of(config), now_ms, log_start_offset, high_watermark
    )
    return remote_prefix(segments, count, highest_offset_in_remote_storage)


def checkpointed_log_start(config: LogConfig, log_start_offset: int, deleted_records_before: int) -> int:
    """The log-start-offset checkpoint's value: the log start, or with tiered storage DeleteRecords'
    offset when it lies below (in the remote part, whose reads then stop there)."""
    if not config.remote_storage_enable:
        return log_start_offset
    return min(deleted_records_before, log_start_offset)
