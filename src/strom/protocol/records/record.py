"""Records inside a v2 record batch: zigzag varints, record encode and decode.

After the 61-byte batch header (see :mod:`strom.protocol.records.batch`) come ``records_count``
records, each laid out as (Kafka's ``DefaultRecord``)::

    length            varint    bytes of the record after this field
    attributes        int8      unused, written as 0, ignored on read
    timestampDelta    varlong   record timestamp - batch base_timestamp
    offsetDelta       varint    record offset - batch base_offset
    keyLength         varint    -1 = null key
    key               bytes
    valueLength       varint    -1 = null value
    value             bytes
    headersCount      varint
    headers           headersCount x { keyLength varint | key utf-8 | valueLength varint (-1 = null) | value }

``varint``/``varlong`` here are protobuf-style **zigzag** varints: ``(n << 1) ^ (n >> 63)`` and then
7 bits per byte, least significant group first, high bit set on every byte but the last. A varint
holds a signed 32-bit value (at most 5 bytes), a varlong a signed 64-bit value (at most 10 bytes).
This differs from the protocol's flexible-version lengths, which are *unsigned* varints.

Header keys are strings on the wire (UTF-8) but Kafka's Java decoder replaces malformed UTF-8 instead
of rejecting it. We decode and encode them with ``surrogateescape`` so that any byte string
round-trips exactly; this matters when the log cleaner re-encodes records it did not write.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from strom.protocol.errors import ErrorCode
from strom.protocol.records.batch import RecordValidationError

__all__ = [
    "Header",
    "Record",
    "RecordDecodeError",
    "decode_records",
    "decode_varint",
    "decode_varlong",
    "encode_record",
    "encode_varint",
    "encode_varlong",
    "size_of_varint",
]

Buffer = bytes | bytearray | memoryview
Header = tuple[str, bytes | None]

_INT32_MIN, _INT32_MAX = -(1 << 31), (1 << 31) - 1
_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1


class RecordDecodeError(RecordValidationError, ValueError):
    """Malformed record data; maps to CORRUPT_MESSAGE like the header checks in ``batch.py``."""

    def __init__(self, message: str, code: ErrorCode = ErrorCode.CORRUPT_MESSAGE) -> None:
        super().__init__(code, message)


@dataclass(frozen=True, slots=True)
class Record:
    """One decoded record with absolute offset and timestamp."""

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...] = ()


# --- zigzag varints -----------------------------------------------------------------------------


#: The encodings of 0-127: one byte each, the common case (small lengths and deltas) found in a table.
_ONE_BYTE = tuple(bytes((n,)) for n in range(0x80))


def _encode_unsigned(n: int) -> bytes:
    if n < 0x80:
        return _ONE_BYTE[n]
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def encode_varint(value: int) -> bytes:
    """Zigzag-encode a signed 32-bit integer."""
    if not _INT32_MIN <= value <= _INT32_MAX:
        raise ValueError(f"varint out of int32 range: {value}")
    return _encode_unsigned(((value << 1) ^ (value >> 31)) & 0xFFFFFFFF)


def encode_varlong(value: int) -> bytes:
    """Zigzag-encode a signed 64-bit integer."""
    if not _INT64_MIN <= value <= _INT64_MAX:
        raise ValueError(f"varlong out of int64 range: {value}")
    return _encode_unsigned(((value << 1) ^ (value >> 63)) & 0xFFFFFFFFFFFFFFFF)


def size_of_varint(value: int) -> int:
    """Encoded size in bytes of a zigzag varint/varlong."""
    n = (value << 1) ^ (value >> 63)
    n &= 0xFFFFFFFFFFFFFFFF
    size = 1
    while n >= 0x80:
        n >>= 7
        size += 1
    return size


def _decode_unsigned(buf: Buffer, pos: int, max_bytes: int, bits: int) -> tuple[int, int]:
    result = 0
    shift = 0
    end = len(buf)
    for i in range(max_bytes):
        if pos + i >= end:
            raise RecordDecodeError("varint runs past the end of the data")
        byte = buf[pos + i]
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            # Bits beyond the type's width mean a corrupt (or overlong) encoding; Java rejects it too.
            if result >> bits:
                raise RecordDecodeError("varint value exceeds its type's width")
            return result, pos + i + 1
        shift += 7
    raise RecordDecodeError(f"varint longer than {max_bytes} bytes")


def decode_varint(buf: Buffer, pos: int = 0) -> tuple[int, int]:
    """Decode a zigzag varint (int32) at ``pos``; return ``(value, next_pos)``."""
    if pos < len(buf) and (raw := buf[pos]) < 0x80:  # one byte: most lengths and deltas
        return (raw >> 1) ^ -(raw & 1), pos + 1
    raw, pos = _decode_unsigned(buf, pos, 5, 32)
    return (raw >> 1) ^ -(raw & 1), pos


def decode_varlong(buf: Buffer, pos: int = 0) -> tuple[int, int]:
    """Decode a zigzag varlong (int64) at ``pos``; return ``(value, next_pos)``."""
    if pos < len(buf) and (raw := buf[pos]) < 0x80:
        return (raw >> 1) ^ -(raw & 1), pos + 1
    raw, pos = _decode_unsigned(buf, pos, 10, 64)
    return (raw >> 1) ^ -(raw & 1), pos


# --- records ------------------------------------------------------------------------------------


def _encode_bytes(out: bytearray, data: bytes | bytearray | memoryview | None) -> None:
    if data is None:
        out += encode_varint(-1)
    else:
        out += encode_varint(len(data))
        out += data


def encode_record(
    offset_delta: int,
    timestamp_delta: int,
    key: bytes | bytearray | memoryview | None,
    value: bytes | bytearray | memoryview | None,
    headers: Sequence[tuple[str, bytes | bytearray | memoryview | None]] = (),
) -> bytes:
    """Encode one record, length prefix included."""
    body = bytearray(b"\x00")  # attributes: unused by every record version so far
    body += encode_varlong(timestamp_delta)
    body += encode_varint(offset_delta)
    _encode_bytes(body, key)
    _encode_bytes(body, value)
    body += encode_varint(len(headers))
    for header_key, header_value in headers:
        try:
            raw_key = header_key.encode("utf-8", "surrogateescape")
        except UnicodeEncodeError as exc:
            raise ValueError(f"header key {header_key!r} is not encodable as UTF-8") from exc
        _encode_bytes(body, raw_key)
        _encode_bytes(body, header_value)
    return encode_varint(len(body)) + bytes(body)


def _read_bytes(buf: Buffer, pos: int, end: int, what: str) -> tuple[bytes | None, int]:
    length, pos = decode_varint(buf, pos)
    if length == -1:
        return None, pos
    if length < -1:
        raise RecordDecodeError(f"negative {what} length {length}")
    if pos + length > end:
        raise RecordDecodeError(f"{what} of {length} bytes runs past the end of its record")
    return bytes(buf[pos : pos + length]), pos + length


def _decode_one(
    buf: Buffer, pos: int, base_offset: int, base_timestamp: int, log_append_time: int | None
) -> tuple[Record, int]:
    length, pos = decode_varint(buf, pos)
    # The smallest body is 6 bytes: attributes, timestampDelta, offsetDelta, keyLength, valueLength and
    # headersCount at one byte each.
    if length < 6:
        raise RecordDecodeError(f"record length {length} is too small")
    end = pos + length
    if end > len(buf):
        raise RecordDecodeError(f"record of {length} bytes runs past the end of the data")
    pos += 1  # attributes: ignored, as Kafka does
    timestamp_delta, pos = decode_varlong(buf, pos)
    offset_delta, pos = decode_varint(buf, pos)
    key, pos = _read_bytes(buf, pos, end, "key")
    value, pos = _read_bytes(buf, pos, end, "value")
    count, pos = decode_varint(buf, pos)
    if count < 0:
        raise RecordDecodeError(f"negative header count {count}")
    # Each header takes at least 2 bytes; checking first stops a huge count from spinning.
    if count * 2 > end - pos:
        raise RecordDecodeError(f"header count {count} does not fit in the record")
    headers: list[Header] = []
    for _ in range(count):
        raw_key, pos = _read_bytes(buf, pos, end, "header key")
        if raw_key is None:
            raise RecordDecodeError("null header key")
        header_value, pos = _read_bytes(buf, pos, end, "header value")
        headers.append((raw_key.decode("utf-8", "surrogateescape"), header_value))
    if pos != end:
        # Java: "Invalid record size: expected to read N bytes in record payload, but instead read M".
        raise RecordDecodeError(f"record declares {length} bytes but its fields use {length - (end - pos)}")
    timestamp = log_append_time if log_append_time is not None else base_timestamp + timestamp_delta
    return Record(base_offset + offset_delta, timestamp, key, value, tuple(headers)), end


def decode_records(
    data: Buffer,
    count: int,
    base_offset: int,
    base_timestamp: int,
    *,
    log_append_time: int | None = None,
) -> list[Record]:
    """Decode exactly ``count`` records filling all of ``data`` (the uncompressed record array).

    ``log_append_time``: for LogAppendTime batches, pass the batch's max_timestamp; every record then
    reports it as its timestamp, as Kafka's reader does.

    Raises:
        RecordDecodeError: any malformed record, a count that does not match, or trailing bytes.
    """
    if count < 0:
        raise RecordDecodeError(f"negative record count {count}")
    # Each record takes at least 7 bytes, so a count that cannot fit is rejected before looping.
    if count * 7 > len(data):
        raise RecordDecodeError(f"{count} records cannot fit in {len(data)} bytes")
    records: list[Record] = []
    pos = 0
    for _ in range(count):
        record, pos = _decode_one(data, pos, base_offset, base_timestamp, log_append_time)
        records.append(record)
    if pos != len(data):
        raise RecordDecodeError(f"{len(data) - pos} bytes remain after {count} records")
    return records
