"""What a leader checks and changes in a produce payload before it is written (Kafka's ``LogValidator``).

`validate_for_leader` runs the header-only checks of records/batch.py (magic, sizes, CRC, offset
deltas, producer fields), the payload size against ``segment.bytes``, the timestamp bounds of
``message.timestamp.before/after.max.ms`` judged from each header, and, for compacted topics only,
the per-record key check (`require_keys`). `assign_offsets` then stamps base offsets and the
leader epoch into a writable copy of the payload (and LogAppendTime, which recomputes the CRC) and
returns where each batch sits, for the segment's indexes.

Record errors (KIP-467, Produce v8+ ``record_errors``). A check that judges single records names
every record it refuses: `InvalidRecordsError` is the partition's INVALID_RECORD and carries one
`RecordError` per bad record, ``batch_index`` being the record's position in its batch (counted from
0), so that a client fails exactly those records. Nothing of such a payload is appended, as in Kafka.
The key check is the only per-record check here; it is also the only place the produce path
decompresses or walks records, and only for topics whose ``cleanup.policy`` contains ``compact``.

Recompression (topic ``compression.type`` other than ``producer``): `recompress` rewrites every batch
whose codec differs from the topic's with the topic's codec (records kept byte for byte, see
builder.recompress_batch), before offsets are assigned; the size limits are checked again on the
result. Only such topics pay for it: with ``producer`` (the default) nothing is decompressed.

Everything here is pure over bytes: no files, no clock of its own.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from strom.protocol.errors import ErrorCode, KafkaError
from strom.protocol.records import batch as batch_mod
from strom.protocol.records.batch import LOG_OVERHEAD, BatchHeader, RecordValidationError
from strom.protocol.records.builder import recompress_batch
from strom.storage.config import LONG_MAX, LogConfig
from strom.storage.offset_map import MAX_UNCOMPRESSED_BYTES, iter_record_keys, record_payload
from strom.storage.segment import BatchSpan

Buffer = bytes | bytearray | memoryview
Batches = list[tuple[int, BatchHeader]]
_NO_KEY = "Compacted topic cannot accept message without key in topic partition {}."


class RecordError(NamedTuple):
    """One refused record: its index in its batch and why (ProduceResponse ``record_errors``)."""

    batch_index: int
    message: str


class InvalidRecordsError(KafkaError):
    """INVALID_RECORD for a payload in which single records were refused; names each of them."""

    def __init__(self, record_errors: Sequence[RecordError]) -> None:
        first = record_errors[0].message
        super().__init__(
            ErrorCode.INVALID_RECORD,
            f"{len(record_errors)} record(s) of the batch refused (see record_errors); first: {first}",
        )
        self.record_errors = tuple(record_errors)


def validate_for_leader(records: Buffer, config: LogConfig, now_ms: int, partition: str = "") -> Batches:
    """Check a client's payload for this topic; returns ``(position, header)`` of each batch.

    Raises:
        KafkaError: CORRUPT_MESSAGE, MESSAGE_TOO_LARGE, RECORD_LIST_TOO_LARGE, INVALID_RECORD,
            UNSUPPORTED_FOR_MESSAGE_FORMAT or INVALID_TIMESTAMP, as Kafka would answer.
    """
    batches = batch_mod.validate_client_batches(records, config.max_message_bytes)
    if len(records) > config.segment_bytes:
        raise KafkaError(ErrorCode.RECORD_LIST_TOO_LARGE, f"{len(records)} bytes exceed segment.bytes")
    check_timestamps(batches, config, now_ms)
    if config.compact_enabled:
        require_keys(records, batches, partition)  # the one per-record check (Kafka's too)
    return batches


def recompress(records: Buffer, batches: Batches, config: LogConfig) -> tuple[Buffer, Batches]:
    """``records`` with every batch in the topic's codec; unchanged (no copy) when all already are.

    Raises:
        KafkaError: CORRUPT_MESSAGE for records that cannot be decompressed; MESSAGE_TOO_LARGE or
            RECORD_LIST_TOO_LARGE when the recompressed payload outgrows the topic's limits.
    """
    codec = config.target_codec
    if codec is None or all(header.compression == codec for _, header in batches):
        return records, batches
    view = memoryview(records)
    out = b"".join(
        view[pos : pos + header.size]
        if header.compression == codec
        else recompress_batch(view, pos, header, codec, max_uncompressed_size=MAX_UNCOMPRESSED_BYTES)
        for pos, header in batches
    )
    rebuilt = list(batch_mod.iter_headers(out))
    for _, header in rebuilt:
        if header.size > config.max_message_bytes:
            raise KafkaError(
                ErrorCode.MESSAGE_TOO_LARGE,
                f"record batch of {header.size} bytes as {config.compression_type} exceeds "
                f"{config.max_message_bytes}",
            )
    if len(out) > config.segment_bytes:
        raise KafkaError(ErrorCode.RECORD_LIST_TOO_LARGE, f"{len(out)} bytes exceed segment.bytes")
    return out, rebuilt


def require_keys(records: Buffer, batches: Sequence[tuple[int, BatchHeader]], partition: str = "") -> None:
    """Refuse a payload for a compacted topic if any record has a null key, naming every such record.

    Raises:
        InvalidRecordsError: INVALID_RECORD with one `RecordError` per keyless record.
        RecordDecodeError: CORRUPT_MESSAGE for records that cannot be decoded.
    """
    view = memoryview(records)
    errors: list[RecordError] = []
    for position, header in batches:
        payload = record_payload(view[position : position + header.size], header)
        keys = [key for _, key in iter_record_keys(payload, header)]
        errors += [RecordError(i, _NO_KEY.format(partition)) for i, key in enumerate(keys) if key is None]
    if errors:
        raise InvalidRecordsError(errors)


def check_timestamps(batches: Batches, config: LogConfig, now_ms: int) -> None:
    """message.timestamp.before/after.max.ms, judged from the batch header (first and max timestamp)."""
    if config.log_append_time or (
        config.message_timestamp_before_max_ms >= LONG_MAX
        and config.message_timestamp_after_max_ms >= LONG_MAX
    ):
        return
    for _, header in batches:
        if (
            now_ms - header.base_timestamp > config.message_timestamp_before_max_ms
            or header.max_timestamp - now_ms > config.message_timestamp_after_max_ms
        ):
            raise KafkaError(ErrorCode.INVALID_TIMESTAMP, "record timestamp out of the accepted range")


def validate_replicated(records: Buffer, expected_offset: int) -> tuple[list[BatchSpan], list[BatchHeader]]:
    """Check batches fetched from the leader (CRC, offsets from ``expected_offset`` on, not backwards).

    A trailing partial batch is ignored, as fetch responses may end in one.

    Raises:
        RecordValidationError: CORRUPT_MESSAGE for a bad batch or offsets that do not continue the log.
    """
    spans: list[BatchSpan] = []
    headers: list[BatchHeader] = []
    for pos, header in batch_mod.iter_headers(records):
        if not batch_mod.crc_ok(records, pos, header) or header.base_offset < expected_offset:
            raise RecordValidationError(
                ErrorCode.CORRUPT_MESSAGE, f"bad replicated batch at offset {expected_offset}"
            )
        spans.append(BatchSpan(pos, header.last_offset, header.max_timestamp, header.size))
        headers.append(header)
        expected_offset = header.next_offset
    return spans, headers


def assign_offsets(
    buf: bytearray | memoryview, batches: Batches, offset: int, epoch: int, log_append_time_ms: int | None
) -> list[BatchSpan]:
    """Stamp consecutive offsets from ``offset`` and ``epoch`` into ``buf``; LogAppendTime if given."""
    spans = []
    stamp = batch_mod.stamp_offsets
    for pos, header in batches:
        stamp(buf, pos, header, offset, epoch)
        max_timestamp = header.max_timestamp
        if log_append_time_ms is not None:
            batch_mod.set_log_append_time(buf, pos, log_append_time_ms)
            max_timestamp = log_append_time_ms
        offset += header.last_offset_delta + 1
        spans.append(BatchSpan(pos, offset - 1, max_timestamp, header.batch_length + LOG_OVERHEAD))
    return spans
