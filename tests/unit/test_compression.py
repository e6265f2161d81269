"""Compression codecs: round trips, framings written by other implementations, and error mapping."""

from __future__ import annotations

import contextlib
import gzip
import os
import struct
import zlib

import lz4.frame
import pytest
import snappy  # python-snappy: an independent raw-snappy encoder for the interop checks
import zstandard
from hypothesis import given, settings
from hypothesis import strategies as st

from strom.protocol.records.compression import (
    XERIAL_MAGIC,
    CompressionError,
    CompressionType,
    compress,
    decompress,
)

CODECS = list(CompressionType)
COMPRESSED = [c for c in CompressionType if c is not CompressionType.NONE]
SAMPLE = os.urandom(3000) + b"strom " * 20000 + bytes(range(256))


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("data", [b"", b"x", SAMPLE], ids=["empty", "one", "large"])
def test_round_trip(codec: CompressionType, data: bytes) -> None:
    assert decompress(codec, compress(codec, data)) == data
    assert decompress(codec, memoryview(compress(codec, data))) == data


@pytest.mark.parametrize("data", [b"", b"x", SAMPLE], ids=["empty", "one", "large"])
def test_snappy_xerial_round_trip(data: bytes) -> None:
    framed = compress(CompressionType.SNAPPY, data, xerial=True)
    assert framed.startswith(XERIAL_MAGIC)
    assert decompress(CompressionType.SNAPPY, framed) == data


def test_compress_actually_compresses() -> None:
    for codec in COMPRESSED:
        assert len(compress(codec, SAMPLE)) < len(SAMPLE) // 2, codec


def _xerial_by_hand(data: bytes, block_size: int) -> bytes:
    """snappy-java's SnappyOutputStream framing, built from its documented layout."""
    out = bytearray(XERIAL_MAGIC + struct.pack(">ii", 1, 1))
    for start in range(0, len(data), block_size):
        block = snappy.compress(data[start : start + block_size])
        out += struct.pack(">i", len(block)) + block
    return bytes(out)


@pytest.mark.parametrize("block_size", [1, 100, 32 * 1024, 1 << 20])
def test_xerial_written_like_java_decodes(block_size: int) -> None:
    data = SAMPLE[: 5000 if block_size == 1 else None]
    assert decompress(CompressionType.SNAPPY, _xerial_by_hand(data, block_size)) == data


def test_xerial_header_only_is_empty() -> None:
    assert decompress(CompressionType.SNAPPY, XERIAL_MAGIC + struct.pack(">ii", 1, 1)) == b""


def test_raw_snappy_from_other_encoder_decodes() -> None:
    assert decompress(CompressionType.SNAPPY, snappy.compress(SAMPLE)) == SAMPLE
    # and ours is plain raw snappy that another decoder reads
    assert snappy.decompress(compress(CompressionType.SNAPPY, SAMPLE)) == SAMPLE


def test_other_encoders_decode() -> None:
    assert decompress(CompressionType.GZIP, gzip.compress(SAMPLE)) == SAMPLE
    assert decompress(CompressionType.LZ4, lz4.frame.compress(SAMPLE)) == SAMPLE
    assert decompress(CompressionType.LZ4, lz4.frame.compress(SAMPLE, block_linked=True)) == SAMPLE
    # streaming zstd writes no content size in the frame header (what librdkafka/Java produce)
    cobj = zstandard.ZstdCompressor().compressobj()
    streamed = cobj.compress(SAMPLE) + cobj.flush()
    assert zstandard.get_frame_parameters(streamed).content_size == zstandard.CONTENTSIZE_UNKNOWN
    assert decompress(CompressionType.ZSTD, streamed) == SAMPLE
    no_size = zstandard.ZstdCompressor(write_content_size=False).compress(SAMPLE)
    assert decompress(CompressionType.ZSTD, no_size) == SAMPLE


def test_ours_decode_with_other_decoders() -> None:
    assert gzip.decompress(compress(CompressionType.GZIP, SAMPLE)) == SAMPLE
    assert lz4.frame.decompress(compress(CompressionType.LZ4, SAMPLE)) == SAMPLE
    with zstandard.ZstdDecompressor().stream_reader(compress(CompressionType.ZSTD, SAMPLE)) as reader:
        assert reader.read() == SAMPLE


def test_lz4_frame_flags_java_reader_accepts() -> None:
    # FLG byte (after the 4-byte magic): bit 5 = block independence, which Kafka's Java reader requires.
    frame = compress(CompressionType.LZ4, SAMPLE)
    assert frame[:4] == b"\x04\x22\x4d\x18"
    assert frame[4] & 0x20


@pytest.mark.parametrize("codec", [CompressionType.GZIP, CompressionType.LZ4, CompressionType.ZSTD])
def test_concatenated_frames(codec: CompressionType) -> None:
    one = compress(codec, b"abc" * 100)
    assert decompress(codec, one + one) == b"abc" * 200


@pytest.mark.parametrize("codec", COMPRESSED)
def test_corrupt_input_raises_compression_error(codec: CompressionType) -> None:
    good = compress(codec, SAMPLE)
    for bad in (b"", good[:-1], good[: len(good) // 2], good[:3], b"\x00" * 40, b"\xff" * 40):
        with pytest.raises(CompressionError):
            decompress(codec, bad)


def test_xerial_corrupt_blocks() -> None:
    head = XERIAL_MAGIC + struct.pack(">ii", 1, 1)
    block = snappy.compress(b"hello world")
    for bad in (
        head[:10],  # truncated header
        head + b"\x00\x00",  # truncated block length
        head + struct.pack(">i", len(block) + 1) + block,  # block runs past the end
        head + struct.pack(">i", -1) + block,  # negative length
        head + struct.pack(">i", 3) + b"\xff\xff\xff",  # garbage block
    ):
        with pytest.raises(CompressionError):
            decompress(CompressionType.SNAPPY, bad)


def test_snappy_absurd_declared_length_rejected_cheaply() -> None:
    # uvarint 0xFFFFFFFF as the uncompressed length of a 9-byte block
    with pytest.raises(CompressionError, match="impossible"):
        decompress(CompressionType.SNAPPY, b"\xff\xff\xff\xff\x0fabcd")


def test_unknown_codec() -> None:
    for codec in (5, 7, -1):
        with pytest.raises(CompressionError):
            decompress(codec, b"abc")
        with pytest.raises(CompressionError):
            compress(codec, b"abc")


@pytest.mark.parametrize("codec", COMPRESSED)
def test_max_size(codec: CompressionType) -> None:
    blob = compress(codec, b"\x00" * 1_000_000)
    with pytest.raises(CompressionError, match="exceeds"):
        decompress(codec, blob, max_size=10_000)
    assert decompress(codec, blob, max_size=1_000_000) == b"\x00" * 1_000_000
    xerial = compress(codec, b"\x00" * 100_000, xerial=True)
    with pytest.raises(CompressionError, match="exceeds"):
        decompress(codec, xerial, max_size=10_000)


def test_compression_error_is_value_error() -> None:
    assert issubclass(CompressionError, ValueError)
    with pytest.raises(ValueError):
        decompress(CompressionType.GZIP, b"nope")


def test_gzip_is_gzip_container() -> None:
    assert compress(CompressionType.GZIP, b"abc")[:2] == b"\x1f\x8b"
    with pytest.raises(CompressionError):
        decompress(CompressionType.GZIP, zlib.compress(b"abc"))  # zlib container, not gzip


@settings(max_examples=300, deadline=None)
@given(codec=st.sampled_from(COMPRESSED), data=st.binary(max_size=300))
def test_random_bytes_raise_only_compression_error(codec: CompressionType, data: bytes) -> None:
    for candidate in (data, XERIAL_MAGIC + data if codec is CompressionType.SNAPPY else data):
        with contextlib.suppress(CompressionError):
            decompress(codec, candidate, max_size=1 << 20)


@settings(max_examples=100, deadline=None)
@given(codec=st.sampled_from(CODECS), data=st.binary(max_size=2000), xerial=st.booleans())
def test_random_round_trip(codec: CompressionType, data: bytes, xerial: bool) -> None:
    assert decompress(codec, compress(codec, data, xerial=xerial)) == data
