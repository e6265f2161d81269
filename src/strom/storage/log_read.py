"""Reading a partition's segments: fetch slices, timestamps, and aborted transactions for read_committed.

`read_slices` answers a fetch with whole stored batches as file slices (no record byte read): it
finds the batch containing the fetch offset through the sparse offset index and a short header scan,
then takes slices segment by segment up to the byte limit and the offset bound (KIP-74: at least one
whole batch when asked). ListOffsets by time is time_lookup.py.

read_committed (Kafka's ``LocalLog.collectAbortedTransactions``). A read_committed fetch serves
batches below the last stable offset and lists the aborted transactions that overlap what it serves,
so that the consumer drops their records. The range is ``[fetch_offset, upper_bound)`` where
``upper_bound`` is the offset of the first batch after the served bytes: the next batch in the same
segment, else the next segment's base offset, else the log end offset (`upper_bound_after`; one 8-byte
read). `collect_aborted` then asks each segment's transaction index, from the segment holding
``fetch_offset`` on, until one says no later segment can add an overlapping transaction (the
completeness rule is in transaction_index.py).

Pure functions over a log's segment list; same threading contract as `PartitionLog`.
"""

from __future__ import annotations

import struct
from bisect import bisect_right
from collections.abc import Sequence

from strom.storage.file_records import EMPTY_RECORDS, FileRecords, FileSlice
from strom.storage.segment import LogSegment
from strom.storage.transaction_index import AbortedTxn

_BASE_OFFSET = struct.Struct(">q")


def segment_index(segments: Sequence[LogSegment], offset: int) -> int:
    """Index of the segment that holds ``offset`` (the first one for offsets below the log)."""
    return max(0, bisect_right([s.base_offset for s in segments], offset) - 1)


def _start_position(segment: LogSegment, offset: int) -> int | None:
    if offset == segment.base_offset:
        return 0
    return segment.batch_position(offset)


def read_slices(
    segments: Sequence[LogSegment], fetch_offset: int, max_bytes: int, upper: int, min_one_batch: bool
) -> FileRecords:
    """Whole batches from the one containing ``fetch_offset``, none ending at or beyond ``upper``."""
    if fetch_offset >= upper:
        return EMPTY_RECORDS
    slices: list[FileSlice] = []
    remaining = max_bytes
    i = segment_index(segments, fetch_offset)
    position = _start_position(segments[i], fetch_offset)
    while i < len(segments):
        if position is not None:
            piece, more = segments[i].read(position, remaining, upper, min_one_batch and not slices)
            if piece is not None:
                slices.append(piece)
                remaining -= piece.size
            if not more or remaining <= 0:
                break
        i += 1
        position = 0
    return FileRecords(slices) if slices else EMPTY_RECORDS


def upper_bound_after(segments: Sequence[LogSegment], records: FileRecords, log_end_offset: int) -> int:
    """The offset of the first batch after ``records`` (slices read from ``segments``)."""
    if not records.slices:
        return log_end_offset
    last = records.slices[-1]
    end = last.position + last.size
    for i, segment in enumerate(segments):
        if segment.file is last.file:
            if end + _BASE_OFFSET.size <= segment.size:
                return int(_BASE_OFFSET.unpack(segment.read_bytes(end, _BASE_OFFSET.size))[0])
            return segments[i + 1].base_offset if i + 1 < len(segments) else log_end_offset
    return log_end_offset  # the segment went away (retention) since the read: the widest bound is safe


def collect_aborted(segments: Sequence[LogSegment], fetch_offset: int, upper_bound: int) -> list[AbortedTxn]:
    """Aborted transactions overlapping ``[fetch_offset, upper_bound)``, in marker order."""
    found: list[AbortedTxn] = []
    for segment in segments[segment_index(segments, fetch_offset) :]:
        entries, complete = segment.txn_index.collect(fetch_offset, upper_bound)
        found += entries
        if complete:
            break
    return found
