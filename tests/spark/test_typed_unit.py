"""Pure parts of the typed formats: options (strategies, pins, modes), Protobuf's message-index framing
and type mapping, JSON Schema's type mapping and value conversion (no broker, no JVM)."""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

import pyarrow as pa
import pytest
from google.protobuf.descriptor_pool import DescriptorPool
from pyspark.sql.types import (
    ArrayType,
    DataType,
    DecimalType,
    DoubleType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from strom.registry.protobuf_schema import parse
from strom.spark.json_codec import JsonColumnDecoder, _to_json
from strom.spark.json_types import JsonTypeError, json_schema, spark_type
from strom.spark.options import KafkaOptionError
from strom.spark.protobuf_codec import encode_indexes, message_indexes, message_name, split
from strom.spark.protobuf_types import ProtobufTypeError, proto_schema
from strom.spark.protobuf_types import spark_type as proto_spark_type
from strom.spark.typed_options import parse_typed_options
from strom.spark.wire import RecordDecodeError

URL = {"schema.registry.url": "http://r:8081"}


def struct(*fields: tuple[str, DataType], required: tuple[str, ...] = ()) -> StructType:
    return StructType([StructField(name, t, name not in required) for name, t in fields])


def test_subject_name_strategies_and_pins() -> None:
    read = parse_typed_options({**URL, "valueformat": "protobuf", "subscribe": "clicks"}, sink=False)
    assert read.columns["value"].subject == "clicks-value" and read.columns["value"].format == "protobuf"
    record = {**URL, "valueformat": "json", "subscribe": "a,b", "valuesubjectnamestrategy": "record"}
    assert parse_typed_options({**record, "valuerecordname": "shop.Click"}, sink=False).value_subject == (
        "shop.Click"
    )
    topic_record = {
        **URL,
        "keyformat": "avro",
        "topic": "t",
        "keysubjectnamestrategy": "TopicRecordNameStrategy",
    }
    options = parse_typed_options({**topic_record, "keyrecordname": "K", "keyschemaversion": "3"}, sink=True)
    assert (options.key_subject, options.columns["key"].version) == ("t-K", 3)
    pinned = parse_typed_options(
        {**URL, "valueformat": "avro", "subscribe": "t", "valueschemaid": "7"}, sink=False
    )
    assert pinned.columns["value"].schema_id == 7
    mode = parse_typed_options(
        {**URL, "valueformat": "json", "subscribe": "t", "mode": "permissive"}, sink=False
    )
    assert mode.permissive and mode.dead_letter_topic is None


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (
            {"valueformat": "json", "subscribe": "t", "valuesubjectnamestrategy": "record"},
            "needs the valueRecordName",
        ),
        ({"valueformat": "json", "subscribe": "t", "valuesubjectnamestrategy": "x"}, "must be one of topic"),
        ({"valueformat": "json", "subscribe": "t", "valueschemaid": "0"}, "positive integer"),
        (
            {"valueformat": "json", "subscribe": "t", "valueschemaid": "1", "valueschemaversion": "2"},
            "not both",
        ),
        ({"valueformat": "json", "subscribe": "t", "mode": "DROPMALFORMED"}, "mode must be one of"),
        ({"subscribe": "t", "deadlettertopic": "d"}, "needs a typed valueFormat"),
    ],
)
def test_bad_typed_options(options: dict[str, str], message: str) -> None:
    with pytest.raises(KafkaOptionError, match=message):
        parse_typed_options({**URL, **options}, sink=False)


PROTO = """syntax = "proto3";
package p;
message A { int32 x = 1; message B { string s = 1; message C { repeated B bs = 1; } } }
message D { uint64 big = 1; map<string, A> as = 2; oneof pick { string a = 3; int64 b = 4; } }
message R { R next = 1; }
"""


def test_protobuf_message_indexes() -> None:
    file = parse(PROTO).file
    assert message_name(file, [0]) == "p.A" and message_name(file, [1]) == "p.D"
    assert message_indexes(file, "p.A.B.C") == [0, 0, 0] and message_name(file, [0, 0, 0]) == "p.A.B.C"
    assert encode_indexes([0]) == b"\x00"
    assert encode_indexes([1]) == b"\x02\x02"  # zig-zag: count 1, index 1
    payload = b"\x00\x00\x00\x00\x05" + encode_indexes([0, 0, 0]) + b"body"
    schema_id, indexes, start = split(payload)
    assert (schema_id, indexes, payload[start:]) == (5, [0, 0, 0], b"body")
    with pytest.raises(ValueError, match="message index 3"):
        message_name(file, [3])


def test_protobuf_types() -> None:
    pool = DescriptorPool()
    pool.Add(parse(PROTO).file)
    d = proto_spark_type(pool.FindMessageTypeByName("p.D"))
    assert d.simpleString() == "struct<big:decimal(20,0),as:map<string,struct<x:int>>,a:string,b:bigint>"
    with pytest.raises(ProtobufTypeError, match="recursive"):
        proto_spark_type(pool.FindMessageTypeByName("p.R"))
    derived = proto_schema(
        struct(
            ("a", StringType()),
            ("b", ArrayType(LongType())),
            ("c", struct(("d_e", IntegerType()))),
            ("t", TimestampType()),
        ),
        "x.Y",
    )
    compiled = parse(derived)
    assert compiled.file.package == "x" and [m.name for m in compiled.file.message_type] == ["Y"]
    with pytest.raises(ProtobufTypeError, match="no Protobuf type"):
        proto_schema(struct(("a", DecimalType(10, 2))))


def test_json_schema_types() -> None:
    schema: dict[str, Any] = {
        "type": "object",
        "properties": {
            "id": {"type": "integer"},
            "tags": {"type": "array", "items": {"type": "string"}},
            "opt": {"oneOf": [{"type": "null"}, {"$ref": "#/$defs/P"}]},
            "attrs": {"type": "object", "additionalProperties": {"type": "number"}},
            "any": {},
            "other": {"$ref": "other.json#/definitions/O"},
            "when": {"type": ["string", "null"], "format": "date-time"},
            "color": {"enum": ["red", "green"]},
        },
        "$defs": {"P": {"type": "object", "properties": {"q": {"type": "boolean"}}}},
    }
    refs = {"other.json": {"definitions": {"O": {"type": "object", "properties": {"n": {"type": "number"}}}}}}
    assert spark_type(schema, refs).simpleString() == (
        "struct<id:bigint,tags:array<string>,opt:struct<q:boolean>,attrs:map<string,double>,any:string,"
        "other:struct<n:double>,when:timestamp,color:string>"
    )
    with pytest.raises(JsonTypeError, match="recursive"):
        spark_type(
            {
                "$ref": "#/definitions/L",
                "definitions": {"L": {"type": "object", "properties": {"next": {"$ref": "#/definitions/L"}}}},
            }
        )
    derived = json_schema(
        struct(
            ("a", StringType()),
            ("b", ArrayType(IntegerType())),
            ("m", MapType(StringType(), DoubleType())),
            required=("a",),
        ),
        "T",
    )
    assert derived["required"] == ["a"] and derived["title"] == "T"
    assert spark_type(derived).simpleString() == "struct<a:string,b:array<bigint>,m:map<string,double>>"


def test_json_values_convert_by_name_and_fail_naming_the_record() -> None:
    data_type = struct(
        ("a", LongType()),
        ("b", StringType()),
        ("t", TimestampType()),
        ("m", MapType(StringType(), LongType())),
    )
    decoder = JsonColumnDecoder(data_type, "value")
    header = b"\x00\x00\x00\x00\x01"
    values = pa.array(
        [
            header
            + json.dumps(
                {"a": 1, "b": {"x": 1}, "t": "2026-01-01T00:00:00Z", "m": {"k": 2}, "extra": 0}
            ).encode(),
            None,
        ],
        pa.binary(),
    )
    decoded = decoder.decode(values, pa.array([5, 6], pa.int64()), "t", 0, None)  # type: ignore[arg-type]
    assert decoded.to_pylist() == [
        {"a": 1, "b": '{"x":1}', "t": dt.datetime(2026, 1, 1, tzinfo=dt.UTC), "m": [("k", 2)]},
        None,
    ]
    bad = pa.array([header + b'{"a": "x"}'], pa.binary())
    with pytest.raises(RecordDecodeError, match="offset 9 of t-0"):
        decoder.decode(bad, pa.array([9], pa.int64()), "t", 0, None)  # type: ignore[arg-type]
    row = {"a": 1, "b": None, "t": dt.datetime(2026, 1, 1, tzinfo=dt.UTC), "m": [("k", 2)]}
    assert _to_json(data_type, row) == {"a": 1, "t": "2026-01-01T00:00:00Z", "m": {"k": 2}}


def test_json_native_path_agrees_with_the_python_path() -> None:
    """Arrow's JSON reader (the whole batch at once) gives what the per-record path gives, and leaves
    every case it would convert differently (a number in a string column, an integral float, a non-object)
    to that path."""
    data_type = struct(
        ("a", LongType()),
        ("b", StringType()),
        ("t", TimestampType()),
        ("l", ArrayType(StringType())),
        ("n", struct(("c", DoubleType()))),
    )
    header = b"\x00\x00\x00\x00\xc8"  # schema id 200: a header byte that is not UTF-8
    rows: list[Any] = [
        {"a": i, "b": f"s{i}", "t": f"2026-01-01T00:00:{i:02d}Z", "l": ["x"] * (i % 3), "n": {"c": i / 2}}
        for i in range(20)
    ]
    rows[3] = {"a": 3, "extra": {"deep": [1]}}
    payloads: list[bytes | None] = [header + json.dumps(r).encode() for r in rows]
    payloads[5] = None
    values = pa.array(payloads, pa.binary())
    offsets = pa.array(range(20), pa.int64())
    native = JsonColumnDecoder(data_type, "value")
    native.decode(values, offsets, "t", 0, None)  # type: ignore[arg-type]
    found = native._decode_natively(values, native._state[1])
    assert found is not None
    by_row = [
        JsonColumnDecoder(data_type, "value").decode(values.slice(i, 1), offsets.slice(i, 1), "t", 0, None)
        for i in range(20)
    ]  # type: ignore[arg-type]
    assert found.to_pylist() == [a.to_pylist()[0] for a in by_row]
    for odd in (b'{"b": 5}', b'{"a": 3.0}', b"[1]"):
        column = pa.array([header + odd], pa.binary())
        assert native._decode_natively(column, native._state[1]) is None
    assert native.decode(
        pa.array([header + b'{"b": 5, "a": 3.0}'], pa.binary()), offsets.slice(0, 1), "t", 0, None
    ).to_pylist() == [  # type: ignore[arg-type]
        {"a": 3, "b": "5", "t": None, "l": None, "n": None}
    ]
