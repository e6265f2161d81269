"""Iceberg topics' pure parts: committed records of stored batches (aborted transactions and markers
left out), the modes' rows and dead letters, Avro schemas as columns, the next offsets in a summary."""

from __future__ import annotations

import io
import json
import struct
from typing import Any

import pyarrow as pa
import pytest
from fastavro import parse_schema, schemaless_writer

from strom.lake import offsets
from strom.lake.avro_arrow import UnsupportedSchema, value_fields
from strom.lake.json_arrow import json_value_fields
from strom.lake.records import committed_records
from strom.lake.translate import KEY_VALUE, VALUE_SCHEMA_ID_PREFIX, SchemaCache, translate
from strom.protocol.records.builder import build_batch
from strom.protocol.records.control import ControlType, EndTxnMarker, build_marker_batch
from strom.protocol.records.record import Record
from strom.storage.transaction_index import AbortedTxn

V1 = {
    "type": "record",
    "name": "Order",
    "fields": [{"name": "id", "type": "int"}, {"name": "item", "type": "string"}],
}
V2 = {
    "type": "record",
    "name": "Order",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "item", "type": "string"},
        {"name": "qty", "type": ["null", "int"], "default": None},
    ],
}


def _records(base: int, count: int, **kwargs: Any) -> bytes:
    rows = [
        (f"k{base + i}".encode(), f"v{base + i}".encode(), (("h", b"x"),), 1_700_000_000_000 + i)
        for i in range(count)
    ]
    return build_batch(rows, base_offset=base, **kwargs)


def test_committed_records_leave_out_aborted_transactions_and_markers() -> None:
    data = b"".join(
        [
            _records(0, 3),
            _records(3, 2, producer_id=7, producer_epoch=0, is_transactional=True),  # aborted
            _records(5, 2, producer_id=8, producer_epoch=0, is_transactional=True),  # committed
            build_marker_batch(7, 0, EndTxnMarker(ControlType.ABORT, 0), 1, base_offset=7),
            build_marker_batch(8, 0, EndTxnMarker(ControlType.COMMIT, 0), 1, base_offset=8),
            _records(9, 2),
        ]
    )
    read = committed_records(data, [AbortedTxn(7, 3, 7, 9)], 1, 100)
    assert [r.offset for r in read.records] == [1, 2, 5, 6, 9, 10]
    assert read.next_offset == 11
    assert read.records[0].headers == (("h", b"x"),)


def test_committed_records_stop_before_a_batch_past_the_end() -> None:
    data = _records(0, 3) + _records(3, 3)
    read = committed_records(data, [], 0, 4)
    assert [r.offset for r in read.records] == [0, 1, 2]
    assert read.next_offset == 3


def test_key_value_rows_carry_the_metadata() -> None:
    record = Record(5, 1_700_000_000_123, b"k", b"v", (("a", b"1"),))
    [row] = translate(KEY_VALUE, 2, [record]).rows
    assert row == {
        "partition": 2,
        "offset": 5,
        "timestamp": 1_700_000_000_123_000,
        "headers": [{"key": "a", "value": b"1"}],
        "key": b"k",
        "value": b"v",
    }


def _wire(schema_id: int, schema: dict[str, Any], value: dict[str, Any]) -> bytes:
    out = io.BytesIO()
    schemaless_writer(out, parse_schema(schema), value)
    return struct.pack(">bI", 0, schema_id) + out.getvalue()


def test_schema_mode_decodes_and_sends_the_undecodable_to_the_dead_letters() -> None:
    known = {1: ("AVRO", json.dumps(V1)), 2: ("AVRO", json.dumps(V2)), 3: ("PROTOBUF", "syntax = 'proto3';")}
    cache = SchemaCache(known.get)
    records = [
        Record(0, 1, None, _wire(1, V1, {"id": 1, "item": "a"})),
        Record(1, 1, None, _wire(2, V2, {"id": 2, "item": "b", "qty": 3})),
        Record(2, 1, None, b"plain text"),
        Record(3, 1, None, _wire(3, V1, {"id": 1, "item": "a"})),
        Record(4, 1, None, struct.pack(">bI", 0, 1) + b"\x02"),  # truncated Avro
        Record(5, 1, None, None),
    ]
    out = translate(VALUE_SCHEMA_ID_PREFIX, 0, records, cache)
    assert [(r["offset"], r["id"], r["item"]) for r in out.rows] == [(0, 1, "a"), (1, 2, "b")]
    assert out.rows[1]["qty"] == 3 and out.row_schemas == [(1, ""), (2, "")]
    reasons = {r["offset"]: r["reason"] for r in out.dead}
    assert sorted(reasons) == [2, 3, 4, 5]
    assert "prefix" in reasons[2] and "PROTOBUF" in reasons[3] and "decode" in reasons[4]
    assert next(r for r in out.dead if r["offset"] == 2)["value"] == b"plain text"


def test_an_unknown_schema_id_holds_the_partition_until_patience_runs_out() -> None:
    records = [
        Record(0, 1, None, _wire(1, V1, {"id": 1, "item": "a"})),
        Record(1, 1, None, _wire(9, V1, {"id": 2, "item": "b"})),
    ]
    cache = SchemaCache({1: ("AVRO", json.dumps(V1))}.get)
    held = translate(VALUE_SCHEMA_ID_PREFIX, 0, records, cache)
    assert (len(held.rows), held.next_offset, held.waiting_for) == (1, 1, 9)
    given_up = translate(VALUE_SCHEMA_ID_PREFIX, 0, records, cache, give_up_waiting=True)
    assert len(given_up.rows) == 1 and "not in the registry" in given_up.dead[0]["reason"]


def test_avro_schemas_as_columns() -> None:
    schema = {
        "type": "record",
        "name": "E",
        "fields": [
            {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
            {"name": "tags", "type": {"type": "array", "items": "string"}},
            {"name": "attrs", "type": {"type": "map", "values": "long"}},
            {"name": "kind", "type": {"type": "enum", "name": "Kind", "symbols": ["A", "B"]}},
            {
                "name": "inner",
                "type": {"type": "record", "name": "In", "fields": [{"name": "x", "type": "double"}]},
            },
            {"name": "again", "type": ["null", "In"]},
        ],
    }
    fields = {f.name: f.type for f in value_fields(schema)}
    assert fields["at"] == pa.timestamp("us", tz="UTC")
    assert fields["tags"] == pa.list_(pa.string())
    assert fields["attrs"] == pa.map_(pa.string(), pa.int64())
    assert fields["kind"] == pa.string()
    assert fields["inner"] == fields["again"] == pa.struct([pa.field("x", pa.float64())])
    with pytest.raises(UnsupportedSchema, match="metadata column"):
        value_fields({"type": "record", "name": "R", "fields": [{"name": "offset", "type": "long"}]})
    with pytest.raises(UnsupportedSchema, match="union"):
        value_fields({"type": "record", "name": "R", "fields": [{"name": "u", "type": ["int", "string"]}]})


def test_next_offsets_come_from_the_newest_summary_that_has_them() -> None:
    rendered = offsets.render(offsets.merged({0: 5}, 2, 9))
    assert offsets.parse(
        [{"operation": "replace"}, {offsets.SUMMARY_KEY: rendered}, {offsets.SUMMARY_KEY: "{}"}]
    ) == {
        0: 5,
        2: 9,
    }
    assert offsets.parse([]) == {}


JSON_V1 = {
    "type": "object",
    "properties": {
        "id": {"type": "integer"},
        "name": {"type": ["null", "string"]},
        "where": {"type": "object", "properties": {"lat": {"type": "number"}, "lon": {"type": "number"}}},
        "tags": {"type": "array", "items": {"type": "string"}},
        "ok": {"type": "boolean"},
    },
}


def _json_wire(schema_id: int, value: Any) -> bytes:
    return struct.pack(">bI", 0, schema_id) + json.dumps(value).encode()


def test_json_schema_values_become_typed_columns() -> None:
    fields = {f.name: f.type for f in json_value_fields(JSON_V1)}
    assert fields == {
        "id": pa.int64(),
        "name": pa.string(),
        "where": pa.struct([pa.field("lat", pa.float64()), pa.field("lon", pa.float64())]),
        "tags": pa.list_(pa.string()),
        "ok": pa.bool_(),
    }
    cache = SchemaCache({1: ("JSON", json.dumps(JSON_V1)), 2: ("JSON", '{"type": "string"}')}.get)
    value = {"id": 7, "name": "n", "where": {"lat": 1.5, "lon": 2}, "tags": ["a"], "ok": True, "x": 1}
    records = [
        Record(0, 1, None, _json_wire(1, value)),
        Record(1, 1, None, _json_wire(1, {"id": 8})),
        Record(2, 1, None, _json_wire(1, [1, 2])),
        Record(3, 1, None, struct.pack(">bI", 0, 1) + b"{not json"),
        Record(4, 1, None, _json_wire(2, "text")),
        Record(5, 1, None, _json_wire(1, {"id": 1.5})),  # not an integer: Arrow would store 1
        Record(6, 1, None, _json_wire(1, {"id": 2.0})),  # an integer in JSON Schema's sense
        Record(7, 1, None, _json_wire(1, {"ok": "yes"})),
        Record(8, 1, None, _json_wire(1, {"where": {"lat": True}})),
    ]
    out = translate(VALUE_SCHEMA_ID_PREFIX, 0, records, cache)
    assert [(r["offset"], r["id"], r["name"], r["where"]) for r in out.rows] == [
        (0, 7, "n", {"lat": 1.5, "lon": 2}),
        (1, 8, None, None),
        (6, 2, None, None),
    ]
    assert "x" not in out.rows[0]  # a property the schema does not name is left out
    reasons = {r["offset"]: r["reason"] for r in out.dead}
    assert sorted(reasons) == [2, 3, 4, 5, 7, 8]
    assert "not a JSON object" in reasons[2] and "decode" in reasons[3] and "object" in reasons[4]
    assert "id: 1.5 is not of the column's type int64" in reasons[5]
    assert "ok" in reasons[7] and "where.lat" in reasons[8]
    for unsupported in ({"type": "object", "properties": {"u": {"oneOf": []}}}, {"$ref": "#/x"}):
        with pytest.raises(UnsupportedSchema):
            json_value_fields(unsupported)
    with pytest.raises(UnsupportedSchema, match="metadata column"):
        json_value_fields({"type": "object", "properties": {"offset": {"type": "integer"}}})
