"""Confluent's wire format, the part shared by every typed format, and the error a bad record raises.

Every payload a registry-aware serializer writes starts with a 5-byte header: byte 0 the magic byte 0,
bytes 1..4 the schema id (big-endian signed 32-bit). Avro and JSON Schema payloads continue with the
datum; Protobuf payloads first name the message within the schema's file (`protobuf_codec`).
"""

from __future__ import annotations

import struct

MAGIC = 0
HEADER = struct.Struct(">bi")
HEADER_SIZE = HEADER.size


class RecordDecodeError(ValueError):
    """A key or value that is not a decodable payload of its format; the message names the record."""


def split_header(payload: bytes) -> tuple[int, int]:
    """(schema id, where the rest begins) of a wire-format payload.

    Raises:
        ValueError: too short, or the magic byte is not 0.
    """
    if len(payload) < HEADER_SIZE:
        raise ValueError(f"{len(payload)} bytes is shorter than the 5-byte wire-format header")
    magic, schema_id = HEADER.unpack_from(payload)
    if magic != MAGIC:
        raise ValueError(f"magic byte {magic}, expected {MAGIC} (not Confluent's wire format)")
    return schema_id, HEADER_SIZE
