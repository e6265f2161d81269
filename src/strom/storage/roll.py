"""When a log rolls to a new segment: Kafka's ``LogSegment.shouldRoll``, as a pure function.

A segment rolls before an append when the append would make it larger than ``segment.bytes``, when it
is non-empty and older than ``segment.ms`` (measured from its first batch's timestamp, or from its
creation while it has none), when either sparse index is full, or when the append's last offset would
not fit in the index's 32-bit relative offsets.
"""

from __future__ import annotations

INT32_MAX = (1 << 31) - 1


def should_roll(
    segment_size: int,
    append_size: int,
    max_segment_bytes: int,
    first_batch_timestamp: int,
    append_max_timestamp: int,
    created_ms: int,
    now_ms: int,
    segment_ms: int,
    index_full: bool,
    relative_last_offset: int,
) -> bool:
    """Kafka's roll rule: full by size, old by time (only if non-empty), index full, or offsets overflow."""
    if first_batch_timestamp >= 0:
        waited_ms = append_max_timestamp - first_batch_timestamp
    else:
        waited_ms = now_ms - created_ms
    return (
        segment_size > max_segment_bytes - append_size
        or (segment_size > 0 and waited_ms > segment_ms)
        or index_full
        or relative_last_offset > INT32_MAX
    )
