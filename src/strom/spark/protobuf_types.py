"""Protobuf messages and Spark types, mapped once in each direction (pure functions, no I/O).

Protobuf to Spark (reading; as Spark's `from_protobuf` with `upcast.unsigned.ints`):

| Protobuf | Spark |
|---|---|
| message | struct (fields in declaration order; `oneof` members are fields, at most one set) |
| int32, sint32, sfixed32 | int |
| int64, sint64, sfixed64, uint32, fixed32 | bigint |
| uint64, fixed64 | decimal(20, 0) |
| float, double, bool, string, bytes | float, double, boolean, string, binary |
| enum | string (the value's name) |
| google.protobuf.Timestamp | timestamp |
| repeated T | array<T> |
| map<K, V> | map<K, V> |

Every field is nullable: an unset field (absent, or a proto3 field at its zero value) reads as null unless
`emit.default.values=true`, as in Spark. Recursive messages are refused (Spark refuses them by default).

Spark to Protobuf (writing with `auto.register.schemas=true`): a proto3 file with one top-level message
(`TopLevelRecord`, or the record name option, whose dotted prefix becomes the package), fields numbered
in the struct's order, nullable scalars `optional`, nested structs as nested messages named after their
field, arrays `repeated`, maps `map<K, V>`, timestamp `google.protobuf.Timestamp`.
"""

from __future__ import annotations

from google.protobuf.descriptor import Descriptor, FieldDescriptor
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    ByteType,
    DataType,
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
    TimestampType,
)

from strom.lake.protobuf_wire import TIMESTAMP, is_map, is_repeated

_F = FieldDescriptor
_SCALARS: dict[int, DataType] = {
    _F.TYPE_INT32: IntegerType(),
    _F.TYPE_SINT32: IntegerType(),
    _F.TYPE_SFIXED32: IntegerType(),
    _F.TYPE_INT64: LongType(),
    _F.TYPE_SINT64: LongType(),
    _F.TYPE_SFIXED64: LongType(),
    _F.TYPE_UINT32: LongType(),
    _F.TYPE_FIXED32: LongType(),
    _F.TYPE_UINT64: DecimalType(20, 0),
    _F.TYPE_FIXED64: DecimalType(20, 0),
    _F.TYPE_FLOAT: FloatType(),
    _F.TYPE_DOUBLE: DoubleType(),
    _F.TYPE_BOOL: BooleanType(),
    _F.TYPE_STRING: StringType(),
    _F.TYPE_BYTES: BinaryType(),
    _F.TYPE_ENUM: StringType(),
}


class ProtobufTypeError(ValueError):
    """A message with no faithful Spark type, or a Spark type with no Protobuf counterpart."""


def spark_type(descriptor: Descriptor) -> StructType:
    """The Spark struct of a message descriptor.

    Raises:
        ProtobufTypeError: the message is recursive.
    """
    return _struct(descriptor, ())


def _struct(descriptor: Descriptor, path: tuple[str, ...]) -> StructType:
    if descriptor.full_name in path:
        raise ProtobufTypeError(
            f"message {descriptor.full_name} is recursive ({' -> '.join((*path, descriptor.full_name))}); "
            "Spark has no recursive struct"
        )
    inner = (*path, descriptor.full_name)
    return StructType([StructField(fd.name, _field(fd, inner), True) for fd in descriptor.fields])


def _field(fd: FieldDescriptor, path: tuple[str, ...]) -> DataType:
    if is_map(fd):
        entry = fd.message_type
        key = _single(entry.fields_by_name["key"], path)
        return MapType(key, _single(entry.fields_by_name["value"], path), True)
    element = _single(fd, path)
    return ArrayType(element, True) if is_repeated(fd) else element


def _single(fd: FieldDescriptor, path: tuple[str, ...]) -> DataType:
    if fd.type in (_F.TYPE_MESSAGE, _F.TYPE_GROUP):
        if fd.message_type.full_name == TIMESTAMP:
            return TimestampType()
        return _struct(fd.message_type, path)
    return _SCALARS[fd.type]


_PROTO_SCALARS: list[tuple[type[DataType], str]] = [
    (BooleanType, "bool"),
    (ByteType, "int32"),
    (ShortType, "int32"),
    (IntegerType, "int32"),
    (LongType, "int64"),
    (FloatType, "float"),
    (DoubleType, "double"),
    (StringType, "string"),
    (BinaryType, "bytes"),
    (TimestampType, TIMESTAMP),
]
_MAP_KEYS = ("string", "int32", "int64", "bool")


def proto_schema(data_type: StructType, record_name: str | None = None) -> str:
    """A proto3 file holding one message for a Spark struct (for `auto.register.schemas=true`).

    Raises:
        ProtobufTypeError: a field whose type has no Protobuf counterpart (a decimal, an array of
            arrays, a map with a non-scalar key, ...).
    """
    package, _, name = (record_name or "TopLevelRecord").rpartition(".")
    lines: list[str] = []
    uses_timestamp = _message(data_type, name, lines, "")
    head = ['syntax = "proto3";']
    if package:
        head.append(f"package {package};")
    if uses_timestamp:
        head.append('import "google/protobuf/timestamp.proto";')
    return "\n".join([*head, "", *lines, ""])


def _message(data_type: StructType, name: str, lines: list[str], indent: str) -> bool:
    lines.append(f"{indent}message {name} {{")
    uses_timestamp = False
    nested: list[tuple[str, StructType]] = []
    taken = {f.name for f in data_type.fields}
    for number, field in enumerate(data_type.fields, start=1):
        text, inner = _proto_field(field.name, field.dataType, taken, nested)
        uses_timestamp = uses_timestamp or TIMESTAMP in text
        optional = field.nullable and not isinstance(field.dataType, ArrayType | MapType) and inner is None
        lines.append(f"{indent}  {'optional ' if optional else ''}{text} {field.name} = {number};")
    for nested_name, nested_type in nested:
        uses_timestamp = _message(nested_type, nested_name, lines, indent + "  ") or uses_timestamp
    lines.append(f"{indent}}}")
    return uses_timestamp


def _proto_field(
    name: str, data_type: DataType, taken: set[str], nested: list[tuple[str, StructType]]
) -> tuple[str, str | None]:
    """(type text, nested message name or None) of a field."""
    if isinstance(data_type, ArrayType):
        if isinstance(data_type.elementType, ArrayType | MapType):
            raise ProtobufTypeError(
                f"field {name!r}: Protobuf has no repeated {data_type.elementType.simpleString()}"
            )
        text, _ = _proto_field(name, data_type.elementType, taken, nested)
        return f"repeated {text}", None
    if isinstance(data_type, MapType):
        key, _ = _proto_field(name, data_type.keyType, taken, nested)
        if key not in _MAP_KEYS:
            raise ProtobufTypeError(f"field {name!r}: a map key must be a string, integer or boolean")
        if isinstance(data_type.valueType, ArrayType | MapType):
            raise ProtobufTypeError(
                f"field {name!r}: Protobuf has no map of {data_type.valueType.simpleString()}"
            )
        value, _ = _proto_field(name, data_type.valueType, taken, nested)
        return f"map<{key}, {value}>", None
    if isinstance(data_type, StructType):
        message = "".join(part.capitalize() for part in name.split("_")) or "Nested"
        while message in taken or any(message == n for n, _ in nested):
            message += "_"
        nested.append((message, data_type))
        return message, message
    for spark_class, proto in _PROTO_SCALARS:
        if type(data_type) is spark_class:
            return proto, None
    raise ProtobufTypeError(f"Spark type {data_type.simpleString()} of field {name!r} has no Protobuf type")


def check_fields(data_type: StructType, descriptor: Descriptor, subject: str) -> None:
    """The struct's fields must all be fields of the message (by name).

    Raises:
        ProtobufTypeError: naming the fields the message does not have.
    """
    extra = sorted(f.name for f in data_type.fields if f.name not in descriptor.fields_by_name)
    if extra:
        raise ProtobufTypeError(
            f"the struct does not match message {descriptor.full_name} of subject {subject!r}: "
            f"fields not in the message {extra} (or set auto.register.schemas=true)"
        )
