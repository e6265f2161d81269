"""Zigzag varints, record encode/decode and whole-batch build/decode (round trips and error contract)."""

from __future__ import annotations

import contextlib
import struct

import crc32c
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from strom.protocol.errors import ErrorCode
from strom.protocol.records.batch import HEADER_SIZE, RecordValidationError, crc_ok, read_header
from strom.protocol.records.builder import (
    DecodedBatch,
    RecordInput,
    build_batch,
    decode_batch,
    decode_batches,
    encode_batch,
)
from strom.protocol.records.compression import CompressionType
from strom.protocol.records.record import (
    Record,
    RecordDecodeError,
    decode_records,
    decode_varint,
    decode_varlong,
    encode_record,
    encode_varint,
    encode_varlong,
    size_of_varint,
)

CODECS = list(CompressionType)

# --- varints --------------------------------------------------------------------------------------

# Known encodings from the protobuf zigzag definition.
KNOWN = [
    (0, b"\x00"),
    (-1, b"\x01"),
    (1, b"\x02"),
    (-2, b"\x03"),
    (63, b"\x7e"),
    (-64, b"\x7f"),
    (64, b"\x80\x01"),
]


@pytest.mark.parametrize(("value", "encoded"), KNOWN)
def test_varint_known_encodings(value: int, encoded: bytes) -> None:
    assert encode_varint(value) == encoded
    assert encode_varlong(value) == encoded
    assert decode_varint(encoded) == (value, len(encoded))
    assert decode_varlong(encoded) == (value, len(encoded))


def test_varint_limits() -> None:
    assert len(encode_varint(-(2**31))) == 5
    assert len(encode_varint(2**31 - 1)) == 5
    assert len(encode_varlong(-(2**63))) == 10
    assert len(encode_varlong(2**63 - 1)) == 10
    for bad in (2**31, -(2**31) - 1):
        with pytest.raises(ValueError):
            encode_varint(bad)
    for bad in (2**63, -(2**63) - 1):
        with pytest.raises(ValueError):
            encode_varlong(bad)


def test_varint_malformed() -> None:
    with pytest.raises(RecordDecodeError):
        decode_varint(b"")
    with pytest.raises(RecordDecodeError):
        decode_varint(b"\x80\x80")  # runs past the end
    with pytest.raises(RecordDecodeError):
        decode_varint(b"\x80\x80\x80\x80\x80\x01")  # 6 bytes
    with pytest.raises(RecordDecodeError):
        decode_varint(b"\xff\xff\xff\xff\x1f")  # 35 bits
    with pytest.raises(RecordDecodeError):
        decode_varlong(b"\x80" * 10 + b"\x01")  # 11 bytes
    with pytest.raises(RecordDecodeError):
        decode_varlong(b"\xff" * 9 + b"\x03")  # 65 bits


@given(st.integers(-(2**31), 2**31 - 1))
def test_varint_round_trip(value: int) -> None:
    enc = encode_varint(value)
    assert decode_varint(b"\xaa" + enc + b"\xbb", 1) == (value, 1 + len(enc))
    assert size_of_varint(value) == len(enc)


@given(st.integers(-(2**63), 2**63 - 1))
def test_varlong_round_trip(value: int) -> None:
    enc = encode_varlong(value)
    assert decode_varlong(enc) == (value, len(enc))
    assert size_of_varint(value) == len(enc)


# --- records --------------------------------------------------------------------------------------


def test_record_layout_by_hand() -> None:
    raw = encode_record(1, -5, b"k", None, [("h", b"v"), ("n", None)])
    body = (
        b"\x00"  # attributes
        + b"\x09"  # timestampDelta -5
        + b"\x02"  # offsetDelta 1
        + b"\x02k"  # key length 1
        + b"\x01"  # value null
        + b"\x04"  # 2 headers
        + b"\x02h\x02v"
        + b"\x02n\x01"
    )
    assert raw == bytes([len(body) * 2]) + body
    assert decode_records(raw, 1, 100, 1000) == [Record(101, 995, b"k", None, (("h", b"v"), ("n", None)))]


def test_records_null_and_empty_distinguished() -> None:
    raw = encode_record(0, 0, None, b"", [("", b"")]) + encode_record(1, 0, b"", None, [])
    recs = decode_records(raw, 2, 0, 0)
    assert recs[0].key is None and recs[0].value == b"" and recs[0].headers == (("", b""),)
    assert recs[1].key == b"" and recs[1].value is None and recs[1].headers == ()


def test_header_key_non_utf8_round_trips() -> None:
    # Kafka's Java decoder tolerates malformed UTF-8 in header keys; we must keep the bytes exactly.
    raw = bytearray(encode_record(0, 0, None, None, [("ab", b"v")]))
    idx = raw.index(b"ab")
    raw[idx : idx + 2] = b"\xff\xfe"
    (rec,) = decode_records(bytes(raw), 1, 0, 0)
    assert encode_record(0, 0, None, None, rec.headers) == bytes(raw)
    assert rec.headers[0][0].encode("utf-8", "surrogateescape") == b"\xff\xfe"


def test_header_key_unicode() -> None:
    raw = encode_record(0, 0, None, None, [("schlüssel-🔑", b"x")])
    assert decode_records(raw, 1, 0, 0)[0].headers == (("schlüssel-🔑", b"x"),)
    with pytest.raises(ValueError):
        encode_record(0, 0, None, None, [("\ud800", b"x")])  # lone surrogate outside the escape range


def test_log_append_time_overrides_timestamps() -> None:
    raw = encode_record(0, 5, None, b"a") + encode_record(1, 9, None, b"b")
    assert [r.timestamp for r in decode_records(raw, 2, 0, 100, log_append_time=777)] == [777, 777]


@pytest.mark.parametrize(
    ("data", "count"),
    [
        (b"", 1),  # missing record
        (encode_record(0, 0, b"k", b"v"), 2),  # count too high
        (encode_record(0, 0, b"k", b"v") + b"\x00", 1),  # trailing bytes
        (encode_record(0, 0, b"k", b"v"), -1),  # negative count
        (encode_record(0, 0, b"k", b"v")[:-1], 1),  # truncated record
        (b"\x02\x00", 1),  # length below the minimum
        (b"\x0c\x00\x00\x00\x03\x01\x00", 1),  # key length -2
        (b"\x0c\x00\x00\x00\x01\x01\x01", 1),  # header count -1
        (b"\x0c\x00\x00\x00\x01\x01\x7e", 1),  # header count far too large
        (b"\x0e\x00\x00\x00\x01\x01\x02\x01", 1),  # null header key (length -1)
        (b"\x0e\x00\x00\x00\x01\x01\x00\x00", 1),  # record length says 7 but fields use 6
        (b"\x0c\x00\x00\x00\x10\x01\x00", 1),  # key of 8 bytes runs past the record
    ],
)
def test_malformed_records(data: bytes, count: int) -> None:
    with pytest.raises(RecordDecodeError) as info:
        decode_records(data, count, 0, 0)
    assert isinstance(info.value, RecordValidationError)
    assert isinstance(info.value, ValueError)
    assert info.value.code is ErrorCode.CORRUPT_MESSAGE


# --- batches --------------------------------------------------------------------------------------

SAMPLE: list[RecordInput] = [
    (b"key-1", b"value-1" * 50, [("trace", b"abc"), ("null-header", None)], 1_700_000_000_000),
    (None, b"tombstone-less value", [], 1_700_000_000_005),
    (b"key-3", None, [], 1_699_999_999_990),  # earlier than the first: negative delta
    (None, None, [("h", b"")], 1_700_000_000_002),
]


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("xerial", [False, True])
def test_batch_round_trip(codec: CompressionType, xerial: bool) -> None:
    raw = build_batch(SAMPLE, base_offset=40, compression=codec, xerial_snappy=xerial)
    header = read_header(raw)
    assert header.size == len(raw) and crc_ok(raw, 0, header)
    b = decode_batch(raw)
    assert b.compression is codec
    assert (b.base_offset, b.records_count, b.last_offset_delta, b.magic) == (40, 4, 3, 2)
    assert (b.base_timestamp, b.max_timestamp) == (1_700_000_000_000, 1_700_000_000_005)
    assert (b.producer_id, b.producer_epoch, b.base_sequence, b.partition_leader_epoch) == (-1, -1, -1, -1)
    assert (b.last_offset, b.next_offset, b.size) == (43, 44, len(raw))
    assert [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in b.records] == [
        (40 + i, ts, k, v, tuple(h)) for i, (k, v, h, ts) in enumerate(SAMPLE)
    ]


def test_batch_header_options() -> None:
    raw = build_batch(
        [(b"k", b"v", [], 10)],
        base_offset=7,
        producer_id=99,
        producer_epoch=3,
        base_sequence=12,
        partition_leader_epoch=5,
        is_transactional=True,
        is_control=True,
        compression=CompressionType.LZ4,
    )
    b = decode_batch(raw)
    assert (b.producer_id, b.producer_epoch, b.base_sequence, b.partition_leader_epoch) == (99, 3, 12, 5)
    assert b.is_transactional and b.is_control and b.timestamp_type == 0
    assert b.attributes == 3 | 0x10 | 0x20
    assert b.delete_horizon_ms is None


def test_log_append_time_batch() -> None:
    raw = build_batch([(b"k", b"v", [], 10), (b"k", b"v", [], 20)], timestamp_type=1, max_timestamp=5000)
    b = decode_batch(raw)
    assert b.timestamp_type == 1 and b.max_timestamp == 5000
    assert [r.timestamp for r in b.records] == [5000, 5000]


def test_large_values() -> None:
    big = bytes(range(256)) * 8192  # 2 MiB
    for codec in CODECS:
        b = decode_batch(build_batch([(big, big, [("h", big)], 1)], compression=codec))
        assert b.records[0].key == big and b.records[0].value == big and b.records[0].headers[0][1] == big


def test_empty_records_not_allowed() -> None:
    with pytest.raises(ValueError):
        build_batch([])


def test_encode_batch_keeps_offset_gaps_and_last_offset() -> None:
    # What the log cleaner does: drop records 1 and 3 of 0..3 but keep the batch's offset span.
    kept = [Record(100, 50, b"a", b"1"), Record(102, 52, b"c", b"3")]
    raw = encode_batch(
        kept, base_offset=100, last_offset_delta=3, producer_id=5, producer_epoch=0, base_sequence=0,
        compression=CompressionType.ZSTD, delete_horizon_ms=9999,
    )  # fmt: skip
    b = decode_batch(raw)
    assert (b.last_offset_delta, b.records_count, b.next_offset) == (3, 2, 104)
    assert b.delete_horizon_ms == 9999 and b.attributes & 0x40
    assert b.records == kept  # timestamps are deltas from the horizon and come back exact


def test_encode_empty_batch() -> None:
    raw = encode_batch([], base_offset=10, last_offset_delta=4, producer_id=1, producer_epoch=0,
                       base_sequence=0, compression=CompressionType.GZIP)  # fmt: skip
    b = decode_batch(raw)
    assert len(raw) == HEADER_SIZE and b.records == [] and b.records_count == 0
    assert b.compression is CompressionType.NONE  # never compressed, as Kafka writes them
    assert (b.base_timestamp, b.max_timestamp, b.next_offset) == (-1, -1, 15)
    with pytest.raises(ValueError):
        encode_batch([], base_offset=0)


def test_encode_batch_argument_checks() -> None:
    with pytest.raises(ValueError):
        encode_batch([Record(5, 0, None, None), Record(5, 0, None, None)], base_offset=5)
    with pytest.raises(ValueError):
        encode_batch([Record(4, 0, None, None)], base_offset=5)
    with pytest.raises(ValueError):
        encode_batch([Record(5 + 2**31, 0, None, None)], base_offset=5)
    with pytest.raises(ValueError):
        encode_batch([Record(7, 0, None, None)], base_offset=5, last_offset_delta=1)
    with pytest.raises(ValueError):
        build_batch([(None, None, [], 0)], producer_epoch=2**15)
    with pytest.raises(ValueError):
        build_batch([(None, None, [], 0)], timestamp_type=2)
    with pytest.raises(ValueError):
        build_batch([(None, None, [], 0)], compression=6)


def test_decode_batches_ignores_trailing_partial() -> None:
    one = build_batch([(b"a", b"1", [], 1)], base_offset=0)
    two = build_batch([(b"b", b"2", [], 2)], base_offset=1, compression=CompressionType.SNAPPY)
    buf = one + two + two[:30]
    assert [b.base_offset for b in decode_batches(buf)] == [0, 1]
    assert [b.base_offset for b in decode_batches(memoryview(one + two[:-1]))] == [0]
    assert decode_batches(b"") == []
    assert decode_batch(buf, len(one)).records[0].value == b"2"


def test_decode_batch_errors() -> None:
    raw = build_batch([(b"a", b"1", [], 1)], compression=CompressionType.GZIP)
    with pytest.raises(RecordValidationError):
        decode_batch(raw[:-1])  # truncated
    with pytest.raises(RecordValidationError):
        decode_batch(raw[:20])  # shorter than a header
    flipped = bytearray(raw)
    flipped[-3] ^= 0xFF
    with pytest.raises(RecordValidationError, match="CRC"):
        decode_batch(bytes(flipped))
    with pytest.raises(RecordValidationError, match="CRC"):
        decode_batches(bytes(flipped))
    with pytest.raises(RecordDecodeError):  # CRC ignored: now the gzip stream is corrupt
        decode_batch(bytes(flipped), verify_crc=False)


def _with_crc(buf: bytearray) -> bytes:
    struct.pack_into(">I", buf, 17, crc32c.crc32c(bytes(buf[21:])))
    return bytes(buf)


def test_records_count_mismatch_detected() -> None:
    raw = bytearray(build_batch([(b"a", b"1", [], 1), (b"b", b"2", [], 1)]))
    struct.pack_into(">i", raw, 57, 3)
    with pytest.raises(RecordDecodeError):
        decode_batch(_with_crc(raw))
    struct.pack_into(">i", raw, 57, 1)
    with pytest.raises(RecordDecodeError, match="remain"):
        decode_batch(_with_crc(raw))


def test_unknown_codec_in_attributes() -> None:
    raw = bytearray(build_batch([(b"a", b"1", [], 1)]))
    struct.pack_into(">h", raw, 21, 5)
    with pytest.raises(RecordDecodeError):
        decode_batch(_with_crc(raw))


def test_decompression_bomb_bound() -> None:
    raw = build_batch([(None, b"\x00" * 1_000_000, [], 1)], compression=CompressionType.ZSTD)
    with pytest.raises(RecordDecodeError, match="exceeds"):
        decode_batch(raw, max_uncompressed_size=100_000)
    assert decode_batch(raw, max_uncompressed_size=2_000_000).records[0].value == b"\x00" * 1_000_000


# --- property tests -------------------------------------------------------------------------------

_bytes_or_none = st.none() | st.binary(max_size=64)
_headers = st.lists(st.tuples(st.text(max_size=8), _bytes_or_none), max_size=3)
_record = st.tuples(_bytes_or_none, _bytes_or_none, _headers, st.integers(-(2**40), 2**41))


@settings(max_examples=150, deadline=None)
@given(
    records=st.lists(_record, min_size=1, max_size=8),
    codec=st.sampled_from(CODECS),
    xerial=st.booleans(),
    base_offset=st.integers(0, 2**62),
)
def test_random_records_round_trip(
    records: list[tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]], int]],
    codec: CompressionType,
    xerial: bool,
    base_offset: int,
) -> None:
    raw = build_batch(records, base_offset=base_offset, compression=codec, xerial_snappy=xerial)
    (b,) = decode_batches(raw + raw[:10])
    assert isinstance(b, DecodedBatch)
    assert [(r.key, r.value, list(r.headers), r.timestamp) for r in b.records] == records
    assert [r.offset for r in b.records] == list(range(base_offset, base_offset + len(records)))
    assert b.max_timestamp == max(r[3] for r in records)


@settings(max_examples=400, deadline=None)
@given(st.binary(max_size=200))
def test_random_bytes_raise_only_validation_error(data: bytes) -> None:
    for verify_crc in (True, False):
        with contextlib.suppress(RecordValidationError):
            decode_batch(data, verify_crc=verify_crc)
        with contextlib.suppress(RecordValidationError):
            decode_batches(data, verify_crc=verify_crc)


_VALID = [
    build_batch(SAMPLE, compression=codec, xerial_snappy=xerial)
    for codec in CODECS
    for xerial in (False, True)
]


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    which=st.sampled_from(range(len(_VALID))),
    edits=st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), min_size=1, max_size=4),
    cut=st.integers(0, 10_000),
)
def test_mutated_batches_raise_only_validation_error(
    which: int, edits: list[tuple[int, int]], cut: int
) -> None:
    # Mutations after the header, with the CRC check off, drive garbage into the record decoder and
    # the codecs rather than stopping at the CRC.
    raw = bytearray(_VALID[which])
    for pos, byte in edits:
        raw[HEADER_SIZE + pos % (len(raw) - HEADER_SIZE)] = byte
    short = raw[: max(HEADER_SIZE, len(raw) - cut % 40)]
    struct.pack_into(">i", short, 8, len(short) - 12)  # keep batch_length consistent with the cut
    for candidate in (bytes(raw), bytes(short)):
        with contextlib.suppress(RecordValidationError):
            decode_batch(candidate, verify_crc=False)
