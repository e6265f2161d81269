"""The native (polars) Avro block decoder against fastavro: same columns, or a refusal that falls back."""

from __future__ import annotations

import io
import json
from typing import Any

import pyarrow as pa
import pytest
from fastavro import parse_schema, schemaless_reader, schemaless_writer
from hypothesis import given, settings
from hypothesis import strategies as st

from strom.spark import avro_native
from strom.spark.avro_codec import AvroColumnDecoder, AvroDecodeError, arrow_type, frame
from strom.spark.avro_types import spark_type


def record(fields: list[dict[str, Any]], name: str = "R") -> dict[str, Any]:
    return {"type": "record", "name": name, "namespace": "t", "fields": fields}


def encode(schema: Any, datum: Any) -> bytes:
    buffer = io.BytesIO()
    schemaless_writer(buffer, parse_schema(schema), datum)
    return buffer.getvalue()


def by_fastavro(writer: Any, reader: Any, bodies: list[bytes]) -> list[Any]:
    parsed_writer, parsed_reader = parse_schema(writer), parse_schema(reader)
    rows = [schemaless_reader(io.BytesIO(b), parsed_writer, parsed_reader) for b in bodies]
    return pa.array(rows, type=arrow_type(spark_type(reader))).to_pylist()


def natively(writer: Any, reader: Any, bodies: list[bytes]) -> list[Any]:
    native = avro_native.plan(writer, reader)
    assert native is not None
    lengths = pa.array([len(b) for b in bodies], pa.int64())
    return avro_native.decode(native, b"".join(bodies), lengths, arrow_type(spark_type(reader))).to_pylist()


WRITER = record(
    [
        {"name": "flag", "type": "boolean"},
        {"name": "small", "type": "int"},
        {"name": "big", "type": "long"},
        {"name": "ratio", "type": "float"},
        {"name": "exact", "type": "double"},
        {"name": "text", "type": "string"},
        {"name": "blob", "type": "bytes"},
        {"name": "maybe", "type": ["null", "string"]},
        {"name": "later", "type": ["null", "long"]},
        {"name": "score", "type": ["null", "double"]},
        {"name": "gone", "type": "string"},
    ]
)
# Every resolution the native path covers: promotions, string <-> bytes, an alias, a dropped field
# (gone), defaults (null, number, string, boolean), non-null into nullable.
READER = record(
    [
        {"name": "flag", "type": ["null", "boolean"]},
        {"name": "small", "type": "long"},
        {"name": "big", "type": "double"},
        {"name": "ratio", "type": "double"},
        {"name": "exact", "type": "double"},
        {"name": "text_bytes", "type": "bytes", "aliases": ["text"]},
        {"name": "blob", "type": "string"},
        {"name": "maybe", "type": ["null", "string"]},
        {"name": "later", "type": ["null", "long"]},
        {"name": "score", "type": ["null", "double"]},
        {"name": "added_null", "type": ["null", "int"], "default": None},
        {"name": "added_int", "type": "int", "default": 7},
        {"name": "added_float", "type": "float", "default": 1},
        {"name": "added_text", "type": "string", "default": "unknown"},
        {"name": "added_flag", "type": "boolean", "default": True},
    ]
)
INT64 = st.integers(-(2**63), 2**63 - 1)
INT32 = st.integers(-(2**31), 2**31 - 1)
DATUM = st.fixed_dictionaries(
    {
        "flag": st.booleans(),
        "small": INT32,
        "big": INT64,
        "ratio": st.floats(width=32, allow_nan=False),
        "exact": st.floats(allow_nan=False),
        "text": st.text(max_size=200),
        "blob": st.text(max_size=20).map(str.encode),  # read back as a string: valid UTF-8
        "maybe": st.none() | st.text(max_size=5),
        "later": st.none() | INT64,
        "score": st.none() | st.floats(allow_nan=False),
        "gone": st.text(max_size=130),
    }
)


@settings(max_examples=60, deadline=None)
@given(st.lists(DATUM, min_size=1, max_size=40))
def test_native_equals_fastavro_with_resolution(data: list[dict[str, Any]]) -> None:
    bodies = [encode(WRITER, d) for d in data]
    assert natively(WRITER, READER, bodies) == by_fastavro(WRITER, READER, bodies)
    assert natively(WRITER, WRITER, bodies) == by_fastavro(WRITER, WRITER, bodies)


@pytest.mark.parametrize(
    ("writer_field", "reader_field"),
    [
        ({"name": "a", "type": "long"}, {"name": "a", "type": "int"}),  # narrowing
        ({"name": "a", "type": ["null", "int"]}, {"name": "a", "type": "int"}),  # a null would fail
        ({"name": "b", "type": "int"}, {"name": "a", "type": "int"}),  # missing, no default
        ({"name": "b", "type": "int"}, {"name": "a", "type": "bytes", "default": "\u00ff"}),
        ({"name": "a", "type": {"type": "enum", "name": "E", "symbols": ["X"]}},) * 2,
        ({"name": "a", "type": {"type": "array", "items": "int"}},) * 2,
        ({"name": "a", "type": {"type": "map", "values": "int"}},) * 2,
        ({"name": "a", "type": record([{"name": "x", "type": "int"}], "N")},) * 2,
        ({"name": "a", "type": {"type": "long", "logicalType": "timestamp-millis"}},) * 2,
        ({"name": "a", "type": ["null", "int", "string"]},) * 2,
        ({"name": "a", "type": ["int", "null"]},) * 2,  # polars misreads a union with null second
        ({"name": "a", "type": {"type": "fixed", "name": "F", "size": 2}},) * 2,
    ],
)
def test_what_the_native_path_does_not_cover(writer_field: Any, reader_field: Any) -> None:
    assert avro_native.plan(record([writer_field]), record([reader_field])) is None


def test_records_of_other_names_are_not_resolved_natively() -> None:
    fields = [{"name": "a", "type": "int"}]
    assert avro_native.plan(record(fields, "A"), record(fields, "B")) is None
    assert avro_native.plan(record(fields, "A"), record(fields, "A")) is not None


@pytest.mark.parametrize(
    "bad",
    [
        lambda body: body + b"\x00",  # a byte left over: the next record would shift
        lambda body: body[:-1],  # truncated
        lambda body: b"\x80\x00" + body[1:],  # an overlong varint fastavro reads; refused, not misread
    ],
)
def test_a_body_that_is_not_exactly_one_record_is_refused(bad: Any) -> None:
    writer = record([{"name": "n", "type": "int"}, {"name": "s", "type": "string"}])
    bodies = [encode(writer, {"n": 0, "s": "abc"}), encode(writer, {"n": 5, "s": "xy"})]
    bodies[0] = bad(bodies[0])
    native = avro_native.plan(writer, writer)
    assert native is not None
    lengths = pa.array([len(b) for b in bodies], pa.int64())
    with pytest.raises(avro_native.NativeDecodeError):
        avro_native.decode(native, b"".join(bodies), lengths, arrow_type(spark_type(writer)))


@pytest.mark.parametrize(
    ("field", "good", "bad"),
    [
        ("boolean", True, b"\x02"),  # polars reads false, fastavro true
        (["null", "long"], 7, b"\x04\x0e"),  # union index 2: polars reads 7, fastavro refuses
        (["null", "long"], 7, b"\x01\x0e"),  # union index -1
        (["null", "boolean"], False, b"\x02\x03"),  # the value's byte after the union's
    ],
)
def test_a_malformed_boolean_or_union_index_is_refused_and_decoded_as_fastavro_does(
    field: Any, good: Any, bad: bytes
) -> None:
    writer = record([{"name": "s", "type": "string"}, {"name": "x", "type": field}])
    bodies = [encode(writer, {"s": "ab", "x": good}) for _ in range(3)]
    assert natively(writer, writer, bodies) == by_fastavro(writer, writer, bodies)
    bodies[1] = encode(writer, {"s": "cd", "x": None if isinstance(field, list) else good})[:3] + bad
    with pytest.raises(avro_native.NativeDecodeError):
        natively(writer, writer, bodies)
    # The Spark source's decoder falls back to fastavro: its value, or fastavro's refusal naming the record.
    decoder = AvroColumnDecoder(json.dumps(writer), 1, spark_type(writer), "value")
    payloads = pa.array([frame(1, b) for b in bodies], pa.binary())
    try:
        expected = by_fastavro(writer, writer, bodies)
    except Exception:
        with pytest.raises(AvroDecodeError, match="offset 1 of t-0"):
            decoder.decode(
                payloads, pa.array(range(3), pa.int64()), "t", 0, {1: json.dumps(writer)}.__getitem__
            )
        return
    column = decoder.decode(
        payloads, pa.array(range(3), pa.int64()), "t", 0, {1: json.dumps(writer)}.__getitem__
    )
    assert column.to_pylist() == expected


def test_the_decoder_uses_the_native_path_and_falls_back_to_name_a_bad_record() -> None:
    v1 = record([{"name": "user", "type": "string"}, {"name": "n", "type": "int"}])
    v2 = record(
        [
            {"name": "user", "type": "string"},
            {"name": "n", "type": "long"},
            {"name": "country", "type": "string", "default": "unknown"},
        ]
    )
    registry = {1: json.dumps(v1), 2: json.dumps(v2)}
    decoder = AvroColumnDecoder(registry[2], 2, spark_type(v2), "value")
    payloads: list[bytes | None] = [
        frame(1, encode(v1, {"user": "ann", "n": 1}))
        if i % 2
        else frame(2, encode(v2, {"user": "bo", "n": i}))
        for i in range(20)
    ]
    payloads[5] = None
    column = decoder.decode(
        pa.array(payloads, pa.binary()), pa.array(range(20), pa.int64()), "t", 0, registry.__getitem__
    )
    column.validate(full=True)
    assert decoder._native[1] is not None and decoder._native[2] is not None
    expected = [
        None
        if i == 5
        else {"user": "ann", "n": 1, "country": "unknown"}
        if i % 2
        else {"user": "bo", "n": i, "country": "unknown"}
        for i in range(20)
    ]
    assert column.to_pylist() == expected
    grouped = decoder._decode_groups_natively(pa.array(payloads, pa.binary()), registry.__getitem__)
    assert grouped is not None and grouped.to_pylist() == expected  # no Python object per record
    payloads[8] = frame(2, encode(v2, {"user": "x", "n": 1, "country": "c"}) + b"\x00")
    with pytest.raises(AvroDecodeError, match="offset 8 of t-0"):
        decoder.decode(
            pa.array(payloads, pa.binary()), pa.array(range(20), pa.int64()), "t", 0, registry.__getitem__
        )
