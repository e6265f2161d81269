"""Protobuf values of Iceberg topics: schemas compiled by the registry's protoc, messages named by the
wire format's indexes decoded into typed columns (nested messages, repeated and map fields, enums,
well-known types), a later version adding columns, the undecodable to the dead letters; and a whole
round into a real SQL catalog, whose Iceberg schema takes the columns."""

from __future__ import annotations

import datetime as dt
import struct
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
from google.protobuf import message_factory
from tests.unit.test_lake_tables import lake_tables

from strom.lake.protobuf_wire import descriptor_pool, encode_indexes, message_indexes
from strom.lake.round import run_round
from strom.lake.tables import TableRef
from strom.lake.translate import VALUE_SCHEMA_ID_PREFIX, SchemaCache, translate
from strom.protocol.records.builder import build_batch
from strom.protocol.records.record import Record
from strom.registry import protobuf_schema

ADDRESS = 'syntax = "proto3";\npackage geo;\nmessage Address { string city = 1; string zip = 2; }\n'
V1 = """syntax = "proto3";
package shop;
import "address.proto";
import "google/protobuf/timestamp.proto";
import "google/protobuf/wrappers.proto";
import "google/protobuf/struct.proto";
message Order {
  enum Status { NEW = 0; PAID = 1; }
  int64 id = 1;
  geo.Address to = 2;
  google.protobuf.Timestamp at = 3;
  repeated string items = 4;
  map<string, int32> counts = 5;
  Status status = 6;
  uint64 big = 7;
  google.protobuf.Int32Value qty = 8;
  google.protobuf.Struct extra = 9;
  oneof payment { string card = 10; string voucher = 11; }
  message Line { string sku = 1; }
}
message Tree { string name = 1; repeated Tree children = 2; }
"""
V2 = V1.replace("  oneof payment", "  optional string note = 12;\n  oneof payment")
REFERENCES = [("address.proto", ADDRESS)]


def _compiled(text: str) -> Any:
    parsed = protobuf_schema.parse(text, REFERENCES)
    return parsed.file, parsed.dependencies


def _cache() -> SchemaCache:
    known = {1: ("PROTOBUF", V1), 2: ("PROTOBUF", V2), 3: ("PROTOBUF", "not a schema")}
    texts = {1: V1, 2: V2, 3: "not a schema"}
    return SchemaCache(known.get, lambda schema_id: _compiled(texts[schema_id]))


def _message_class(text: str, name: str) -> Any:
    return message_factory.GetMessageClass(descriptor_pool(*_compiled(text)).FindMessageTypeByName(name))


def _wire(schema_id: int, indexes: list[int], message: Any) -> bytes:
    return struct.pack(">bI", 0, schema_id) + encode_indexes(indexes) + message.SerializeToString()


def _records() -> list[Record]:
    order_v1, order_v2 = _message_class(V1, "shop.Order"), _message_class(V2, "shop.Order")
    first = order_v1(id=1, items=["tea"], status=1, big=2**64 - 1, card="4111")
    first.to.city = "Oslo"
    first.at.seconds = 1_700_000_000
    first.counts["tea"] = 2
    first.qty.value = 0
    first.extra.update({"gift": True})
    second = order_v2(id=2, note="fragile")
    line = _message_class(V1, "shop.Order.Line")(sku="s-1")
    line_indexes = message_indexes(_compiled(V1)[0], "shop.Order.Line")
    assert line_indexes == [0, 1]  # after the map's entry message, which protoc nests first
    return [
        Record(0, 1, None, _wire(1, [0], first)),
        Record(1, 1, None, _wire(2, [0], second)),
        Record(2, 1, None, _wire(1, line_indexes, line)),  # a nested message, named by two indexes
        Record(3, 1, None, _wire(1, [5], first)),  # no sixth message
        Record(4, 1, None, struct.pack(">bI", 0, 1) + b"\x00\x0a\xff"),  # a length past the end
        Record(5, 1, None, _wire(1, [1], _message_class(V1, "shop.Tree")(name="t"))),
        Record(6, 1, None, _wire(3, [0], first)),
    ]


def test_protobuf_values_become_typed_columns_and_the_undecodable_dead_letters() -> None:
    cache = _cache()
    out = translate(VALUE_SCHEMA_ID_PREFIX, 0, _records(), cache)
    first, second, line = out.rows
    assert first["id"] == 1 and first["to"] == {"city": "Oslo", "zip": ""}
    assert first["at"] == dt.datetime(2023, 11, 14, 22, 13, 20, tzinfo=dt.UTC)
    assert (first["items"], first["counts"], first["status"]) == (["tea"], [("tea", 2)], "PAID")
    assert (first["big"], first["qty"], first["extra"]) == (Decimal(2**64 - 1), 0, '{"gift": true}')
    assert (first["card"], first["voucher"]) == ("4111", None)  # oneof: the member not set is null
    # proto3 without presence: the zero value is the value; a message or optional unset is null.
    assert (second["status"], second["items"], second["to"], second["qty"]) == ("NEW", [], None, None)
    assert second["note"] == "fragile" and "note" not in first  # decoded with its writer's version
    assert line == {**line, "offset": 2, "sku": "s-1"}
    assert out.row_schemas == [(1, "shop.Order"), (2, "shop.Order"), (1, "shop.Order.Line")]
    types = {f.name: f.type for f in cache.columns((2, "shop.Order"))}
    assert types["at"] == pa.timestamp("us", tz="UTC") and types["big"] == pa.decimal128(20, 0)
    assert types["counts"] == pa.map_(pa.string(), pa.int32()) and types["status"] == pa.string()
    assert types["to"] == pa.struct([pa.field("city", pa.string()), pa.field("zip", pa.string())])
    assert (types["qty"], types["extra"], types["note"]) == (pa.int32(), pa.string(), pa.string())
    reasons = {r["offset"]: r["reason"] for r in out.dead}
    assert sorted(reasons) == [3, 4, 5, 6]
    assert "message index 5 is not in the schema" in reasons[3]
    assert "does not decode with schema 1" in reasons[4]
    assert "shop.Tree is recursive" in reasons[5]
    assert "schema 3 does not compile" in reasons[6]


def test_a_protobuf_round_adds_the_later_versions_columns_to_the_table(tmp_path: Path) -> None:
    tables = lake_tables(tmp_path)
    batch = build_batch([(None, r.value, (), 1_700_000_000_000) for r in _records()], base_offset=0)
    ref = TableRef("orders-pb", VALUE_SCHEMA_ID_PREFIX)
    result = run_round(tables, ref, 0, [(batch, [])], 0, 7, _cache(), False)
    assert (result.next_offset, result.rows, result.dead) == (7, 3, 4)
    rows = tables.table(ref).scan().to_arrow().sort_by("offset")
    assert rows["offset"].to_pylist() == [0, 1, 2]
    assert rows["note"].to_pylist() == [None, "fragile", None]
    assert rows["sku"].to_pylist() == [None, None, "s-1"]
    assert rows["big"].to_pylist() == [Decimal(2**64 - 1), Decimal(0), None]
    assert rows["counts"].to_pylist()[0] == [("tea", 2)]
    schema = {f.name: str(f.field_type) for f in tables.table(ref).schema().fields}
    assert (schema["at"], schema["big"], schema["status"]) == ("timestamptz", "decimal(20, 0)", "string")
    assert schema["counts"].startswith("map<string, int>") and schema["items"] == "list<string>"


def test_a_well_known_import_missing_from_the_dependencies_comes_from_the_runtime() -> None:
    main, dependencies = _compiled(V1)
    without = {name: proto for name, proto in dependencies.items() if not name.startswith("google/")}
    assert len(without) < len(dependencies)  # protoc gave the well-known files; here they are left out
    order = message_factory.GetMessageClass(
        descriptor_pool(main, without).FindMessageTypeByName("shop.Order")
    )
    message = order()
    message.at.seconds = 1_700_000_000
    assert order.FromString(message.SerializeToString()).at.seconds == 1_700_000_000
