"""The committed records of a round's stored batches as columns, for the translation worker's columnar
path (columnar.py): the records that records.py's `committed_records` reads, without a Python object
per record. Pure.

Theory of operation. The kept batches (records.py's `data_batches`: no control batch, no aborted
transaction's) have their record arrays, decompressed where needed, joined into one buffer. Where a
record's fields sit depends on the varints before them, so only the chain of record lengths is walked
in Python, one length per record (a one- or two-byte varint read inline). Each field after it
(attributes, timestampDelta, offsetDelta, key length and key, value length and value, headersCount) is
then read for all records at once with numpy, one byte of the varint at a time for the records whose
varint goes on. The columns keep where each key and value is in the buffer, not copies of them.

`committed_columns` answers None for what the columns do not carry (records with headers) and for
anything the per-record decoder would refuse (a malformed record, a batch that does not decompress):
the caller then takes the per-record path, which translates those records or raises as before.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from strom.lake.records import MAX_UNCOMPRESSED_BATCH, data_batches
from strom.protocol.records.batch import HEADER_SIZE
from strom.protocol.records.compression import CompressionError, decompress
from strom.protocol.records.record import RecordDecodeError, decode_varint
from strom.storage.transaction_index import AbortedTxn

Positions = npt.NDArray[np.int64]

# Zero bytes after the joined record arrays, so that reading a varint of up to 10 bytes that starts
# inside them never indexes past the buffer (a varint that runs into them is refused by the checks).
_PAD = 10


@dataclass(frozen=True, slots=True)
class RecordColumns:
    """Records in ``[start, end)``: their offsets and timestamps, and where their keys and values are."""

    raw: bytes  # the record arrays joined (and _PAD zero bytes)
    data: npt.NDArray[np.uint8]  # the same bytes, for numpy
    offsets: Positions
    timestamps: Positions  # milliseconds; negative for a record without one
    key_starts: Positions
    key_lengths: Positions  # -1 for a null key
    value_starts: Positions
    value_lengths: Positions  # -1 for a null value
    next_offset: int  # the offset after the last whole batch read

    def __len__(self) -> int:
        return len(self.offsets)


def committed_columns(
    chunks: Sequence[tuple[bytes, Sequence[AbortedTxn]]], start: int, end: int
) -> RecordColumns | None:
    """The committed data records of ``chunks`` (as round.py's `read_records`) in ``[start, end)`` as
    columns, or None for the per-record path."""
    parts: list[bytes | memoryview] = []
    size = 0
    record_starts: list[int] = []
    record_lengths: list[int] = []
    per_batch: list[tuple[int, int, int, int]] = []  # base offset, base timestamp, append time, records
    position = start
    for data, aborted in chunks:
        view = memoryview(data)
        batches, next_offset = data_batches(view, aborted, end)
        position = max(position, next_offset)
        for pos, header in batches:
            payload: bytes | memoryview = view[pos + HEADER_SIZE : pos + header.size]
            if header.compression:
                try:
                    payload = decompress(header.compression, payload, max_size=MAX_UNCOMPRESSED_BATCH)
                except CompressionError:
                    return None
            if not _walk(payload, size, header.records_count, record_starts, record_lengths):
                return None
            append_time = header.max_timestamp if header.timestamp_type == 1 else -1
            per_batch.append((header.base_offset, header.base_timestamp, append_time, header.records_count))
            parts.append(payload)
            size += len(payload)
    parts.append(bytes(_PAD))
    raw = b"".join(parts)
    buffer = np.frombuffer(raw, np.uint8)
    columns = _fields(buffer, np.array(record_starts, np.int64), np.array(record_lengths, np.int64))
    if columns is None:
        return None
    timestamp_deltas, offset_deltas, key_starts, key_lengths, value_starts, value_lengths = columns
    batch = np.array(per_batch, np.int64).reshape(-1, 4)
    counts = batch[:, 3]
    offsets = np.repeat(batch[:, 0], counts) + offset_deltas
    timestamps = np.repeat(batch[:, 1], counts) + timestamp_deltas
    append_times = np.repeat(batch[:, 2], counts)
    timestamps = np.where(append_times >= 0, append_times, timestamps)  # LogAppendTime, as Kafka reads it
    keep = (offsets >= start) & (offsets < end)
    return RecordColumns(
        raw,
        buffer,
        offsets[keep],
        timestamps[keep],
        key_starts[keep],
        key_lengths[keep],
        value_starts[keep],
        value_lengths[keep],
        max(position, start),
    )


def _walk(payload: bytes | memoryview, base: int, count: int, starts: list[int], lengths: list[int]) -> bool:
    """Append where each of the ``count`` records of ``payload`` starts (after its length, ``base``
    added) and its length; False when they do not fill ``payload`` exactly."""
    pos = 0
    size = len(payload)
    for _ in range(count):
        if pos >= size:
            return False
        first = payload[pos]
        if first < 0x80:
            length = (first >> 1) ^ -(first & 1)
            pos += 1
        elif pos + 1 < size and payload[pos + 1] < 0x80:
            raw = (first & 0x7F) | (payload[pos + 1] << 7)
            length = (raw >> 1) ^ -(raw & 1)
            pos += 2
        else:
            try:
                length, pos = decode_varint(payload, pos)
            except (RecordDecodeError, IndexError):
                return False
        # The smallest record is 6 bytes (records.py's decoder refuses less).
        if length < 6 or pos + length > size:
            return False
        starts.append(base + pos)
        lengths.append(length)
        pos += length
    return pos == size


def _fields(
    buffer: npt.NDArray[np.uint8], starts: Positions, lengths: Positions
) -> tuple[Positions, ...] | None:
    """Each record's timestamp delta, offset delta, key start and length, value start and length."""
    ends = starts + lengths
    pos = starts + 1  # attributes: ignored, as Kafka does
    timestamp_deltas, pos = _varints(buffer, pos, 10)
    if not np.all(pos <= ends):
        return None
    offset_deltas, pos = _varints(buffer, pos, 5)
    if not np.all(pos <= ends):
        return None
    found: list[Positions] = [timestamp_deltas, offset_deltas]
    for _ in ("key", "value"):
        field_lengths, pos = _varints(buffer, pos, 5)
        if not np.all((pos <= ends) & (field_lengths >= -1)):
            return None
        found += [pos, field_lengths]
        pos = pos + np.maximum(field_lengths, 0)
        if not np.all(pos <= ends):
            return None
    header_counts, pos = _varints(buffer, pos, 5)
    if np.any(header_counts != 0) or not np.array_equal(pos, ends):
        return None  # headers: the per-record path reads them
    return tuple(found)


def _varints(buffer: npt.NDArray[np.uint8], pos: Positions, max_bytes: int) -> tuple[Positions, Positions]:
    """The zigzag varints at ``pos`` (at most ``max_bytes`` each: 5 an int32, 10 an int64) and the
    positions after them; a longer or wider varint sets its position past any record's end, so that the
    caller's bounds check refuses it."""
    raw = np.zeros(len(pos), np.uint64)
    after = pos.copy()
    going = np.arange(len(pos))
    for shift in range(0, 7 * max_bytes, 7):
        byte = buffer[after[going]]
        raw[going] |= (byte & 0x7F).astype(np.uint64) << np.uint64(shift)
        after[going] += 1
        going = going[byte >= 0x80]
        if not len(going):
            break
    else:
        after[going] = len(buffer) + 1
    if max_bytes == 5:
        after[(raw >> np.uint64(32)) != 0] = len(buffer) + 1  # wider than an int32, as record.py refuses
    values = (raw >> np.uint64(1)).astype(np.int64) ^ -(raw & np.uint64(1)).astype(np.int64)
    return values, after
