"""Test helpers: pack valid v2 record batches with struct + crc32c (no dependency on the record codec).

Holds no tests; the storage and batch test modules import it.
"""

from __future__ import annotations

import struct

import crc32c

_HEADER = struct.Struct(">qiibIhiqqqhii")


def zigzag_varint(value: int) -> bytes:
    zigzag = (value << 1) ^ (value >> 63)
    out = bytearray()
    while zigzag >= 0x80:
        out.append((zigzag & 0x7F) | 0x80)
        zigzag >>= 7
    out.append(zigzag)
    return bytes(out)


def encode_record(offset_delta: int, timestamp_delta: int, key: bytes | None, value: bytes | None) -> bytes:
    body = bytearray(b"\x00")
    body += zigzag_varint(timestamp_delta)
    body += zigzag_varint(offset_delta)
    for part in (key, value):
        if part is None:
            body += zigzag_varint(-1)
        else:
            body += zigzag_varint(len(part)) + part
    body += zigzag_varint(0)
    return zigzag_varint(len(body)) + bytes(body)


def make_batch(
    values: list[bytes] | None = None,
    *,
    count: int = 1,
    value_size: int = 10,
    base_offset: int = 0,
    timestamp: int = 1_000,
    timestamps: list[int] | None = None,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    attributes: int = 0,
    leader_epoch: int = -1,
    last_offset_delta: int | None = None,
    records_count: int | None = None,
) -> bytes:
    """A valid (unless told otherwise) uncompressed v2 batch."""
    if values is None:
        values = [bytes([65 + i % 26]) * value_size for i in range(count)]
    if timestamps is None:
        timestamps = [timestamp] * len(values)
    base_ts = timestamps[0] if timestamps else -1
    max_ts = max(timestamps) if timestamps else -1
    records = b"".join(
        encode_record(i, ts - base_ts, None, v)
        for i, (v, ts) in enumerate(zip(values, timestamps, strict=True))
    )
    lod = len(values) - 1 if last_offset_delta is None else last_offset_delta
    n = len(values) if records_count is None else records_count
    header = bytearray(
        _HEADER.pack(
            base_offset,
            49 + len(records),
            leader_epoch,
            2,
            0,
            attributes,
            lod,
            base_ts,
            max_ts,
            producer_id,
            producer_epoch,
            base_sequence,
            n,
        )
    )
    batch = header + records
    struct.pack_into(">I", batch, 17, crc32c.crc32c(bytes(batch[21:])))
    return bytes(batch)


def idempotent_batch(pid: int, epoch: int, seq: int, count: int = 1, **kwargs: object) -> bytes:
    return make_batch(count=count, producer_id=pid, producer_epoch=epoch, base_sequence=seq, **kwargs)  # type: ignore[arg-type]
