"""JSON Schemas and Spark types, mapped once in each direction (pure functions, no I/O).

JSON Schema to Spark (reading; the subject's schema types the column):

| JSON Schema | Spark |
|---|---|
| `object` with `properties` | struct (properties in the schema's order; `allOf` members' properties merged) |
| `object` without `properties`, `additionalProperties` a schema | map<string, T> |
| `array` with `items` | array<T> (without `items`: array<string>) |
| `string` (`format` `date-time` / `date`) | string (timestamp / date) |
| `integer`, `number`, `boolean` | bigint, double, boolean |
| `enum` / `const` of strings, of integers | string, bigint |
| a type list, `anyOf` or `oneOf` of null and one schema | that schema's type |
| anything else (`{}`, an open `object`, other combinations) | string holding the value's JSON text |

`$ref` is followed within the schema (`#/definitions/...`, `#/$defs/...`) and into referenced schemas
(the registry's references, by name, with an optional `#` pointer). A `$ref` cycle is a recursive type
and is refused. Every field is nullable: JSON has no way to insist on presence that Spark could rely on.

Spark to JSON Schema (writing with `auto.register.schemas=true`): a draft-07 object schema titled
`TopLevelRecord` (or the record name option), properties in the struct's order, non-nullable fields
`required`, nullable ones `["null", T]` (objects and arrays as `oneOf` with null), timestamp as a
`date-time` string, date as a `date` string, binary as a base64 string, decimals as numbers, maps as
objects with `additionalProperties`.
"""

from __future__ import annotations

from collections.abc import Mapping

from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    ByteType,
    DataType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    MapType,
    ShortType,
    StringType,
    StructField,
    StructType,
    TimestampNTZType,
    TimestampType,
)

from strom._util.json_types import JsonObject, JsonValue

DRAFT_07 = "http://json-schema.org/draft-07/schema#"


class JsonTypeError(ValueError):
    """A JSON Schema with no faithful Spark type, or a Spark type with no JSON Schema counterpart."""


class _Resolver:
    """`$ref` resolution within a document and into the registry's referenced documents (by name)."""

    def __init__(self, root: JsonValue, references: Mapping[str, JsonValue]) -> None:
        self.root = root
        self.references = references

    def resolve(self, ref: str, root: JsonValue) -> tuple[JsonValue, JsonValue]:
        """(the schema `ref` points at, the document it belongs to)."""
        name, _, pointer = ref.partition("#")
        if name:
            if name not in self.references:
                raise JsonTypeError(f"$ref {ref!r} names no reference of the schema")
            root = self.references[name]
        node = root
        for escaped in [p for p in pointer.split("/") if p]:
            part = escaped.replace("~1", "/").replace("~0", "~")
            try:
                if isinstance(node, list):
                    node = node[int(part)]
                elif isinstance(node, Mapping):
                    node = node[part]
                else:
                    raise TypeError(f"{type(node).__name__} has no members")
            except (KeyError, IndexError, ValueError, TypeError) as e:
                raise JsonTypeError(f"$ref {ref!r} points at nothing") from e
        return node, root


def spark_type(schema: JsonValue, references: Mapping[str, JsonValue] | None = None) -> DataType:
    """The Spark type of a JSON Schema document (`json.loads` of the schema string).

    Raises:
        JsonTypeError: a `$ref` that resolves to nothing, or a recursive schema.
    """
    resolver = _Resolver(schema, references or {})
    data_type, _ = _convert(schema, schema, resolver, ())
    return data_type


def _convert(
    schema: JsonValue, root: JsonValue, resolver: _Resolver, refs: tuple[str, ...]
) -> tuple[DataType, bool]:
    """(Spark type, nullable) of a schema."""
    if not isinstance(schema, Mapping):
        return StringType(), True  # `true` or `false`: anything
    if "$ref" in schema:
        ref = str(schema["$ref"])
        key = f"{id(root)}:{ref}"
        if key in refs:
            raise JsonTypeError(f"the schema is recursive through $ref {ref!r}; Spark has no recursive type")
        target, target_root = resolver.resolve(ref, root)
        return _convert(target, target_root, resolver, (*refs, key))
    for combinator in ("anyOf", "oneOf"):
        alternatives = schema.get(combinator)
        if isinstance(alternatives, list):
            members = [m for m in alternatives if not (isinstance(m, Mapping) and m.get("type") == "null")]
            nullable = len(members) < len(alternatives)
            if len(members) == 1:
                data_type, inner = _convert(members[0], root, resolver, refs)
                return data_type, nullable or inner
            return StringType(), True
    all_of = schema.get("allOf")
    if isinstance(all_of, list):
        fields: list[StructField] = []
        for member in all_of:
            data_type, _ = _convert(member, root, resolver, refs)
            if not isinstance(data_type, StructType):
                return StringType(), True
            fields.extend(f for f in data_type.fields if f.name not in {g.name for g in fields})
        return StructType(fields), True
    for key in ("enum", "const"):
        if key in schema:
            values = schema[key] if key == "enum" else [schema[key]]
            if not isinstance(values, list):
                values = [values]
            if all(isinstance(v, str) for v in values):
                return StringType(), True
            if all(isinstance(v, int) and not isinstance(v, bool) for v in values):
                return LongType(), True
            return StringType(), True
    types = schema.get("type")
    listed = [types] if isinstance(types, str) else list(types) if isinstance(types, list) else []
    nullable = "null" in listed or not listed
    others = [t for t in listed if t != "null"]
    if len(others) != 1:
        if not others and "properties" in schema:
            others = ["object"]
        else:
            return StringType(), True
    kind = others[0]
    if not isinstance(kind, str):
        return StringType(), True
    return _typed(kind, schema, root, resolver, refs), nullable


def _typed(
    kind: str, schema: Mapping[str, JsonValue], root: JsonValue, resolver: _Resolver, refs: tuple[str, ...]
) -> DataType:
    if kind == "object":
        properties = schema.get("properties")
        if isinstance(properties, Mapping) and properties:
            fields = []
            for name, sub in properties.items():
                data_type, _ = _convert(sub, root, resolver, refs)
                fields.append(StructField(str(name), data_type, True))
            return StructType(fields)
        extra = schema.get("additionalProperties")
        if isinstance(extra, Mapping) and extra:
            value, _ = _convert(extra, root, resolver, refs)
            return MapType(StringType(), value, True)
        return StringType()
    if kind == "array":
        items = schema.get("items")
        element = _convert(items, root, resolver, refs)[0] if isinstance(items, Mapping) else StringType()
        return ArrayType(element, True)
    if kind == "string":
        return {"date-time": TimestampType(), "date": DateType()}.get(str(schema.get("format")), StringType())
    simple: dict[str, DataType] = {"integer": LongType(), "number": DoubleType(), "boolean": BooleanType()}
    return simple.get(kind, StringType())


def json_schema(data_type: StructType, record_name: str | None = None) -> JsonObject:
    """A draft-07 JSON Schema for a Spark struct (for `auto.register.schemas=true`).

    Raises:
        JsonTypeError: a field whose type has no JSON Schema counterpart (a map with non-string keys).
    """
    schema = _object(data_type)
    return {"$schema": DRAFT_07, "title": record_name or "TopLevelRecord", **schema}


def _object(data_type: StructType) -> JsonObject:
    properties = {f.name: _nullable(_to_json(f.dataType, f.name), f.nullable) for f in data_type.fields}
    required = [f.name for f in data_type.fields if not f.nullable]
    schema: JsonObject = {"type": "object", "properties": properties}
    if required:
        schema["required"] = required
    return schema


def _nullable(schema: JsonObject, nullable: bool) -> JsonObject:
    if not nullable:
        return schema
    kind = schema.get("type")
    if isinstance(kind, str) and kind not in ("object", "array"):
        return {**schema, "type": ["null", kind]}
    return {"oneOf": [{"type": "null"}, schema]}


def _to_json(data_type: DataType, name: str) -> JsonObject:
    if isinstance(data_type, StructType):
        return _object(data_type)
    if isinstance(data_type, ArrayType):
        return {
            "type": "array",
            "items": _nullable(_to_json(data_type.elementType, name), data_type.containsNull),
        }
    if isinstance(data_type, MapType):
        if not isinstance(data_type.keyType, StringType):
            raise JsonTypeError(
                f"field {name!r}: a JSON object's keys are strings, not {data_type.keyType.simpleString()}"
            )
        values = _nullable(_to_json(data_type.valueType, name), data_type.valueContainsNull)
        return {"type": "object", "additionalProperties": values}
    if isinstance(data_type, BooleanType):
        return {"type": "boolean"}
    if isinstance(data_type, ByteType | ShortType | IntegerType | LongType):
        return {"type": "integer"}
    if isinstance(data_type, FloatType | DoubleType | DecimalType):
        return {"type": "number"}
    if isinstance(data_type, StringType):
        return {"type": "string"}
    if isinstance(data_type, TimestampType | TimestampNTZType):
        return {"type": "string", "format": "date-time"}
    if isinstance(data_type, DateType):
        return {"type": "string", "format": "date"}
    if isinstance(data_type, BinaryType):
        return {"type": "string", "contentEncoding": "base64"}
    raise JsonTypeError(f"Spark type {data_type.simpleString()} of field {name!r} has no JSON Schema type")
