"""The committed records of a range of stored batches, as a read_committed consumer sees them.

The translator reads whole batches below the last stable offset together with the aborted
transactions overlapping them (the log's transaction index, `PartitionLog.read_committed`). A batch is
dropped when it is a control batch (transaction markers carry no data) or a transactional batch of an
aborted transaction: same producer id, and its base offset within ``[first_offset, last_offset]`` of
that transaction (``last_offset`` is the ABORT marker's). Records below ``start`` (the batch holding
``start`` may begin before it) and at or after ``end`` are left out. Pure.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from strom.protocol.records.batch import BatchHeader, iter_headers
from strom.protocol.records.builder import decode_batch
from strom.protocol.records.record import Record
from strom.storage.transaction_index import AbortedTxn

# A decompressed batch larger than this is refused as corrupt (a decompression bomb), as the cleaner does.
MAX_UNCOMPRESSED_BATCH = 256 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class ReadRange:
    """What one read covered: the records kept, and the offset after the last whole batch read."""

    records: list[Record]
    next_offset: int


def committed_records(data: bytes, aborted: Sequence[AbortedTxn], start: int, end: int) -> ReadRange:
    """The data records of ``data`` (whole batches, a trailing partial one ignored) in ``[start, end)``.

    Raises:
        RecordValidationError: a stored batch cannot be decoded (CRC, compression, layout).
    """
    records: list[Record] = []
    view = memoryview(data)
    batches, next_offset = data_batches(view, aborted, end)
    for pos, _ in batches:
        batch = decode_batch(view, pos, verify_crc=False, max_uncompressed_size=MAX_UNCOMPRESSED_BATCH)
        records.extend(r for r in batch.records if start <= r.offset < end)
    return ReadRange(records, max(next_offset, start))


def data_batches(
    view: memoryview, aborted: Sequence[AbortedTxn], end: int
) -> tuple[list[tuple[int, BatchHeader]], int]:
    """The committed data batches of ``view`` (position and header) that end at or before ``end``, and
    the offset after the last whole batch read (-1 when none was)."""
    kept: list[tuple[int, BatchHeader]] = []
    next_offset = -1
    for pos, header in iter_headers(view):
        if header.base_offset >= end:
            break
        if header.next_offset > end:
            break  # a batch straddling the end is read whole next time
        next_offset = header.next_offset
        if header.is_control:
            continue
        if header.is_transactional and _aborted(header.producer_id, header.base_offset, aborted):
            continue
        kept.append((pos, header))
    return kept, next_offset


def _aborted(producer_id: int, offset: int, aborted: Sequence[AbortedTxn]) -> bool:
    return any(t.producer_id == producer_id and t.first_offset <= offset <= t.last_offset for t in aborted)
