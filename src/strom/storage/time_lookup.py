"""ListOffsets by timestamp: the first record whose timestamp is at or after a given time.

Kafka's ``fetchOffsetByTimestamp``. Segments are taken in order and skipped whole when their max
timestamp is older than the target. Inside a segment the time index names the first offset whose
batch may qualify, the offset index turns it into a file position, and a header scan from there finds
the first batch whose max timestamp qualifies. Only that one batch is then read and its records
walked (decompressed if needed) to find the record within it: this module is the one place where a
read decodes records, and only ListOffsets with a timestamp reaches it; produce and fetch never do.
Records below the log start offset are skipped (their batch may straddle it).

Pure functions over a log's segments; same threading contract as `PartitionLog`.
"""

from __future__ import annotations

from collections.abc import Sequence

from strom.protocol.records.batch import HEADER_SIZE, BatchHeader, RecordValidationError
from strom.protocol.records.compression import decompress
from strom.protocol.records.record import decode_varint, decode_varlong
from strom.storage.segment import LogSegment


def offset_for_timestamp(
    segments: Sequence[LogSegment], timestamp: int, log_start_offset: int
) -> tuple[int, int] | None:
    """(offset, timestamp) of the first record at/after the log start with timestamp >= ``timestamp``."""
    for segment in segments:
        if segment.max_timestamp >= timestamp:
            found = segment_offset_for_timestamp(segment, timestamp, log_start_offset)
            if found is not None:
                return found
    return None


def max_timestamp_offset(segments: Sequence[LogSegment], log_start_offset: int) -> tuple[int, int] | None:
    """(offset, timestamp) of the first record carrying the log's largest timestamp (KIP-734).

    The first segment holding that timestamp is searched for its first record at or after it, which is
    a record with exactly that timestamp. None for a log without records, or when every record with it
    lies below the log start (a segment's max timestamp counts records DeleteRecords left behind).
    """
    candidates = [s for s in segments if s.max_timestamp >= 0 and s.size > 0]
    if not candidates:
        return None
    newest = max(s.max_timestamp for s in candidates)
    for segment in candidates:
        if segment.max_timestamp == newest:
            # (None when the record with it lies below the log start: a later tie may remain)
            found = segment_offset_for_timestamp(segment, newest, log_start_offset)
            if found is not None:
                return found
    return None


def segment_offset_for_timestamp(
    segment: LogSegment, timestamp: int, min_offset: int = 0
) -> tuple[int, int] | None:
    """(offset, timestamp) of the first record at/after ``min_offset`` with timestamp >= ``timestamp``."""
    if segment.max_timestamp < timestamp:
        return None
    start_offset = segment.time_index.lookup(timestamp)
    for position, header in segment.scan(segment.offset_index.lookup(max(start_offset, min_offset))):
        if header.max_timestamp >= timestamp and header.last_offset >= min_offset:
            batch = segment.read_bytes(position, header.size)
            found = locate_record_by_timestamp(batch, header, timestamp, min_offset)
            if found is not None:
                return found
    return None


def locate_record_by_timestamp(
    batch: bytes, header: BatchHeader, timestamp: int, min_offset: int = 0
) -> tuple[int, int] | None:
    """Walk the records of one batch for the first at/after ``min_offset`` with timestamp >= ``timestamp``.

    Only the length, timestamp delta and offset delta of each record are decoded. LogAppendTime batches
    give every record the batch's max timestamp. If the batch cannot be decoded, answer with its first
    offset at/after ``min_offset``, which is never later than the exact answer.
    """
    fallback = max(header.base_offset, min_offset), header.max_timestamp
    if header.timestamp_type == 1:
        return fallback
    try:
        records = batch[HEADER_SIZE:]
        if header.compression:
            records = decompress(header.compression, records)
        pos = 0
        for _ in range(header.records_count):
            length, pos = decode_varint(records, pos)
            end = pos + length
            delta_ts, pos = decode_varlong(records, pos + 1)  # skip the record attributes byte
            delta_offset, _ = decode_varint(records, pos)
            offset = header.base_offset + delta_offset
            if header.base_timestamp + delta_ts >= timestamp and offset >= min_offset:
                return offset, header.base_timestamp + delta_ts
            pos = end
    except (ValueError, RecordValidationError):
        return fallback
    return None
