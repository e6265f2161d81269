"""Wire primitives shared by the generated codecs.

Kafka's fixed-width integers are big-endian (``int8/16/32/64``, ``uint16``, ``float64``, ``uuid`` as 16
raw bytes). Classic strings carry an ``int16`` length, classic bytes/records/arrays an ``int32`` count;
``-1`` means null. Flexible versions (KIP-482) use *unsigned* varints instead: compact strings, bytes
and arrays are prefixed with ``N + 1`` (``0`` = null), and each struct ends with a tagged-field section
``uvarint count, {uvarint tag, uvarint size, size bytes}*``. These protocol varints are unsigned
LEB128, unlike the zigzag varints inside record batches.

Fixed-width fields are packed by precompiled :class:`struct.Struct` objects built by the generator;
this module only holds what cannot be a single ``struct`` call. Decode helpers raise ``ValueError``
(or ``IndexError`` on truncation); the codec turns those into ``CorruptFrame``.
"""

from __future__ import annotations

import functools
import struct
from collections.abc import Callable, Sequence
from typing import Any

__all__ = [
    "SMALL_ARRAY",
    "UVARINT_SMALL",
    "array_packers",
    "array_unpackers",
    "differs_from_defaults",
    "pack_array",
    "read_uvarint",
    "unpack_array",
    "uvarint",
]

# One-byte encodings of 0..127, the common case for compact lengths and tag counts.
UVARINT_SMALL: tuple[bytes, ...] = tuple(bytes((i,)) for i in range(128))

# A uvarint for an int32-sized quantity takes at most 5 bytes (Kafka's ByteUtils.readUnsignedVarint).
_UVARINT_MAX_SHIFT = 28


def uvarint(value: int) -> bytes:
    """Encode a non-negative int as an unsigned varint."""
    if value < 0x80:
        if value < 0:
            raise ValueError(f"uvarint of negative {value}")
        return UVARINT_SMALL[value]
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def read_uvarint(buf: memoryview, pos: int) -> tuple[int, int]:
    """Decode an unsigned varint at ``pos``; return ``(value, new_pos)``."""
    result = 0
    shift = 0
    while True:
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, pos
        shift += 7
        if shift > _UVARINT_MAX_SHIFT:
            raise ValueError("uvarint longer than 5 bytes")


# Scalar arrays shorter than this (replica lists, partition ids) use a precompiled Struct per length.
SMALL_ARRAY = 16


@functools.lru_cache(maxsize=512)
def _array_struct(code: str, count: int) -> struct.Struct:
    return struct.Struct(f">{count}{code}")


@functools.cache
def array_packers(code: str) -> tuple[Callable[..., bytes], ...]:
    """``array_packers("i")[n](*values)`` packs ``n`` int32s, for ``n < SMALL_ARRAY``."""
    return tuple(_array_struct(code, n).pack for n in range(SMALL_ARRAY))


@functools.cache
def array_unpackers(code: str) -> tuple[Callable[[memoryview, int], tuple[Any, ...]], ...]:
    """``array_unpackers("i")[n](buf, pos)`` reads ``n`` int32s, for ``n < SMALL_ARRAY``."""
    return tuple(_array_struct(code, n).unpack_from for n in range(SMALL_ARRAY))


def pack_array(code: str, values: Sequence[Any]) -> bytes:
    """Pack a list of fixed-width scalars (no count prefix) in one call."""
    count = len(values)
    if count < 64:
        return _array_struct(code, count).pack(*values)
    return struct.pack(f">{count}{code}", *values)


def unpack_array(code: str, size: int, count: int, buf: memoryview, pos: int) -> list[Any]:
    """Unpack ``count`` fixed-width scalars of ``size`` bytes at ``pos`` (bounds already checked)."""
    if count > (len(buf) - pos) // size:
        raise ValueError("array longer than the frame")
    unpack: Callable[[memoryview, int], tuple[Any, ...]] = (
        _array_struct(code, count).unpack_from if count < 64 else struct.Struct(f">{count}{code}").unpack_from
    )
    return list(unpack(buf, pos))


def differs_from_defaults(value: dict[str, Any], defaults: tuple[tuple[str, Any], ...]) -> bool:
    """Whether a struct dict holds any non-default field (missing keys count as default).

    Empty arrays match a ``[]`` default whatever their sequence type.
    """
    for key, default in defaults:
        item = value.get(key, default)
        if item != default and not (isinstance(default, list) and not default and not item):
            return True
    return False
