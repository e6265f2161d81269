"""Avro schemas and Spark types, mapped once in each direction (pure functions, no I/O).

Avro to Spark (reading, the reader schema of a subject becomes a struct column):

| Avro | Spark |
|---|---|
| record | struct (field order kept) |
| enum, string, string/uuid | string |
| bytes, fixed | binary |
| boolean, int, long, float, double | boolean, int, bigint, float, double |
| int/date | date |
| long/timestamp-millis, long/timestamp-micros | timestamp (UTC) |
| long/local-timestamp-millis, long/local-timestamp-micros | timestamp_ntz |
| bytes or fixed/decimal(p, s) | decimal(p, s) (p <= 38) |
| int/time-millis, long/time-micros | int, bigint (Spark has no time of day type) |
| array<T> | array<T> |
| map<T> | map<string, T> |
| union of null and T | T, nullable |
| union of int and long / float and double (with or without null) | bigint / double |

A field (array item, map value) is nullable exactly when its Avro type is a union with null, as in Spark's
`from_avro`. Other unions (`["int", "string"]`) become a struct of their members, `member0`, `member1`, ...
in order, as Spark's `from_avro` maps them (`avro_unions` converts the values). Recursive records have no
Spark type and are refused with `AvroTypeError`.

Spark to Avro (writing with `auto.register.schemas=true`): the inverse for the types above -- a struct
becomes a record named `topLevelRecord` (nested records named after their field, namespaced by their
parent, as Spark's `to_avro` does), a nullable field `["null", T]` with default null, timestamp becomes
`timestamp-micros`, decimal `bytes/decimal`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    DataType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    MapType,
    NullType,
    StringType,
    StructField,
    StructType,
    TimestampNTZType,
    TimestampType,
)

from strom._util.json_types import JsonObject, JsonValue

_PRIMITIVES: dict[str, DataType] = {
    "null": NullType(),
    "boolean": BooleanType(),
    "int": IntegerType(),
    "long": LongType(),
    "float": FloatType(),
    "double": DoubleType(),
    "bytes": BinaryType(),
    "string": StringType(),
}
_LOGICAL: dict[tuple[str, str], DataType] = {
    ("int", "date"): DateType(),
    ("long", "timestamp-millis"): TimestampType(),
    ("long", "timestamp-micros"): TimestampType(),
    ("long", "local-timestamp-millis"): TimestampNTZType(),
    ("long", "local-timestamp-micros"): TimestampNTZType(),
}
_WIDENED = {frozenset({"int", "long"}): LongType(), frozenset({"float", "double"}): DoubleType()}


class AvroTypeError(ValueError):
    """An Avro schema with no faithful Spark type, or a Spark type with no Avro counterpart."""


def spark_type(schema: JsonValue) -> DataType:
    """The Spark type of a parsed Avro schema (`json.loads` of the schema string)."""
    data_type, _nullable = _convert(schema, {}, "", ())
    return data_type


def _full_name(name: str, namespace: str) -> str:
    return name if "." in name or not namespace else f"{namespace}.{name}"


Named = dict[str, Mapping[str, JsonValue]]
"""Named types (records, enums, fixed) met so far, by full name."""


def _convert(schema: JsonValue, named: Named, namespace: str, path: tuple[str, ...]) -> tuple[DataType, bool]:
    """(Spark type, nullable) of one Avro schema node; `named` maps full names to their definitions."""
    if isinstance(schema, list):
        return _union(schema, named, namespace, path)
    if isinstance(schema, str):
        if schema in _PRIMITIVES:
            return _PRIMITIVES[schema], schema == "null"
        full = _full_name(schema, namespace)
        found = named.get(full, named.get(schema))
        if found is None:
            raise AvroTypeError(f"unknown Avro type {schema!r}")
        if full in path or schema in path:
            raise AvroTypeError(f"recursive Avro type {schema!r} has no Spark type")
        return _convert(found, named, namespace, path)
    if not isinstance(schema, Mapping) or "type" not in schema:
        raise AvroTypeError(f"not an Avro schema: {schema!r}")
    kind = schema["type"]
    logical = schema.get("logicalType")
    if logical == "decimal" and kind in ("bytes", "fixed"):
        if kind == "fixed":
            _register(schema, named, namespace)
        return _decimal(schema), False
    if isinstance(kind, str) and isinstance(logical, str) and (kind, logical) in _LOGICAL:
        return _LOGICAL[(kind, logical)], False
    if kind == "record":
        return _record(schema, named, namespace, path), False
    if kind == "enum":
        _register(schema, named, namespace)
        return StringType(), False
    if kind == "fixed":
        _register(schema, named, namespace)
        return BinaryType(), False
    if kind == "array":
        items, items_null = _convert(schema["items"], named, namespace, path)
        return ArrayType(items, items_null), False
    if kind == "map":
        values, values_null = _convert(schema["values"], named, namespace, path)
        return MapType(StringType(), values, values_null), False
    return _convert(kind, named, namespace, path)


def _register(schema: Mapping[str, JsonValue], named: Named, namespace: str) -> str:
    full = _full_name(str(schema["name"]), str(schema.get("namespace", namespace)))
    named[full] = schema
    return full


def _record(
    schema: Mapping[str, JsonValue], named: Named, namespace: str, path: tuple[str, ...]
) -> StructType:
    full = _register(schema, named, namespace)
    inner = full.rpartition(".")[0]
    fields = []
    declared = schema.get("fields", [])
    if not isinstance(declared, list):
        raise AvroTypeError(f"the fields of record {full!r} are not an array")
    for field in declared:
        if not isinstance(field, Mapping):
            raise AvroTypeError(f"a field of record {full!r} is not an object: {field!r}")
        data_type, nullable = _convert(field["type"], named, inner, (*path, full))
        fields.append(StructField(str(field["name"]), data_type, nullable))
    return StructType(fields)


def _decimal(schema: Mapping[str, JsonValue]) -> DecimalType:
    precision, scale = _int(schema["precision"], "precision"), _int(schema.get("scale", 0), "scale")
    if not 0 < precision <= 38:
        raise AvroTypeError(f"decimal precision {precision} does not fit Spark's decimal (at most 38)")
    return DecimalType(precision, scale)


def _int(value: JsonValue, what: str) -> int:
    if isinstance(value, int | float | str):
        return int(value)
    raise AvroTypeError(f"decimal {what} {value!r} is not a number")


def _union(
    branches: Sequence[JsonValue], named: Named, namespace: str, path: tuple[str, ...]
) -> tuple[DataType, bool]:
    others = [b for b in branches if b != "null"]
    nullable = len(others) < len(branches)
    if len(others) == 1:
        data_type, inner_null = _convert(others[0], named, namespace, path)
        return data_type, nullable or inner_null
    if all(isinstance(b, str) for b in others):
        names = frozenset(b for b in others if isinstance(b, str))
        if names in _WIDENED:
            return _WIDENED[names], nullable
    # Spark's from_avro: a struct of the members, member0, member1, ... (null is no member).
    members = [
        StructField(f"member{i}", _convert(b, named, namespace, path)[0], True) for i, b in enumerate(others)
    ]
    return StructType(members), nullable


def avro_schema(data_type: StructType, name: str = "topLevelRecord", namespace: str = "") -> JsonObject:
    """An Avro record schema for a Spark struct (for `auto.register.schemas=true`)."""
    fields: list[JsonObject] = []
    inner = _full_name(name, namespace)
    for field in data_type.fields:
        avro = _to_avro(field.dataType, field.name, inner)
        if field.nullable:
            fields.append({"name": field.name, "type": ["null", avro], "default": None})
        else:
            fields.append({"name": field.name, "type": avro})
    record: JsonObject = {"type": "record", "name": name, "fields": fields}
    if namespace:
        record["namespace"] = namespace
    return record


def _to_avro(data_type: DataType, name: str, namespace: str) -> JsonValue:
    simple: list[tuple[type[DataType], JsonValue]] = [
        (BooleanType, "boolean"),
        (IntegerType, "int"),
        (LongType, "long"),
        (FloatType, "float"),
        (DoubleType, "double"),
        (StringType, "string"),
        (BinaryType, "bytes"),
        (DateType, {"type": "int", "logicalType": "date"}),
        (TimestampType, {"type": "long", "logicalType": "timestamp-micros"}),
        (TimestampNTZType, {"type": "long", "logicalType": "local-timestamp-micros"}),
    ]
    for spark_class, avro in simple:
        if type(data_type) is spark_class:
            return avro
    if isinstance(data_type, DecimalType):
        return {
            "type": "bytes",
            "logicalType": "decimal",
            "precision": data_type.precision,
            "scale": data_type.scale,
        }
    if isinstance(data_type, StructType):
        return avro_schema(data_type, name, namespace)
    if isinstance(data_type, ArrayType):
        items = _to_avro(data_type.elementType, name, namespace)
        return {"type": "array", "items": ["null", items] if data_type.containsNull else items}
    if isinstance(data_type, MapType) and isinstance(data_type.keyType, StringType):
        values = _to_avro(data_type.valueType, name, namespace)
        return {"type": "map", "values": ["null", values] if data_type.valueContainsNull else values}
    raise AvroTypeError(f"Spark type {data_type.simpleString()} of field {name!r} has no Avro type")


def has_map(data_type: DataType) -> bool:
    """Whether a Spark type contains a map anywhere (Arrow hands maps to Python as key/value pairs)."""
    if isinstance(data_type, MapType):
        return True
    if isinstance(data_type, StructType):
        return any(has_map(f.dataType) for f in data_type.fields)
    if isinstance(data_type, ArrayType):
        return has_map(data_type.elementType)
    return False


def maps_as_dicts(data_type: DataType, value: Any) -> Any:
    """An Arrow `to_pylist()` value with every map's (key, value) pairs turned into a dict, for Avro."""
    if value is None:
        return None
    if isinstance(data_type, MapType):
        return {k: maps_as_dicts(data_type.valueType, v) for k, v in value}
    if isinstance(data_type, StructType):
        return {f.name: maps_as_dicts(f.dataType, value.get(f.name)) for f in data_type.fields}
    if isinstance(data_type, ArrayType):
        return [maps_as_dicts(data_type.elementType, v) for v in value]
    return value
