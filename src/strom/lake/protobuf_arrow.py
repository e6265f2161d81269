"""Protobuf value schemas as Arrow types, and Protobuf values (Confluent's wire format) as rows. Pure.

A record's value names its message within the schema's file (the message indexes, protobuf_wire.py);
that message's fields become top-level columns, so a table's columns are those of the messages its
records hold, merged by name like an Avro record's. Each record is decoded with its writer's schema, the
one its schema id names: a later version's new fields are new columns, null in earlier rows.

| Protobuf | column |
|---|---|
| int32, sint32, sfixed32 | int |
| int64, sint64, sfixed64, uint32, fixed32 | long |
| uint64, fixed64 | decimal(20, 0) |
| float, double, bool, string, bytes | float, double, boolean, string, binary |
| enum | string (the value's name; an unknown number as its digits) |
| message | struct (``oneof`` members are fields, at most one set) |
| repeated T | list<T> |
| map<K, V> | map<K, V> |
| google.protobuf.Timestamp | timestamptz |
| google.protobuf.{Double,Float,Int64,UInt64,Int32,UInt32,Bool,String,Bytes}Value | the wrapped type |
| google.protobuf.Struct, Value, ListValue | string (their JSON) |

A field with presence (proto3 ``optional``, a message, a ``oneof`` member) that is unset is null; a
proto3 field without presence holds its value, zero included (that is what the writer meant). A
recursive message has no column mapping (`UnsupportedSchema`), nor has a field named as a metadata
column: such records go to the dead-letter table, as do payloads whose message indexes name no message
of the schema or whose bytes do not parse.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from decimal import Decimal
from typing import Any

import pyarrow as pa
from google.protobuf import json_format, message_factory
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.descriptor_pb2 import FileDescriptorProto

from strom.lake.avro_arrow import UnsupportedSchema
from strom.lake.columns import META_COLUMNS, Row
from strom.lake.protobuf_wire import (
    TIMESTAMP,
    Converter,
    RowReader,
    descriptor_pool,
    is_map,
    is_message,
    is_repeated,
    message_name,
    read_indexes,
    row_reader,
    timestamp_value,
)

_F = FieldDescriptor
_UNSIGNED = pa.decimal128(20, 0)
_SCALARS: dict[int, pa.DataType] = {
    _F.TYPE_INT32: pa.int32(),
    _F.TYPE_SINT32: pa.int32(),
    _F.TYPE_SFIXED32: pa.int32(),
    _F.TYPE_INT64: pa.int64(),
    _F.TYPE_SINT64: pa.int64(),
    _F.TYPE_SFIXED64: pa.int64(),
    _F.TYPE_UINT32: pa.int64(),
    _F.TYPE_FIXED32: pa.int64(),
    _F.TYPE_UINT64: _UNSIGNED,
    _F.TYPE_FIXED64: _UNSIGNED,
    _F.TYPE_FLOAT: pa.float32(),
    _F.TYPE_DOUBLE: pa.float64(),
    _F.TYPE_BOOL: pa.bool_(),
    _F.TYPE_STRING: pa.string(),
    _F.TYPE_BYTES: pa.binary(),
    _F.TYPE_ENUM: pa.string(),
}
_WRAPPERS: dict[str, pa.DataType] = {
    "google.protobuf.DoubleValue": pa.float64(),
    "google.protobuf.FloatValue": pa.float32(),
    "google.protobuf.Int64Value": pa.int64(),
    "google.protobuf.UInt64Value": _UNSIGNED,
    "google.protobuf.Int32Value": pa.int32(),
    "google.protobuf.UInt32Value": pa.int64(),
    "google.protobuf.BoolValue": pa.bool_(),
    "google.protobuf.StringValue": pa.string(),
    "google.protobuf.BytesValue": pa.binary(),
}
_JSON_TYPES = ("google.protobuf.Struct", "google.protobuf.Value", "google.protobuf.ListValue")


def _unwrapped(message: Any) -> Any:
    return message.value


def _unsigned_unwrapped(message: Any) -> Decimal:
    return Decimal(message.value)


def _json_text(message: Any) -> str:
    return str(json_format.MessageToJson(message, indent=None))


WELL_KNOWN: Mapping[str, Converter] = {
    TIMESTAMP: timestamp_value,
    **dict.fromkeys(_WRAPPERS, _unwrapped),
    "google.protobuf.UInt64Value": _unsigned_unwrapped,
    **dict.fromkeys(_JSON_TYPES, _json_text),
}


def message_fields(descriptor: Descriptor) -> list[pa.Field]:
    """The columns a message adds beside the metadata columns.

    Raises:
        UnsupportedSchema: a recursive message, or a field named as a metadata column.
    """
    struct = _struct(descriptor, ())
    fields = [struct.field(i) for i in range(struct.num_fields)]
    for f in fields:
        if f.name in META_COLUMNS:
            raise UnsupportedSchema(f"field {f.name!r} has the name of a metadata column")
    return fields


def _struct(descriptor: Descriptor, path: tuple[str, ...]) -> pa.DataType:
    if descriptor.full_name in path:
        chain = " -> ".join((*path, descriptor.full_name))
        raise UnsupportedSchema(f"message {descriptor.full_name} is recursive ({chain}): no column mapping")
    inner = (*path, descriptor.full_name)
    return pa.struct([pa.field(fd.name, _field(fd, inner)) for fd in descriptor.fields])


def _field(fd: FieldDescriptor, path: tuple[str, ...]) -> pa.DataType:
    if is_map(fd):
        entry = fd.message_type
        return pa.map_(
            _single(entry.fields_by_name["key"], path), _single(entry.fields_by_name["value"], path)
        )
    element = _single(fd, path)
    return pa.list_(element) if is_repeated(fd) else element


def _single(fd: FieldDescriptor, path: tuple[str, ...]) -> pa.DataType:
    if not is_message(fd):
        return _SCALARS[fd.type]
    name = fd.message_type.full_name
    if name == TIMESTAMP:
        return pa.timestamp("us", tz="UTC")
    if name in _WRAPPERS:
        return _WRAPPERS[name]
    if name in _JSON_TYPES:
        return pa.string()
    return _struct(fd.message_type, path)


class ProtobufValues:
    """One registered Protobuf schema: decodes payloads (after the schema id) of any of its messages.

    Thread-safe: the translator's worker threads share one per schema id.
    """

    def __init__(self, main: FileDescriptorProto, dependencies: Mapping[str, FileDescriptorProto]) -> None:
        self._file = main
        self._pool = descriptor_pool(main, dependencies)
        self._messages: dict[str, tuple[Any, RowReader, list[pa.Field]]] = {}
        self._lock = threading.Lock()

    def _message(self, name: str) -> tuple[Any, RowReader, list[pa.Field]]:
        with self._lock:
            found = self._messages.get(name)
            if found is None:
                descriptor = self._pool.FindMessageTypeByName(name)
                columns = message_fields(descriptor)  # first: it refuses a recursive message
                found = (
                    message_factory.GetMessageClass(descriptor),
                    row_reader(descriptor, True, WELL_KNOWN),
                    columns,
                )
                self._messages[name] = found
            return found

    def columns(self, name: str) -> list[pa.Field]:
        """The columns of the schema's message ``name`` (full name).

        Raises:
            UnsupportedSchema: the message has no column mapping.
        """
        return self._message(name)[2]

    def decode(self, body: bytes) -> tuple[str, Row]:
        """(the message's full name, its row) of a payload after the schema id.

        Raises:
            UnsupportedSchema: the message has no column mapping.
            ValueError: message indexes that name no message of the schema (or are cut short).
            google.protobuf.message.DecodeError: bytes that do not parse as the message.
        """
        indexes, start = read_indexes(body, 0)
        name = message_name(self._file, indexes)
        message_class, to_row, _ = self._message(name)
        return name, to_row(message_class.FromString(body[start:]))
