"""JSON Schema value schemas as Arrow types, and decoded JSON values as Arrow-ready values. Pure.

A value schema must be an object (``"type": "object"`` with ``properties``); its properties become
top-level columns. Types map by ``type``: ``string`` as string, ``integer`` as long, ``number`` as
double, ``boolean`` as boolean, an object with ``properties`` as a struct, an array with one ``items``
schema as a list; a list of types of ``null`` and one other as that type (every column is optional
anyway). A schema without a mapping (``$ref``, ``oneOf``/``anyOf``/``allOf``, an object without
``properties``, several types) is refused (`UnsupportedSchema`): records of such a schema go to the
dead-letter table with the reason, as does a property named as a metadata column. Properties the schema
does not name are left out of the row; a value of the wrong type for its column makes the record a dead
letter (the row does not fit its columns).
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from strom.lake.avro_arrow import UnsupportedSchema
from strom.lake.columns import META_COLUMNS, Row

_SCALARS: dict[str, pa.DataType] = {
    "string": pa.string(),
    "integer": pa.int64(),
    "number": pa.float64(),
    "boolean": pa.bool_(),
}


def json_value_fields(schema: Any) -> list[pa.Field]:
    """The columns an object value schema adds beside the metadata columns.

    Raises:
        UnsupportedSchema: not an object with properties, a type without mapping, or a property named as
            a metadata column.
    """
    struct = _arrow_type(schema, "the value schema")
    if not pa.types.is_struct(struct):
        raise UnsupportedSchema("the value schema is not a JSON object with properties")
    fields = [struct.field(i) for i in range(struct.num_fields)]
    for f in fields:
        if f.name in META_COLUMNS:
            raise UnsupportedSchema(f"property {f.name!r} has the name of a metadata column")
    return fields


def _arrow_type(schema: Any, where: str) -> pa.DataType:
    if not isinstance(schema, dict):
        raise UnsupportedSchema(f"{where} is not a schema object")
    for keyword in ("$ref", "oneOf", "anyOf", "allOf"):
        if keyword in schema:
            raise UnsupportedSchema(f"{where} uses {keyword}, which has no column mapping")
    kind = schema.get("type")
    if isinstance(kind, list):
        others = [k for k in kind if k != "null"]
        if len(others) != 1:
            raise UnsupportedSchema(f"{where} has several types {kind}")
        kind = others[0]
    if kind in _SCALARS:
        return _SCALARS[kind]
    if kind == "object":
        properties = schema.get("properties")
        if not isinstance(properties, dict) or not properties:
            raise UnsupportedSchema(f"{where} is an object without properties")
        return pa.struct(
            [pa.field(name, _arrow_type(sub, f"property {name!r}")) for name, sub in properties.items()]
        )
    if kind == "array":
        return pa.list_(_arrow_type(schema.get("items"), f"the items of {where}"))
    raise UnsupportedSchema(f"{where} has type {kind!r}, which has no column mapping")


def json_row(value: Any, fields: list[pa.Field]) -> Row | None:
    """The columns of a decoded JSON value (None when it is not an object).

    Raises:
        ValueError: a value of the wrong type for its column (Arrow would cut 1.5 down to an integer
            column's 1, or read ``true`` as a number: checked here instead).
    """
    if not isinstance(value, dict):
        return None
    return {f.name: _fitted(value.get(f.name), f.type, f.name) for f in fields}


def _fitted(value: Any, kind: pa.DataType, where: str) -> Any:
    """``value`` as its column takes it; ValueError when it is not of the column's JSON type."""
    if value is None:
        return None
    if pa.types.is_boolean(kind):
        if isinstance(value, bool):
            return value
    elif pa.types.is_int64(kind):
        # JSON Schema's integer: a number without a fractional part (1.0 is one).
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
    elif pa.types.is_float64(kind):
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
    elif pa.types.is_string(kind):
        if isinstance(value, str):
            return value
    elif pa.types.is_struct(kind):
        if isinstance(value, dict):
            return {
                kind.field(i).name: _fitted(
                    value.get(kind.field(i).name), kind.field(i).type, f"{where}.{kind.field(i).name}"
                )
                for i in range(kind.num_fields)
            }
    elif pa.types.is_list(kind) and isinstance(value, list):
        return [_fitted(item, kind.value_type, f"{where}[]") for item in value]
    raise ValueError(f"{where}: {value!r} is not of the column's type {kind}")
