"""Avro schemas as Arrow types, and fastavro's decoded values as Arrow-ready Python values. Pure.

A value schema must be a record; its fields become top-level columns. Types map as Iceberg's own Avro
mapping does: boolean, int, long, float, double, string, bytes as themselves; enum as string; fixed as
fixed-size binary; record as struct; array as list; map as map of string keys; a union of null and one
type as that type (every column is optional anyway); logical types date, timestamp-millis/-micros
(UTC), local-timestamp-millis/-micros, decimal and uuid (as string). Other unions and time-of-day types
are not mapped (`UnsupportedSchema`): records of such a schema go to the dead-letter table, with the
reason. A field named as a metadata column (columns.py) is refused the same way.
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

import pyarrow as pa

from strom.lake.columns import META_COLUMNS

JsonSchema = Any  # parsed Avro schema JSON: a str, a list (union) or a dict

_PRIMITIVES: dict[str, pa.DataType] = {
    "boolean": pa.bool_(),
    "int": pa.int32(),
    "long": pa.int64(),
    "float": pa.float32(),
    "double": pa.float64(),
    "string": pa.string(),
    "bytes": pa.binary(),
}


class UnsupportedSchema(ValueError):
    """The schema has no table mapping; its records go to the dead-letter table."""


def value_fields(schema: JsonSchema) -> list[pa.Field]:
    """The columns a record value schema adds beside the metadata columns.

    Raises:
        UnsupportedSchema: not a record, a type without mapping, or a field named as a metadata column.
    """
    if not isinstance(schema, dict) or schema.get("type") != "record":
        raise UnsupportedSchema("the value schema is not an Avro record")
    named: dict[str, pa.DataType] = {}
    struct = _arrow_type(schema, named, schema.get("namespace", ""))
    fields = [struct.field(i) for i in range(struct.num_fields)]
    for f in fields:
        if f.name in META_COLUMNS:
            raise UnsupportedSchema(f"field {f.name!r} has the name of a metadata column")
    return fields


def _full_name(schema: dict[str, Any], namespace: str) -> str:
    name = str(schema.get("name", ""))
    if "." in name:
        return name
    ns = schema.get("namespace", namespace)
    return f"{ns}.{name}" if ns else name


def _arrow_type(schema: JsonSchema, named: dict[str, pa.DataType], namespace: str) -> pa.DataType:
    if isinstance(schema, str):
        if schema in _PRIMITIVES:
            return _PRIMITIVES[schema]
        found = named.get(schema) or named.get(f"{namespace}.{schema}")
        if found is None:
            raise UnsupportedSchema(f"type {schema!r} is not mapped")
        return found
    if isinstance(schema, list):
        branches = [b for b in schema if b != "null"]
        if len(branches) != 1:
            raise UnsupportedSchema(f"union {schema!r}: only a union of null and one type is mapped")
        return _arrow_type(branches[0], named, namespace)
    if not isinstance(schema, dict):
        raise UnsupportedSchema(f"schema {schema!r} is not mapped")
    kind = schema.get("type")
    logical = _logical(schema)
    if logical is not None:
        return logical
    if kind == "record":
        full = _full_name(schema, namespace)
        inner_ns = full.rpartition(".")[0]
        fields = [
            pa.field(str(f["name"]), _arrow_type(f["type"], named, inner_ns))
            for f in schema.get("fields", [])
        ]
        named[full] = pa.struct(fields)
        return named[full]
    if kind == "enum":
        named[_full_name(schema, namespace)] = pa.string()
        return pa.string()
    if kind == "fixed":
        named[_full_name(schema, namespace)] = pa.binary(int(schema["size"]))
        return named[_full_name(schema, namespace)]
    if kind == "array":
        return pa.list_(_arrow_type(schema["items"], named, namespace))
    if kind == "map":
        return pa.map_(pa.string(), _arrow_type(schema["values"], named, namespace))
    return _arrow_type(kind, named, namespace)


def _logical(schema: dict[str, Any]) -> pa.DataType | None:
    logical = schema.get("logicalType")
    kind = schema.get("type")
    if logical == "date" and kind == "int":
        return pa.date32()
    if logical in ("timestamp-millis", "timestamp-micros") and kind == "long":
        return pa.timestamp("us", tz="UTC")
    if logical in ("local-timestamp-millis", "local-timestamp-micros") and kind == "long":
        return pa.timestamp("us")
    if logical == "decimal" and kind in ("bytes", "fixed"):
        precision = int(schema["precision"])
        if precision > 38:
            raise UnsupportedSchema(f"decimal precision {precision} is over 38")
        return pa.decimal128(precision, int(schema.get("scale", 0)))
    if logical == "uuid" and kind == "string":
        return pa.string()
    if logical in ("time-millis", "time-micros"):
        raise UnsupportedSchema(f"logical type {logical} is not mapped")
    return None


def arrow_value(value: Any) -> Any:
    """fastavro's decoded value made ready for ``pyarrow.Table.from_pylist`` (maps as key/value pairs)."""
    if isinstance(value, dict):
        return {k: arrow_value(v) for k, v in value.items()}
    if isinstance(value, list):
        return [arrow_value(v) for v in value]
    if isinstance(value, UUID):
        return str(value)
    return value
