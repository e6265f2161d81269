"""Record batch v2 header: parse, validate, patch; garbage raises only RecordValidationError."""

from __future__ import annotations

import contextlib
import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st
from test_storage_support import make_batch

from strom.protocol.errors import ErrorCode
from strom.protocol.records.batch import (
    HEADER_SIZE,
    RecordValidationError,
    crc_ok,
    iter_headers,
    pack_header,
    patch_base_offset,
    patch_leader_epoch,
    peek_offsets,
    read_header,
    seal_crc,
    set_log_append_time,
    stamp_offsets,
    uses_codec,
    validate_client_batches,
)

MAX = 1_048_588


def test_read_header_fields() -> None:
    raw = make_batch(count=3, timestamps=[5, 9, 7], producer_id=42, producer_epoch=1, base_sequence=10)
    h = read_header(raw)
    assert (h.magic, h.records_count, h.last_offset_delta, h.size) == (2, 3, 2, len(raw))
    assert (h.base_timestamp, h.max_timestamp) == (5, 9)
    assert (h.producer_id, h.producer_epoch, h.base_sequence, h.last_sequence) == (42, 1, 10, 12)
    assert (h.last_offset, h.next_offset) == (2, 3)
    assert h.compression == 0 and h.timestamp_type == 0 and not h.is_control and not h.is_transactional
    assert crc_ok(raw, 0, h)


def test_attribute_properties() -> None:
    h = read_header(make_batch(attributes=0x08 | 0x10 | 0x20 | 3))
    assert h.compression == 3 and h.timestamp_type == 1 and h.is_transactional and h.is_control


def test_last_sequence_wraps() -> None:
    h = read_header(make_batch(count=3, producer_id=1, producer_epoch=0, base_sequence=2**31 - 2))
    assert h.last_sequence == 0


@pytest.mark.parametrize("cut", [0, 10, 60])
def test_read_header_truncated(cut: int) -> None:
    with pytest.raises(RecordValidationError) as err:
        read_header(make_batch()[:cut])
    assert err.value.code is ErrorCode.CORRUPT_MESSAGE


def test_iter_headers_stops_at_partial_tail() -> None:
    a, b = make_batch(count=2), make_batch(count=3)
    buf = a + b + make_batch()[:70]
    assert [(p, h.records_count) for p, h in iter_headers(buf)] == [(0, 2), (len(a), 3)]


def test_validate_accepts_several_uncompressed_batches() -> None:
    a, b = make_batch(count=2), make_batch(count=5)
    assert [p for p, _ in validate_client_batches(a + b, MAX)] == [0, len(a)]


def _code(buf: bytes, max_bytes: int = MAX) -> ErrorCode:
    with pytest.raises(RecordValidationError) as err:
        validate_client_batches(buf, max_bytes)
    return err.value.code


def _with_magic(magic: int) -> bytes:
    raw = bytearray(make_batch())
    raw[16] = magic
    return bytes(raw)


def test_validate_errors() -> None:
    raw = make_batch(count=2)
    assert _code(raw, len(raw) - 1) is ErrorCode.MESSAGE_TOO_LARGE
    assert _code(_with_magic(1)) is ErrorCode.UNSUPPORTED_FOR_MESSAGE_FORMAT
    assert _code(_with_magic(7)) is ErrorCode.CORRUPT_MESSAGE
    flipped = bytearray(raw)
    flipped[-1] ^= 1
    assert _code(bytes(flipped)) is ErrorCode.CORRUPT_MESSAGE
    assert _code(raw + raw[:30]) is ErrorCode.CORRUPT_MESSAGE
    assert _code(raw[:-1]) is ErrorCode.CORRUPT_MESSAGE
    assert _code(b"") is ErrorCode.CORRUPT_MESSAGE
    assert _code(make_batch(count=2, last_offset_delta=0)) is ErrorCode.INVALID_RECORD
    assert _code(make_batch(values=[], records_count=0, last_offset_delta=-1)) is ErrorCode.INVALID_RECORD
    assert _code(make_batch(attributes=0x20)) is ErrorCode.INVALID_RECORD
    assert _code(make_batch(producer_id=5, producer_epoch=0, base_sequence=-1)) is ErrorCode.INVALID_RECORD
    compressed = make_batch(attributes=1)
    assert validate_client_batches(compressed, MAX)
    assert _code(compressed + compressed) is ErrorCode.INVALID_RECORD


def test_bad_length_field_is_corrupt() -> None:
    raw = bytearray(make_batch())
    struct.pack_into(">i", raw, 8, 10)
    assert _code(bytes(raw)) is ErrorCode.CORRUPT_MESSAGE


def test_patches_keep_crc_valid() -> None:
    buf = bytearray(make_batch(count=4, timestamp=100))
    patch_base_offset(buf, 0, 1234)
    patch_leader_epoch(buf, 0, 7)
    h = read_header(buf)
    assert (h.base_offset, h.partition_leader_epoch, h.last_offset) == (1234, 7, 1237)
    assert crc_ok(buf, 0, h)
    set_log_append_time(memoryview(buf), 0, 99_999)
    h2 = read_header(buf)
    assert h2.timestamp_type == 1 and h2.max_timestamp == 99_999 and h2.base_timestamp == 100
    assert crc_ok(buf, 0, h2)
    assert validate_client_batches(buf, MAX)


def test_stamp_offsets_writes_offset_and_epoch_only() -> None:
    buf = bytearray(make_batch(count=3, leader_epoch=-1) * 2)
    second = len(buf) // 2
    stamp_offsets(buf, second, read_header(buf, second), 500, 9)
    first, h = read_header(buf, 0), read_header(buf, second)
    assert (first.base_offset, first.partition_leader_epoch) == (0, -1)
    assert (h.base_offset, h.partition_leader_epoch, h.batch_length) == (500, 9, first.batch_length)
    assert crc_ok(buf, second, h)


def test_peek_offsets_matches_read_header() -> None:
    raw = make_batch(count=7, base_offset=42)
    h = read_header(raw)
    assert (
        peek_offsets(raw, 0) == (h.base_offset, h.batch_length, h.last_offset_delta) == (42, h.size - 12, 6)
    )


def test_uses_codec_checks_every_header() -> None:
    plain, lz4, zstd = make_batch(), make_batch(attributes=3), make_batch(attributes=4)
    assert uses_codec(plain + zstd, 4) and not uses_codec(plain + lz4, 4)
    assert uses_codec(lz4, 3) and not uses_codec(None, 4) and not uses_codec(b"", 0)
    assert not uses_codec(zstd[:60], 4)  # a short tail is left to validation
    bad = bytearray(plain)
    struct.pack_into(">i", bad, 8, 0)
    assert not uses_codec(bytes(bad) + zstd, 4)  # a zero length stops the walk instead of looping


def test_pack_header_and_seal_crc_build_a_valid_batch() -> None:
    raw = bytearray(make_batch(count=2, producer_id=7, producer_epoch=1, base_sequence=3, timestamp=5))
    h = read_header(raw)
    rebuilt = bytearray(raw)
    rebuilt[:HEADER_SIZE] = bytes(HEADER_SIZE)
    pack_header(
        rebuilt,
        0,
        base_offset=h.base_offset,
        batch_length=h.batch_length,
        partition_leader_epoch=h.partition_leader_epoch,
        attributes=h.attributes,
        last_offset_delta=h.last_offset_delta,
        base_timestamp=h.base_timestamp,
        max_timestamp=h.max_timestamp,
        producer_id=h.producer_id,
        producer_epoch=h.producer_epoch,
        base_sequence=h.base_sequence,
        records_count=h.records_count,
    )
    assert read_header(rebuilt).crc == 0
    seal_crc(rebuilt)
    assert rebuilt == raw


def test_memoryview_input() -> None:
    raw = make_batch(count=2) * 2
    assert len(validate_client_batches(memoryview(raw), MAX)) == 2
    assert read_header(memoryview(raw), len(raw) // 2).records_count == 2


@given(st.binary(max_size=300), st.integers(min_value=0, max_value=2_000_000))
def test_garbage_raises_only_record_validation_error(data: bytes, max_bytes: int) -> None:
    with contextlib.suppress(RecordValidationError):
        validate_client_batches(data, max_bytes)
    try:
        read_header(data, 0)
        list(iter_headers(data))
    except RecordValidationError:
        pass


@given(st.data())
def test_mutated_valid_batch_raises_only_record_validation_error(data: st.DataObject) -> None:
    raw = bytearray(make_batch(count=3))
    idx = data.draw(st.integers(min_value=0, max_value=len(raw) - 1))
    raw[idx] = data.draw(st.integers(min_value=0, max_value=255))
    cut = data.draw(st.integers(min_value=0, max_value=len(raw)))
    with contextlib.suppress(RecordValidationError):
        validate_client_batches(bytes(raw[:cut]), MAX)


def test_header_size_constant() -> None:
    assert HEADER_SIZE == 61
