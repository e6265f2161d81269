"""Typed Avro columns without Spark or a registry: type mapping, wire format, decoding with resolution."""

from __future__ import annotations

import datetime as dt
import io
import json
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pytest
from fastavro import parse_schema, reader, schemaless_writer
from hypothesis import given
from hypothesis import strategies as st
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampNTZType,
    TimestampType,
)

from strom.spark import avro_container
from strom.spark.avro_codec import AvroColumnDecoder, AvroColumnEncoder, AvroDecodeError, frame, split
from strom.spark.avro_types import AvroTypeError, avro_schema, spark_type
from strom.spark.options import KafkaOptionError
from strom.spark.typed_options import parse_typed_options

V1 = {
    "type": "record",
    "name": "Click",
    "namespace": "shop",
    "fields": [{"name": "user", "type": "string"}, {"name": "latency_ms", "type": "int"}],
}
V2 = {
    **V1,
    "fields": [
        {"name": "user", "type": "string"},
        {"name": "latency_ms", "type": "long"},  # promoted: int -> long
        {"name": "country", "type": "string", "default": "unknown"},
        {"name": "referrer", "type": ["null", "string"], "default": None},
    ],
}


def avro_bytes(schema: Any, datum: Any) -> bytes:
    buffer = io.BytesIO()
    schemaless_writer(buffer, parse_schema(schema), datum)
    return buffer.getvalue()


@pytest.mark.parametrize(
    ("avro", "spark"),
    [
        ("boolean", BooleanType()),
        ("int", IntegerType()),
        ("long", LongType()),
        ("float", FloatType()),
        ("double", DoubleType()),
        ("bytes", BinaryType()),
        ("string", StringType()),
        ({"type": "string", "logicalType": "uuid"}, StringType()),
        ({"type": "int", "logicalType": "date"}, DateType()),
        ({"type": "long", "logicalType": "timestamp-millis"}, TimestampType()),
        ({"type": "long", "logicalType": "timestamp-micros"}, TimestampType()),
        ({"type": "long", "logicalType": "local-timestamp-micros"}, TimestampNTZType()),
        ({"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2}, DecimalType(10, 2)),
        (
            {"type": "fixed", "name": "D", "size": 8, "logicalType": "decimal", "precision": 18, "scale": 4},
            DecimalType(18, 4),
        ),
        ({"type": "enum", "name": "Color", "symbols": ["RED", "GREEN"]}, StringType()),
        ({"type": "fixed", "name": "Hash", "size": 16}, BinaryType()),
        ({"type": "array", "items": "int"}, ArrayType(IntegerType(), False)),
        ({"type": "array", "items": ["null", "int"]}, ArrayType(IntegerType(), True)),
        ({"type": "map", "values": "long"}, MapType(StringType(), LongType(), False)),
        (["int", "long"], LongType()),
        (["null", "float", "double"], DoubleType()),
    ],
)
def test_avro_to_spark_type(avro: Any, spark: Any) -> None:
    assert spark_type(avro) == spark


def test_records_nested_named_types_and_nullability() -> None:
    schema = {
        "type": "record",
        "name": "Order",
        "namespace": "shop",
        "fields": [
            {"name": "id", "type": "long"},
            {"name": "note", "type": ["null", "string"], "default": None},
            {
                "name": "ship_to",
                "type": {"type": "record", "name": "Address", "fields": [{"name": "city", "type": "string"}]},
            },
            {"name": "bill_to", "type": ["null", "Address"]},  # a reference, resolved in the namespace
            {"name": "bill_to_again", "type": "shop.Address"},
        ],
    }
    address = StructType([StructField("city", StringType(), False)])
    assert spark_type(schema) == StructType(
        [
            StructField("id", LongType(), False),
            StructField("note", StringType(), True),
            StructField("ship_to", address, False),
            StructField("bill_to", address, True),
            StructField("bill_to_again", address, False),
        ]
    )


@pytest.mark.parametrize(
    "avro",
    [
        {"type": "record", "name": "Node", "fields": [{"name": "next", "type": ["null", "Node"]}]},
        "Unknown",
        {"type": "bytes", "logicalType": "decimal", "precision": 40, "scale": 0},
    ],
)
def test_types_without_a_spark_counterpart_are_refused(avro: Any) -> None:
    with pytest.raises(AvroTypeError):
        spark_type(avro)


def test_spark_to_avro_and_back() -> None:
    struct = StructType(
        [
            StructField("user", StringType(), False),
            StructField("n", LongType(), True),
            StructField("at", TimestampType(), True),
            StructField("day", DateType(), True),
            StructField("price", DecimalType(12, 3), True),
            StructField("tags", ArrayType(StringType(), True), True),
            StructField("attrs", MapType(StringType(), IntegerType(), False), True),
            StructField("inner", StructType([StructField("x", DoubleType(), False)]), True),
        ]
    )
    schema = avro_schema(struct)
    parse_schema(schema)  # a valid Avro schema
    assert schema["name"] == "topLevelRecord"
    assert spark_type(schema) == struct


def test_wire_format() -> None:
    assert frame(258, b"body") == b"\x00\x00\x00\x01\x02body"
    schema_id, body = split(b"\x00\x00\x00\x01\x02body")
    assert (schema_id, bytes(body)) == (258, b"body")
    with pytest.raises(ValueError, match="magic byte 1"):
        split(b"\x01\x00\x00\x00\x01x")
    with pytest.raises(ValueError, match="shorter"):
        split(b"\x00\x00")


@given(st.integers(-(2**31), 2**31 - 1), st.binary(max_size=64))
def test_wire_format_round_trip(schema_id: int, body: bytes) -> None:
    got_id, got_body = split(frame(schema_id, body))
    assert (got_id, bytes(got_body)) == (schema_id, body)


def binary(payloads: list[bytes | None]) -> pa.Array:
    return pa.array(payloads, pa.binary())


def offsets(values: list[int]) -> pa.Array:
    return pa.array(values, pa.int64())


def decoder_v2() -> tuple[AvroColumnDecoder, dict[int, str]]:
    registry = {1: json.dumps(V1), 2: json.dumps(V2)}
    return AvroColumnDecoder(registry[2], 2, spark_type(V2), "value"), registry


@given(st.integers(-(2**63), 2**63 - 1))
def test_container_long_encoding_is_avros(n: int) -> None:
    out = io.BytesIO()
    schemaless_writer(out, parse_schema("long"), n)
    assert avro_container.zigzag(n) == out.getvalue()


def test_a_container_block_reads_back_with_fastavro() -> None:
    rows = [{"user": "a", "latency_ms": 1}, {"user": "b", "latency_ms": -300}]
    data = b"".join(avro_bytes(V1, row) for row in rows)
    block = avro_container.block(avro_container.header(parse_schema(V1)), len(rows), data)
    assert list(reader(io.BytesIO(block))) == rows


def test_old_records_resolve_to_the_reader_schema_with_defaults() -> None:
    decoder, registry = decoder_v2()
    payloads: list[bytes | None] = [
        frame(1, avro_bytes(V1, {"user": "ann", "latency_ms": 40})),
        frame(2, avro_bytes(V2, {"user": "bob", "latency_ms": 2**40, "country": "de", "referrer": "x"})),
        None,
    ]
    looked_up: list[int] = []

    def lookup(schema_id: int) -> str:
        looked_up.append(schema_id)
        return registry[schema_id]

    column = decoder.decode(binary(payloads), offsets([10, 11, 12]), "clicks", 0, lookup)
    assert column.to_pylist() == [
        {"user": "ann", "latency_ms": 40, "country": "unknown", "referrer": None},
        {"user": "bob", "latency_ms": 2**40, "country": "de", "referrer": "x"},
        None,
    ]
    assert looked_up == [1]  # the reader's own id needs no lookup
    decoder.decode(binary(payloads), offsets([10, 11, 12]), "clicks", 0, lookup)
    assert looked_up == [1]  # writers' schemas are cached


@pytest.mark.parametrize(
    ("payload", "reason"),
    [
        (b"garbage", "magic byte"),
        (b"\x00\x00", "shorter"),
        (frame(7, b"\x02a"), "no schema 7"),
        (frame(2, b"\x06ab"), "EOF|Error"),  # string length 3, only 2 bytes
        (frame(2, avro_bytes(V2, {"user": "a", "latency_ms": 1, "country": "c"}) + b"\x00"), "left after"),
    ],
)
def test_corrupt_payload_names_topic_partition_offset(payload: bytes, reason: str) -> None:
    decoder, registry = decoder_v2()

    def lookup(schema_id: int) -> str:
        if schema_id not in registry:
            raise KeyError(f"no schema {schema_id}")
        return registry[schema_id]

    good = frame(2, avro_bytes(V2, {"user": "a", "latency_ms": 1, "country": "c"}))
    with pytest.raises(AvroDecodeError, match="offset 43 of clicks-5") as raised:
        decoder.decode(binary([good, payload]), offsets([42, 43]), "clicks", 5, lookup)
    assert raised.match(reason)


def test_logical_types_decode_into_arrow() -> None:
    schema = {
        "type": "record",
        "name": "R",
        "fields": [
            {"name": "day", "type": {"type": "int", "logicalType": "date"}},
            {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
            {
                "name": "price",
                "type": {"type": "bytes", "logicalType": "decimal", "precision": 9, "scale": 2},
            },
            {"name": "color", "type": {"type": "enum", "name": "C", "symbols": ["RED", "BLUE"]}},
            {"name": "attrs", "type": {"type": "map", "values": "int"}},
        ],
    }
    at = dt.datetime(2026, 11, 24, 12, 0, 0, 123000, tzinfo=dt.UTC)
    datum = {
        "day": dt.date(2026, 11, 24),
        "at": at,
        "price": Decimal("12.34"),
        "color": "BLUE",
        "attrs": {"a": 1},
    }
    decoder = AvroColumnDecoder(json.dumps(schema), 5, spark_type(schema), "value")
    column = decoder.decode(binary([frame(5, avro_bytes(schema, datum))]), offsets([0]), "t", 0, str)
    assert column.type.field("at").type == pa.timestamp("us", tz="UTC")
    row = column.to_pylist()[0]
    assert row["day"] == datum["day"] and row["at"] == at and row["price"] == Decimal("12.34")
    assert row["color"] == "BLUE" and row["attrs"] == [("a", 1)]


def test_encoder_round_trips_through_the_decoder() -> None:
    struct = StructType(
        [
            StructField("user", StringType(), False),
            StructField("attrs", MapType(StringType(), LongType(), True), True),
            StructField("score", DoubleType(), True),
        ]
    )
    text = json.dumps(avro_schema(struct))
    rows = [
        {"user": "a", "attrs": {"k": 1, "n": None}, "score": 0.5},
        None,
        {"user": "b", "attrs": None, "score": None},
    ]
    arrow = pa.array(
        rows,
        type=pa.struct(
            [("user", pa.string()), ("attrs", pa.map_(pa.string(), pa.int64())), ("score", pa.float64())]
        ),
    )
    payloads = AvroColumnEncoder(text, 9, struct).encode(arrow).to_pylist()
    assert payloads[1] is None and payloads[0][:5] == b"\x00\x00\x00\x00\x09"
    decoded = AvroColumnDecoder(text, 9, struct, "value").decode(
        binary(payloads), offsets([0, 1, 2]), "t", 0, str
    )
    assert decoded.to_pylist() == [
        {"user": "a", "attrs": [("k", 1), ("n", None)], "score": 0.5},
        None,
        {"user": "b", "attrs": None, "score": None},
    ]


def test_options() -> None:
    base = {"schema.registry.url": "http://r:8081", "schema.registry.basic.auth.user.info": "u:p"}
    avro = parse_typed_options({**base, "valueformat": "avro", "subscribe": "clicks"}, sink=False)
    assert (avro.value_subject, avro.key_subject, avro.auto_register) == ("clicks-value", None, False)
    assert avro.registry_config == {"url": "http://r:8081", "basic.auth.user.info": "u:p"}
    avro = parse_typed_options({**base, "keyformat": "AVRO", "assign": '{"t": [0]}'}, sink=False)
    assert (avro.value_subject, avro.key_subject) == (None, "t-key")
    sink = {**base, "valueformat": "avro", "topic": "out", "auto.register.schemas": "true"}
    avro = parse_typed_options(sink, sink=True)
    assert (avro.value_subject, avro.auto_register) == ("out-value", True)
    named = {**base, "valueformat": "avro", "subscribepattern": "c.*", "valuesubject": "s"}
    assert parse_typed_options(named, sink=False).value_subject == "s"
    assert not parse_typed_options({"subscribe": "t"}, sink=False).enabled


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"valueformat": "xml", "subscribe": "t"}, "valueFormat must be one of"),
        ({"valueformat": "avro", "subscribe": "t"}, "needs the schema.registry.url"),
        ({"valueformat": "avro", "schema.registry.url": "u", "subscribe": "a,b"}, "set valueSubject"),
        ({"valueformat": "avro", "schema.registry.url": "u", "subscribepattern": "a.*"}, "set valueSubject"),
    ],
)
def test_bad_options(options: dict[str, str], message: str) -> None:
    with pytest.raises(KafkaOptionError, match=message):
        parse_typed_options(options, sink=False)


@pytest.mark.parametrize("nulls", [False, True])
def test_many_records_one_schema_and_mixed(nulls: bool) -> None:
    """The one-schema path (whole column at once) and the general path agree with per-record reading."""
    decoder, registry = decoder_v2()
    data = [
        {"user": f"u{i}", "latency_ms": i, "country": "de", "referrer": None if i % 2 else "r"}
        for i in range(500)
    ]
    payloads: list[bytes | None] = [frame(2, avro_bytes(V2, d)) for d in data]
    expected: list[Any] = list(data)
    if nulls:
        payloads[7], expected[7] = None, None
        payloads[8] = frame(1, avro_bytes(V1, {"user": "old", "latency_ms": 3}))
        expected[8] = {"user": "old", "latency_ms": 3, "country": "unknown", "referrer": None}
    column = decoder.decode(binary(payloads), offsets(list(range(500))), "t", 0, registry.__getitem__)
    assert column.to_pylist() == expected


def test_truncated_record_in_a_one_schema_column_is_named() -> None:
    decoder, registry = decoder_v2()
    good = frame(2, avro_bytes(V2, {"user": "abc", "latency_ms": 1, "country": "c"}))
    payloads: list[bytes | None] = [good] * 10
    payloads[6] = good[:-2]
    with pytest.raises(AvroDecodeError, match="offset 106 of t-1"):
        decoder.decode(binary(payloads), offsets(list(range(100, 110))), "t", 1, registry.__getitem__)


def test_a_one_schema_column_is_read_as_one_block() -> None:
    """The common case takes the whole-column path (it swallows its own failures, so check it is used)."""
    decoder, registry = decoder_v2()
    data = [{"user": f"u{i}", "latency_ms": i, "country": "c", "referrer": None} for i in range(50)]
    column = binary([frame(2, avro_bytes(V2, d)) for d in data])
    decoder.decode(column, offsets(list(range(50))), "t", 0, registry.__getitem__)  # prepares the schemas
    found = decoder._decode_one_schema(column, registry.__getitem__, ("t", 0, 0, 49))
    assert found is not None and found.to_pylist() == data
    sliced = column.slice(10, 20)  # an Arrow array with an offset into its buffers
    found = decoder._decode_one_schema(sliced, registry.__getitem__, ("t", 0, 10, 29))
    assert found is not None and found.to_pylist() == data[10:30]


UNIONS = {
    "type": "record",
    "name": "U",
    "namespace": "n",
    "fields": [
        {"name": "id", "type": "int"},
        {
            "name": "v",
            "type": [
                "null",
                "int",
                "string",
                {"type": "record", "name": "P", "fields": [{"name": "x", "type": "long"}]},
            ],
        },
        {
            "name": "w",
            "type": {
                "type": "array",
                "items": ["boolean", "double", {"type": "enum", "name": "E", "symbols": ["A", "B"]}],
            },
        },
    ],
}


def test_general_unions_are_structs_of_members_both_ways() -> None:
    """As Spark's from_avro: member0, member1, ... of the non-null branches; exactly one set."""
    data_type = spark_type(UNIONS)
    assert data_type.simpleString() == (
        "struct<id:int,v:struct<member0:int,member1:string,member2:struct<x:bigint>>,"
        "w:array<struct<member0:boolean,member1:double,member2:string>>>"
    )
    data = [
        {"id": 1, "v": 7, "w": [True, 0.5, "B"]},
        {"id": 2, "v": "seven", "w": []},
        {"id": 3, "v": {"x": 70}, "w": [False]},
        {"id": 4, "v": None, "w": ["A"]},
    ]
    payloads: list[bytes | None] = [frame(3, avro_bytes(UNIONS, d)) for d in data]
    decoder = AvroColumnDecoder(json.dumps(UNIONS), 3, data_type, "value")
    column = decoder.decode(binary(payloads), offsets([0, 1, 2, 3]), "t", 0, str)
    none3 = {"member0": None, "member1": None, "member2": None}
    rows = column.to_pylist()
    assert rows[0] == {
        "id": 1,
        "v": {**none3, "member0": 7},
        "w": [{**none3, "member0": True}, {**none3, "member1": 0.5}, {**none3, "member2": "B"}],
    }
    assert rows[1]["v"] == {**none3, "member1": "seven"} and rows[2]["v"] == {**none3, "member2": {"x": 70}}
    assert rows[3]["v"] is None and rows[2]["w"] == [{**none3, "member0": False}]
    # And back: the encoder writes the set member's branch.
    encoded = AvroColumnEncoder(json.dumps(UNIONS), 3, data_type).encode(column)
    assert encoded.to_pylist() == payloads
