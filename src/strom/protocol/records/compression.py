"""Compression codecs for magic-2 record batches.

In a compressed batch the 61-byte header stays plain and everything after it (the whole record
array) is one compressed blob; attributes bits 0-2 name the codec. The wire formats are:

* **gzip** (1): an RFC 1952 gzip stream. Java's ``GZIPInputStream`` reads concatenated members, so
  we do too.
* **snappy** (2): two framings exist in the wild.

  - *Raw snappy* (one block: uvarint uncompressed length, then tagged literals and copies), written by
    librdkafka.
  - *xerial snappy-java framing*, written by the Java client::

        magic    8 bytes  b"\\x82SNAPPY\\x00"
        version  int32 BE (1)
        compat   int32 BE (1)
        { block length int32 BE | raw snappy block of that many bytes }*

    Each block decompresses independently; the output is their concatenation.

  A reader must accept both (librdkafka detects the xerial magic the same way), so
  :func:`decompress` sniffs the magic. :func:`compress` writes raw snappy unless asked for xerial.
* **lz4** (3): the LZ4 *frame* format (magic ``04 22 4D 18``), not raw LZ4 blocks. Concatenated
  frames are accepted.
* **zstd** (4): zstd frames; the content size may be absent from the frame header (librdkafka and
  Java stream-compress), so we decompress with a streaming decoder. Concatenated frames are accepted.

Every failure to decode is reported as :class:`CompressionError` (a ``ValueError``), whatever the
underlying library raised, so that callers map one exception type to CORRUPT_MESSAGE.
"""

from __future__ import annotations

import struct
import zlib
from enum import IntEnum

import cramjam
import lz4.frame
import zstandard

__all__ = [
    "XERIAL_MAGIC",
    "CompressionError",
    "CompressionType",
    "compress",
    "decompress",
]


class CompressionType(IntEnum):
    """Codec id as stored in attributes bits 0-2 of a record batch."""

    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4


class CompressionError(ValueError):
    """Compressed data could not be decoded (or the codec is unknown / output too large)."""


XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = struct.Struct(">8sii")
_XERIAL_BLOCK_LEN = struct.Struct(">i")
# snappy-java's default block size; any size is legal for readers.
_XERIAL_BLOCK_SIZE = 32 * 1024

# The best snappy can do is a 3-byte copy tag producing 64 bytes, so a raw block whose declared
# length exceeds this bound is corrupt; checking it first keeps a 5-byte garbage header from making
# the library allocate up to 4 GiB.
_SNAPPY_MAX_RATIO = 22

_CHUNK = 64 * 1024


def _codec(codec: int) -> CompressionType:
    try:
        return CompressionType(codec)
    except ValueError:
        raise CompressionError(f"unknown compression codec {codec}") from None


def compress(codec: int, data: bytes | bytearray | memoryview, *, xerial: bool = False) -> bytes:
    """Compress ``data`` with ``codec``; ``xerial`` selects snappy-java framing for SNAPPY."""
    kind = _codec(codec)
    payload = bytes(data)
    if kind is CompressionType.NONE:
        return payload
    if kind is CompressionType.GZIP:
        # wbits=31 selects the gzip container (header + CRC-32 trailer) rather than zlib's.
        comp = zlib.compressobj(6, zlib.DEFLATED, 31)
        return comp.compress(payload) + comp.flush()
    if kind is CompressionType.SNAPPY:
        return _snappy_xerial_compress(payload) if xerial else bytes(cramjam.snappy.compress_raw(payload))
    if kind is CompressionType.LZ4:
        # Independent blocks and no stored content size: Kafka's Java reader
        # (KafkaLZ4BlockInputStream) rejects block-linked frames.
        out: bytes = lz4.frame.compress(payload, block_linked=False, store_size=False, content_checksum=False)
        return out
    out = zstandard.ZstdCompressor(level=3).compress(payload)
    return bytes(out)


def decompress(codec: int, data: bytes | bytearray | memoryview, *, max_size: int | None = None) -> bytes:
    """Decompress ``data``; raise :class:`CompressionError` on bad input.

    ``max_size`` (optional) bounds the decompressed size, as a defence against decompression bombs.
    """
    kind = _codec(codec)
    payload = bytes(data)
    try:
        if kind is CompressionType.NONE:
            result = payload
        elif kind is CompressionType.GZIP:
            result = _gzip_decompress(payload, max_size)
        elif kind is CompressionType.SNAPPY:
            if payload.startswith(XERIAL_MAGIC):
                result = _snappy_xerial_decompress(payload, max_size)
            else:
                result = _snappy_raw_decompress(payload, max_size)
        elif kind is CompressionType.LZ4:
            result = _lz4_decompress(payload, max_size)
        else:
            result = _zstd_decompress(payload, max_size)
    except CompressionError:
        raise
    except (
        ValueError,
        RuntimeError,
        OSError,
        zlib.error,
        zstandard.ZstdError,
        cramjam.DecompressionError,
    ) as exc:
        # The codec libraries raise a mix of their own and builtin types; normalise them.
        raise CompressionError(f"{kind.name.lower()}: {exc}") from exc
    if max_size is not None and len(result) > max_size:
        raise CompressionError(f"{kind.name.lower()}: decompressed size exceeds {max_size} bytes")
    return result


def _check_limit(size: int, max_size: int | None, name: str) -> None:
    if max_size is not None and size > max_size:
        raise CompressionError(f"{name}: decompressed size exceeds {max_size} bytes")


def _gzip_decompress(data: bytes, max_size: int | None) -> bytes:
    out = bytearray()
    rest = data
    if not rest:
        raise CompressionError("gzip: empty input")
    # Loop over concatenated gzip members.
    while rest:
        dec = zlib.decompressobj(31)
        chunk = rest
        while chunk:
            limit = _CHUNK if max_size is None else max(1, min(_CHUNK, max_size - len(out) + 1))
            out += dec.decompress(chunk, limit)
            _check_limit(len(out), max_size, "gzip")
            if dec.eof:
                break
            chunk = dec.unconsumed_tail
        if not dec.eof:
            out += dec.flush()
            if not dec.eof:
                raise CompressionError("gzip: truncated stream")
        rest = dec.unused_data
    return bytes(out)


def _snappy_raw_decompress(data: bytes | memoryview, max_size: int | None) -> bytes:
    if not data:
        raise CompressionError("snappy: empty block")
    declared = int(cramjam.snappy.decompress_raw_len(data))
    if declared > _SNAPPY_MAX_RATIO * len(data) + 64:
        raise CompressionError(f"snappy: declared length {declared} impossible for {len(data)} input bytes")
    _check_limit(declared, max_size, "snappy")
    return bytes(cramjam.snappy.decompress_raw(data))


def _snappy_xerial_decompress(data: bytes, max_size: int | None) -> bytes:
    if len(data) < _XERIAL_HEADER.size:
        raise CompressionError("snappy: truncated xerial header")
    # The version/compat ints are not checked: snappy-java has only ever written 1/1, and
    # librdkafka does not check them either.
    view = memoryview(data)
    pos = _XERIAL_HEADER.size
    out = bytearray()
    while pos < len(data):
        if pos + 4 > len(data):
            raise CompressionError("snappy: truncated xerial block length")
        (size,) = _XERIAL_BLOCK_LEN.unpack_from(data, pos)
        pos += 4
        if size < 0 or pos + size > len(data):
            raise CompressionError(f"snappy: xerial block length {size} out of range")
        remaining = None if max_size is None else max_size - len(out)
        out += _snappy_raw_decompress(view[pos : pos + size], remaining)
        pos += size
    return bytes(out)


def _snappy_xerial_compress(data: bytes) -> bytes:
    parts = [_XERIAL_HEADER.pack(XERIAL_MAGIC, 1, 1)]
    for start in range(0, len(data), _XERIAL_BLOCK_SIZE):
        block = bytes(cramjam.snappy.compress_raw(data[start : start + _XERIAL_BLOCK_SIZE]))
        parts.append(_XERIAL_BLOCK_LEN.pack(len(block)))
        parts.append(block)
    return b"".join(parts)


def _lz4_decompress(data: bytes, max_size: int | None) -> bytes:
    if not data:
        raise CompressionError("lz4: empty input")
    out = bytearray()
    rest = data
    # lz4.frame.decompress stops after the first frame, so walk concatenated frames by hand.
    while rest:
        dec = lz4.frame.LZ4FrameDecompressor()
        limit = -1 if max_size is None else max_size - len(out) + 1
        out += dec.decompress(rest, max_length=limit)
        _check_limit(len(out), max_size, "lz4")
        if not dec.eof:
            raise CompressionError("lz4: truncated frame")
        rest = dec.unused_data
    return bytes(out)


def _zstd_decompress(data: bytes, max_size: int | None) -> bytes:
    if not data:
        raise CompressionError("zstd: empty input")
    out = bytearray()
    rest = data
    dctx = zstandard.ZstdDecompressor()
    # One decompressobj per frame: it reports eof/unused_data, which is how truncation and trailing
    # frames are told apart (read_across_frames would hide a truncated last frame).
    # Without a size limit feed big chunks; with one, feed small ones so that a highly compressible
    # chunk (an RLE block turns 4 bytes into 128 KiB) cannot overshoot the limit by much.
    chunk = _CHUNK if max_size is None else 256
    while rest:
        dobj = dctx.decompressobj()
        pos = 0
        while pos < len(rest) and not dobj.eof:
            out += dobj.decompress(rest[pos : pos + chunk])
            pos += chunk
            _check_limit(len(out), max_size, "zstd")
        if not dobj.eof:
            raise CompressionError("zstd: truncated frame")
        rest = dobj.unused_data + rest[pos:]
    return bytes(out)
