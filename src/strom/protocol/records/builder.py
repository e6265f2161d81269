"""Build and fully decode v2 record batches.

A batch is the 61-byte header (layout in :mod:`strom.protocol.records.batch`) followed by the record
array (layout in :mod:`strom.protocol.records.record`), compressed as one blob when attributes bits
0-2 name a codec. The CRC-32C covers bytes 21 .. end, i.e. attributes through the *compressed* records,
so it is computed last; base_offset and partition_leader_epoch sit outside it so that the broker can
patch them in place.

Header values follow Kafka's ``MemoryRecordsBuilder``:

* ``base_timestamp`` is the first record's timestamp (record timestamps are stored as deltas from it,
  and may be negative), except when the delete-horizon bit (6) is set by compaction, when it holds
  the delete horizon instead;
* ``max_timestamp`` is the largest record timestamp, or the append time for LogAppendTime batches;
* ``last_offset_delta`` is the last record's offset delta, but compaction may keep a larger one so
  that the batch still spans the offsets (and producer sequences) it was written with;
* an empty batch (only compaction writes those, to keep producer state) has timestamps -1 unless told
  otherwise, and is never compressed, as in Kafka's ``DefaultRecordBatch.writeEmptyHeader``.

This module is for the log cleaner, the internal-topic coordinators and tests; the produce and fetch
paths never decode records.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass, field

from strom.protocol.records.batch import (
    COMPRESSION_MASK,
    CONTROL_BIT,
    DELETE_HORIZON_BIT,
    HEADER_SIZE,
    LOG_OVERHEAD,
    TIMESTAMP_TYPE_BIT,
    TRANSACTIONAL_BIT,
    BatchFields,
    BatchHeader,
    RecordValidationError,
    crc_ok,
    iter_headers,
    pack_header,
    read_header,
    seal_crc,
)
from strom.protocol.records.compression import CompressionError, CompressionType, compress, decompress
from strom.protocol.records.record import Header, Record, RecordDecodeError, decode_records, encode_record

# The error types are re-exported so that callers of this module need one import.
__all__ = [
    "DecodedBatch",
    "RecordDecodeError",
    "RecordInput",
    "RecordValidationError",
    "build_batch",
    "decode_batch",
    "decode_batches",
    "encode_batch",
    "recompress_batch",
]

Buffer = bytes | bytearray | memoryview
RecordInput = tuple[bytes | None, bytes | None, Sequence[Header], int]
"""``(key, value, headers, timestamp_ms)`` as accepted by :func:`build_batch`."""

_NO_TIMESTAMP = -1


@dataclass(slots=True)
class DecodedBatch(BatchFields):
    """A batch's header fields plus its decoded records (absolute offsets and timestamps)."""

    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int
    records: list[Record] = field(default_factory=list)

    @property
    def compression(self) -> CompressionType:
        return CompressionType(self.attributes & COMPRESSION_MASK)


def build_batch(
    records: Sequence[RecordInput],
    *,
    base_offset: int = 0,
    compression: CompressionType | int = CompressionType.NONE,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    partition_leader_epoch: int = -1,
    timestamp_type: int = 0,
    is_transactional: bool = False,
    is_control: bool = False,
    xerial_snappy: bool = False,
    max_timestamp: int | None = None,
) -> bytes:
    """Build one batch from ``(key, value, headers, timestamp_ms)`` tuples with offsets ``base_offset + i``.

    ``max_timestamp`` overrides the computed one (e.g. the append time of a LogAppendTime batch).

    Raises:
        ValueError: no records, or a field out of range.
    """
    if not records:
        raise ValueError("a record batch needs at least one record")
    return encode_batch(
        [
            Record(base_offset + i, timestamp, key, value, tuple(headers))
            for i, (key, value, headers, timestamp) in enumerate(records)
        ],
        base_offset=base_offset,
        compression=compression,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        partition_leader_epoch=partition_leader_epoch,
        timestamp_type=timestamp_type,
        is_transactional=is_transactional,
        is_control=is_control,
        xerial_snappy=xerial_snappy,
        max_timestamp=max_timestamp,
    )


def encode_batch(
    records: Sequence[Record],
    *,
    base_offset: int,
    last_offset_delta: int | None = None,
    max_timestamp: int | None = None,
    delete_horizon_ms: int | None = None,
    compression: CompressionType | int = CompressionType.NONE,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    partition_leader_epoch: int = -1,
    timestamp_type: int = 0,
    is_transactional: bool = False,
    is_control: bool = False,
    xerial_snappy: bool = False,
) -> bytes:
    """Encode records that carry absolute offsets, keeping offset gaps (what the log cleaner needs).

    ``last_offset_delta`` defaults to the last record's delta and may be larger (compaction keeps the
    batch's original last offset); it is required for an empty batch. ``delete_horizon_ms`` sets
    attributes bit 6 and stores the horizon as base_timestamp.

    Raises:
        ValueError: offsets not increasing or out of the batch's int32 delta range, an empty batch
            without ``last_offset_delta``, or another field out of range.
    """
    codec = CompressionType(compression)
    if timestamp_type not in (0, 1):
        raise ValueError(f"timestamp_type must be 0 or 1, not {timestamp_type}")
    previous = base_offset - 1
    for record in records:
        if record.offset <= previous:
            raise ValueError(f"record offsets must increase from base_offset {base_offset}: {record.offset}")
        previous = record.offset
    if records:
        computed_last = records[-1].offset - base_offset
        if last_offset_delta is None:
            last_offset_delta = computed_last
        elif last_offset_delta < computed_last:
            raise ValueError(
                f"last_offset_delta {last_offset_delta} is below the last record's {computed_last}"
            )
        first_timestamp = records[0].timestamp
        if max_timestamp is None:
            max_timestamp = max(r.timestamp for r in records)
    else:
        if last_offset_delta is None:
            raise ValueError("an empty batch needs an explicit last_offset_delta")
        first_timestamp = _NO_TIMESTAMP
        if max_timestamp is None:
            max_timestamp = _NO_TIMESTAMP
        codec = CompressionType.NONE
    base_timestamp = first_timestamp if delete_horizon_ms is None else delete_horizon_ms

    body = b"".join(
        encode_record(r.offset - base_offset, r.timestamp - base_timestamp, r.key, r.value, r.headers)
        for r in records
    )
    if codec is not CompressionType.NONE:
        body = compress(codec, body, xerial=xerial_snappy)

    attributes = int(codec) | (TIMESTAMP_TYPE_BIT if timestamp_type else 0)
    if is_transactional:
        attributes |= TRANSACTIONAL_BIT
    if is_control:
        attributes |= CONTROL_BIT
    if delete_horizon_ms is not None:
        attributes |= DELETE_HORIZON_BIT

    out = bytearray(HEADER_SIZE + len(body))
    try:
        pack_header(
            out,
            0,
            base_offset=base_offset,
            batch_length=HEADER_SIZE + len(body) - LOG_OVERHEAD,
            partition_leader_epoch=partition_leader_epoch,
            attributes=attributes,
            last_offset_delta=last_offset_delta,
            base_timestamp=base_timestamp,
            max_timestamp=max_timestamp,
            producer_id=producer_id,
            producer_epoch=producer_epoch,
            base_sequence=base_sequence,
            records_count=len(records),
        )
    except struct.error as exc:
        raise ValueError(f"record batch header field out of range: {exc}") from exc
    out[HEADER_SIZE:] = body
    seal_crc(out)  # last: the CRC covers the attributes through the (compressed) records
    return bytes(out)


def recompress_batch(
    buf: Buffer, pos: int, header: BatchHeader, codec: CompressionType | int, *, max_uncompressed_size: int
) -> bytes:
    """The batch at ``pos`` with its record array re-compressed with ``codec`` (a topic's codec).

    The records are not decoded: the uncompressed record array is the same bytes whatever the
    codec, so every record's offset delta, timestamp delta, key, value and headers are kept exactly,
    as are the header's offsets, timestamps, producer id/epoch/sequence and other attribute bits.
    Only the codec bits, the batch length and the CRC change. Snappy is written in the xerial framing
    the Java producer uses, which every client reads.

    Raises:
        RecordDecodeError: the records cannot be decompressed (or exceed ``max_uncompressed_size``).
    """
    kind = CompressionType(codec)
    view = memoryview(buf)[pos + HEADER_SIZE : pos + header.size]
    try:
        records = decompress(header.compression, view, max_size=max_uncompressed_size)
    except CompressionError as exc:
        raise RecordDecodeError(f"cannot decompress record batch: {exc}") from exc
    body = compress(kind, records, xerial=True)
    out = bytearray(HEADER_SIZE + len(body))
    pack_header(
        out,
        0,
        base_offset=header.base_offset,
        batch_length=len(out) - LOG_OVERHEAD,
        partition_leader_epoch=header.partition_leader_epoch,
        attributes=(header.attributes & ~COMPRESSION_MASK) | kind,
        last_offset_delta=header.last_offset_delta,
        base_timestamp=header.base_timestamp,
        max_timestamp=header.max_timestamp,
        producer_id=header.producer_id,
        producer_epoch=header.producer_epoch,
        base_sequence=header.base_sequence,
        records_count=header.records_count,
    )
    out[HEADER_SIZE:] = body
    seal_crc(out)
    return bytes(out)


def decode_batch(
    buf: Buffer, pos: int = 0, *, verify_crc: bool = True, max_uncompressed_size: int | None = None
) -> DecodedBatch:
    """Decode the whole batch at ``pos``, decompressing its records if needed.

    ``max_uncompressed_size`` bounds the decompressed record array (decompression-bomb guard).

    Raises:
        RecordValidationError: header malformed, batch truncated or CRC mismatch (CORRUPT_MESSAGE);
            its subclass :class:`RecordDecodeError` for undecodable (compressed) records.
    """
    header = read_header(buf, pos)
    if len(buf) - pos < header.size:
        raise RecordDecodeError(f"record batch of {header.size} bytes is truncated at {len(buf) - pos}")
    if verify_crc and not crc_ok(buf, pos, header):
        raise RecordDecodeError("record batch CRC mismatch")
    return _decode_body(buf, pos, header, max_uncompressed_size)


def decode_batches(
    buf: Buffer, *, verify_crc: bool = True, max_uncompressed_size: int | None = None
) -> list[DecodedBatch]:
    """Decode every whole batch in ``buf``; a trailing partial batch (as in fetch responses) is ignored.

    Raises:
        RecordValidationError: as :func:`decode_batch`, for any whole batch.
    """
    batches = []
    for pos, header in iter_headers(buf):
        if verify_crc and not crc_ok(buf, pos, header):
            raise RecordDecodeError(f"record batch CRC mismatch at byte {pos}")
        batches.append(_decode_body(buf, pos, header, max_uncompressed_size))
    return batches


def _decode_body(buf: Buffer, pos: int, header: BatchHeader, max_size: int | None) -> DecodedBatch:
    view = buf if isinstance(buf, memoryview) else memoryview(buf)
    payload: Buffer = view[pos + HEADER_SIZE : pos + header.size]
    if header.compression:
        try:
            payload = decompress(header.compression, payload, max_size=max_size)
        except CompressionError as exc:
            raise RecordDecodeError(f"cannot decompress record batch: {exc}") from exc
    log_append_time = header.max_timestamp if header.timestamp_type == 1 else None
    records = decode_records(
        payload,
        header.records_count,
        header.base_offset,
        header.base_timestamp,
        log_append_time=log_append_time,
    )
    return DecodedBatch(
        base_offset=header.base_offset,
        batch_length=header.batch_length,
        partition_leader_epoch=header.partition_leader_epoch,
        magic=header.magic,
        crc=header.crc,
        attributes=header.attributes,
        last_offset_delta=header.last_offset_delta,
        base_timestamp=header.base_timestamp,
        max_timestamp=header.max_timestamp,
        producer_id=header.producer_id,
        producer_epoch=header.producer_epoch,
        base_sequence=header.base_sequence,
        records_count=header.records_count,
        records=records,
    )
