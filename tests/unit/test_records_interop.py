"""Cross-checks against kafka-python's independent record implementation (an oracle in tests only).

(a) batches written by kafka-python's ``DefaultRecordBatchBuilder`` decode with ours, for every codec;
(b) batches written by our builder decode with kafka-python's ``MemoryRecords`` reader;
plus zigzag varints against kafka-python's ``kafka.record.util``.
"""

from __future__ import annotations

import warnings
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from strom.protocol.records.builder import build_batch, decode_batch, decode_batches
from strom.protocol.records.compression import CompressionType
from strom.protocol.records.record import decode_varlong, encode_varlong

# Importing kafka-python loads its JSON specs through a deprecated importlib.resources call; the
# warning is attributed to importlib, so pyproject's "ignore::DeprecationWarning:kafka.*" misses it.
with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka.record import MemoryRecords
    from kafka.record.default_records import DefaultRecordBatchBuilder
    from kafka.record.util import decode_varint as kp_decode_varint
    from kafka.record.util import encode_varint as kp_encode_varint

CODECS = list(CompressionType)

RecordTuple = tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]], int]

# Compressible, so kafka-python keeps the codec (it falls back to NONE when compression does not help).
SAMPLE: list[RecordTuple] = [
    (
        b"user-1",
        b'{"event": "click", "page": "/home"}' * 20,
        [("trace-id", b"abc"), ("empty", None)],
        1_700_000_000_000,
    ),
    (None, b"value without key " * 30, [], 1_700_000_000_050),
    (b"user-3", None, [("k", b"")], 1_699_999_999_000),
    (b"user-4", b"x" * 5000, [], 1_700_000_000_020),
]


def _kafka_python_batch(
    records: list[RecordTuple],
    codec: int,
    *,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    transactional: bool = False,
) -> bytes:
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=codec,
        is_transactional=transactional,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        batch_size=1 << 30,
    )
    for offset, (key, value, headers, ts) in enumerate(records):
        assert builder.append(offset, timestamp=ts, key=key, value=value, headers=headers) is not None
    return bytes(builder.build())


def _kafka_python_read(buf: bytes) -> list[tuple[Any, list[tuple[Any, ...]]]]:
    """[(batch, [(offset, timestamp, key, value, headers)])] via kafka-python's reader, CRC checked."""
    out = []
    records = MemoryRecords(buf)
    while records.has_next():
        batch = records.next_batch()
        assert batch.validate_crc()
        out.append((batch, [(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in batch]))
    return out


@pytest.mark.parametrize("codec", CODECS)
def test_kafka_python_batches_decode_with_ours(codec: CompressionType) -> None:
    raw = _kafka_python_batch(SAMPLE, codec, producer_id=77, producer_epoch=2, base_sequence=30)
    batch = decode_batch(raw)
    assert batch.compression is codec  # the oracle really compressed
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (77, 2, 30)
    assert (batch.records_count, batch.last_offset_delta) == (4, 3)
    assert batch.max_timestamp == 1_700_000_000_050
    assert [(r.offset, r.key, r.value, list(r.headers), r.timestamp) for r in batch.records] == [
        (i, k, v, h, ts) for i, (k, v, h, ts) in enumerate(SAMPLE)
    ]


def test_kafka_python_snappy_is_xerial_and_decodes() -> None:
    raw = _kafka_python_batch(SAMPLE, CompressionType.SNAPPY)
    assert raw[61:69] == b"\x82SNAPPY\x00"  # kafka-python writes the Java (xerial) framing
    assert decode_batch(raw).records[0].key == b"user-1"


def test_kafka_python_transactional_batch() -> None:
    raw = _kafka_python_batch(SAMPLE[:1], CompressionType.NONE, producer_id=1, producer_epoch=0,
                              base_sequence=0, transactional=True)  # fmt: skip
    assert decode_batch(raw).is_transactional


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("xerial", [False, True])
def test_our_batches_decode_with_kafka_python(codec: CompressionType, xerial: bool) -> None:
    raw = build_batch(
        SAMPLE, base_offset=1000, compression=codec, xerial_snappy=xerial,
        producer_id=5, producer_epoch=1, base_sequence=7, partition_leader_epoch=3, is_transactional=True,
    )  # fmt: skip
    ((batch, records),) = _kafka_python_read(raw)
    assert batch.compression_type == codec
    assert (batch.base_offset, batch.last_offset_delta, batch.records_count) == (1000, 3, 4)
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (5, 1, 7)
    assert batch.leader_epoch == 3 and batch.is_transactional and not batch.is_control_batch
    assert batch.max_timestamp == 1_700_000_000_050
    assert records == [(1000 + i, ts, k, v, h) for i, (k, v, h, ts) in enumerate(SAMPLE)]


def test_our_log_append_time_batch_with_kafka_python() -> None:
    raw = build_batch(SAMPLE, timestamp_type=1, max_timestamp=42)
    ((batch, records),) = _kafka_python_read(raw)
    assert batch.timestamp_type == 1
    assert [r[1] for r in records] == [42] * len(SAMPLE)


def test_several_batches_and_partial_tail_both_readers() -> None:
    buf = b"".join(
        build_batch(SAMPLE, base_offset=i * 4, compression=codec) for i, codec in enumerate(CODECS)
    )
    tail = build_batch(SAMPLE[:1], base_offset=100)[:-5]
    ours = decode_batches(buf + tail)
    theirs = _kafka_python_read(buf + tail)
    assert len(ours) == len(theirs) == len(CODECS)
    for mine, (_, recs) in zip(ours, theirs, strict=True):
        assert [(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in mine.records] == recs


_bytes_or_none = st.none() | st.binary(max_size=40)
_record = st.tuples(
    _bytes_or_none,
    _bytes_or_none,
    st.lists(st.tuples(st.text(max_size=6), _bytes_or_none), max_size=3),
    st.integers(0, 2**45),
)


@settings(max_examples=100, deadline=None)
@given(records=st.lists(_record, min_size=1, max_size=6), codec=st.sampled_from(CODECS))
def test_random_records_both_directions(records: list[RecordTuple], codec: CompressionType) -> None:
    ours = build_batch(records, compression=codec)
    ((_, theirs_view),) = _kafka_python_read(ours)
    assert theirs_view == [(i, ts, k, v, h) for i, (k, v, h, ts) in enumerate(records)]

    theirs = _kafka_python_batch(records, codec)
    decoded = decode_batch(theirs)
    assert [(r.key, r.value, list(r.headers), r.timestamp) for r in decoded.records] == records


@given(st.integers(-(2**63), 2**63 - 1))
def test_varlong_matches_kafka_python(value: int) -> None:
    theirs = bytearray()
    kp_encode_varint(value, theirs.append)
    assert encode_varlong(value) == bytes(theirs)
    assert kp_decode_varint(encode_varlong(value), 0) == decode_varlong(bytes(theirs))
