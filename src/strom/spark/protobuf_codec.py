"""Protobuf columns in Confluent's wire format, decoded into and encoded from Arrow struct arrays.

Wire format (what confluent-kafka's `ProtobufSerializer` writes)::

    byte 0      magic byte, 0
    bytes 1..4  schema id, big-endian
    then        the message indexes: which message of the schema's file the payload holds, as a
                zig-zag varint count followed by that many zig-zag varint indexes (the first into the
                file's top-level messages, each next one into the previous message's nested ones);
                the common case [0], the file's first message, is the single byte 0
    then        the message in Protobuf's binary encoding

Schemas are compiled by the registry's own Protobuf compiler (`strom.registry.protobuf_schema`, protoc)
with the files they import (the schema's references, fetched from the registry) and loaded into a
private `DescriptorPool`; messages are dynamic classes of that pool.

Decoding: the reader message is fixed when the query starts (the subject's latest or pinned schema, the
file's first message unless `valueMessage` names one). Protobuf's own evolution rules resolve writers:
each payload is parsed with the *reader's* message class, so fields the writer added are skipped as
unknown fields and fields it did not have are unset -- exactly what a Protobuf reader does. The writer's
message indexes are checked against the reader's message by name (the writer's schema is fetched by id
once per process when it is not the reader's): a payload holding another message is a bad record.
A parsed message becomes a row by the plan `_reader` built once per message type.

Encoding: the struct column's rows fill messages of the chosen message class field by field (by name),
which are serialized and framed with the schema id and the message's indexes.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from decimal import Decimal
from typing import Any

import pyarrow as pa
from google.protobuf import message_factory
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.descriptor_pb2 import FileDescriptorProto
from google.protobuf.descriptor_pool import DescriptorPool
from pyspark.sql.types import DataType

from strom.registry import protobuf_schema
from strom.spark.avro_codec import arrow_type
from strom.spark.protobuf_types import TIMESTAMP, is_map, is_repeated, spark_type
from strom.spark.registry_client import Registry, SchemaText
from strom.spark.wire import HEADER, MAGIC, RecordDecodeError, split_header

_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_UNSIGNED_64 = (FieldDescriptor.TYPE_UINT64, FieldDescriptor.TYPE_FIXED64)


def _zigzag(n: int) -> int:
    return (n << 1) ^ (n >> 63)


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def encode_indexes(indexes: list[int]) -> bytes:
    """The message-index list as confluent-kafka writes it ([0] as the single byte 0)."""
    if indexes == [0]:
        return b"\x00"
    return _varint(_zigzag(len(indexes))) + b"".join(_varint(_zigzag(i)) for i in indexes)


def _read_varint(data: bytes, pos: int) -> tuple[int, int]:
    shift = result = 0
    while True:
        if pos >= len(data):
            raise ValueError("the message indexes end before the payload does")
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return (result >> 1) ^ -(result & 1), pos
        shift += 7


def split(payload: bytes) -> tuple[int, list[int], int]:
    """(schema id, message indexes, where the message begins) of a wire-format payload.

    Raises:
        ValueError: a short payload, a wrong magic byte, or truncated indexes.
    """
    schema_id, pos = split_header(payload)
    count, pos = _read_varint(payload, pos)
    if count == 0:
        return schema_id, [0], pos
    if count < 0 or count > 64:
        raise ValueError(f"{count} message indexes: not Protobuf's wire format")
    indexes = []
    for _ in range(count):
        index, pos = _read_varint(payload, pos)
        indexes.append(index)
    return schema_id, indexes, pos


def message_name(file: FileDescriptorProto, indexes: list[int]) -> str:
    """The full name of the message the indexes select in a file."""
    messages, names = file.message_type, [file.package] if file.package else []
    for index in indexes:
        if not 0 <= index < len(messages):
            raise ValueError(f"message index {index} is not in the schema ({len(messages)} messages)")
        names.append(messages[index].name)
        messages = messages[index].nested_type
    return ".".join(names)


def message_indexes(file: FileDescriptorProto, full_name: str) -> list[int]:
    """The indexes of a message of the file (inverse of `message_name`)."""
    prefix = f"{file.package}." if file.package else ""

    def find(messages: Any, base: str) -> list[int] | None:
        for i, message in enumerate(messages):
            name = f"{base}{message.name}"
            if name == full_name:
                return [i]
            inner = find(message.nested_type, f"{name}.")
            if inner is not None:
                return [i, *inner]
        return None

    found = find(file.message_type, prefix)
    if found is None:
        raise ValueError(f"message {full_name} is not in the schema")
    return found


class CompiledSchema:
    """A registered Protobuf schema compiled into a private pool (not picklable: rebuilt per process)."""

    def __init__(self, schema: SchemaText, references: list[tuple[str, SchemaText]]) -> None:
        parsed = protobuf_schema.parse(schema.text, [(name, ref.text) for name, ref in references])
        self.file = parsed.file
        self.pool = DescriptorPool()
        added: set[str] = set()

        def add(proto: FileDescriptorProto) -> None:
            for dependency in proto.dependency:
                if dependency not in added and dependency in parsed.dependencies:
                    add(parsed.dependencies[dependency])
            if proto.name not in added:
                added.add(proto.name)
                self.pool.Add(proto)

        add(parsed.file)

    def descriptor(self, message: str | None) -> Descriptor:
        """The named message (full name), or the file's first one."""
        if message is None:
            if not self.file.message_type:
                raise ValueError("the schema defines no message")
            message = message_name(self.file, [0])
        try:
            return self.pool.FindMessageTypeByName(message)
        except KeyError as e:
            raise ValueError(f"message {message} is not in the schema") from e


def compile_schema(registry: Registry, schema: SchemaText) -> CompiledSchema:
    return CompiledSchema(schema, registry.references(schema))


def _value_reader(fd: FieldDescriptor, emit_defaults: bool) -> Callable[[Any], Any]:
    if fd.type in (FieldDescriptor.TYPE_MESSAGE, FieldDescriptor.TYPE_GROUP):
        if fd.message_type.full_name == TIMESTAMP:
            return lambda v: _EPOCH + dt.timedelta(seconds=v.seconds, microseconds=v.nanos // 1000)
        return _reader(fd.message_type, emit_defaults)
    if fd.type == FieldDescriptor.TYPE_ENUM:
        names = {v.number: v.name for v in fd.enum_type.values}
        return lambda v: names.get(v, str(v))
    if fd.type in _UNSIGNED_64:
        return Decimal
    return lambda v: v


def _field_reader(fd: FieldDescriptor, emit_defaults: bool) -> Callable[[Any], Any]:
    name = fd.name
    if is_map(fd):
        value = _value_reader(fd.message_type.fields_by_name["value"], emit_defaults)
        return lambda m: [(k, value(v)) for k, v in getattr(m, name).items()]
    convert = _value_reader(fd, emit_defaults)
    if is_repeated(fd):
        return lambda m: [convert(v) for v in getattr(m, name)]
    if fd.has_presence:
        return lambda m: convert(getattr(m, name)) if m.HasField(name) else None
    if emit_defaults:
        return lambda m: convert(getattr(m, name))
    default = fd.default_value

    def read(m: Any) -> Any:
        v = getattr(m, name)
        return None if v == default else convert(v)

    return read


def _reader(descriptor: Descriptor, emit_defaults: bool) -> Callable[[Any], dict[str, object]]:
    """A function from a parsed message to a row (a dict with one entry per field)."""
    fields = [(fd.name, _field_reader(fd, emit_defaults)) for fd in descriptor.fields]
    return lambda m: {name: read(m) for name, read in fields}


class ProtobufColumnDecoder:
    """Decodes one column (key or value) of record batches; picklable, schemas compiled per process."""

    def __init__(
        self, reader: SchemaText, message: str, data_type: DataType, column: str, emit_defaults: bool
    ) -> None:
        self._reader_schema = reader
        self._message = message
        self._data_type = data_type
        self._column = column
        self._emit_defaults = emit_defaults
        self._state: Any = None
        self._writer_names: dict[tuple[int, tuple[int, ...]], str] = {}

    def __getstate__(self) -> dict[str, object]:
        return {**self.__dict__, "_state": None, "_writer_names": {}}

    @property
    def data_type(self) -> DataType:
        return self._data_type

    def _prepare(self, registry: Registry) -> tuple[Any, Callable[[Any], Any], pa.DataType]:
        if self._state is None:
            compiled = compile_schema(registry, self._reader_schema)
            descriptor = compiled.descriptor(self._message)
            own = tuple(message_indexes(compiled.file, descriptor.full_name))
            self._writer_names[(self._reader_schema.schema_id, own)] = descriptor.full_name
            self._state = (
                message_factory.GetMessageClass(descriptor),
                _reader(descriptor, self._emit_defaults),
                arrow_type(self._data_type),
            )
        state: tuple[Any, Callable[[Any], Any], pa.DataType] = self._state
        return state

    def _message_of(self, registry: Registry, schema_id: int, indexes: list[int]) -> str:
        key = (schema_id, tuple(indexes))
        name = self._writer_names.get(key)
        if name is None:
            schema = registry.by_id(schema_id)
            if schema.schema_type != "PROTOBUF":
                raise ValueError(f"schema id {schema_id} is a {schema.schema_type} schema, not Protobuf")
            name = self._writer_names[key] = message_name(compile_schema(registry, schema).file, indexes)
        return name

    def decode(
        self, values: pa.Array, offsets: pa.Array, topic: str, partition: int, registry: Registry
    ) -> pa.Array:
        """A struct array of the decoded `values` (null stays null).

        Raises:
            RecordDecodeError: naming the topic, partition and offset of the first bad payload.
        """
        message_class, to_row, arrow = self._prepare(registry)
        rows: list[Any] = []
        for payload, offset in zip(values.to_pylist(), offsets.to_pylist(), strict=True):
            if payload is None:
                rows.append(None)
                continue
            try:
                schema_id, indexes, start = split(payload)
                found = self._message_of(registry, schema_id, indexes)
                if found != self._message:
                    raise ValueError(f"the payload holds message {found}, not {self._message}")
                rows.append(to_row(message_class.FromString(payload[start:])))
            except Exception as e:
                raise RecordDecodeError(
                    f"Cannot decode the Protobuf {self._column} of the record at offset {offset} of "
                    f"{topic}-{partition}: {type(e).__name__}: {e}"
                ) from e
        return pa.array(rows, type=arrow)


def _fill(message: Any, row: dict[str, Any]) -> None:
    """Set the message's fields from a row (Arrow's `to_pylist` form: maps as (key, value) pairs)."""
    descriptor = message.DESCRIPTOR
    for name, value in row.items():
        if value is None:
            continue
        fd = descriptor.fields_by_name[name]
        target: Any = getattr(message, name) if is_repeated(fd) or _is_message(fd) else None
        if is_map(fd):
            value_fd = fd.message_type.fields_by_name["value"]
            for k, v in value.items() if isinstance(value, dict) else value:
                if v is None:
                    continue
                if _is_message(value_fd):
                    _set_message(target[k], value_fd, v)
                else:
                    target[k] = _scalar(value_fd, v)
        elif is_repeated(fd):
            for v in value:
                if v is None:
                    raise ValueError(f"field {name!r}: a repeated Protobuf field cannot hold null")
                if _is_message(fd):
                    _set_message(target.add(), fd, v)
                else:
                    target.append(_scalar(fd, v))
        elif _is_message(fd):
            target.SetInParent()
            _set_message(target, fd, value)
        else:
            setattr(message, name, _scalar(fd, value))


def _is_message(fd: FieldDescriptor) -> bool:
    return fd.type in (FieldDescriptor.TYPE_MESSAGE, FieldDescriptor.TYPE_GROUP)


def _set_message(target: Any, fd: FieldDescriptor, value: Any) -> None:
    if fd.message_type.full_name == TIMESTAMP:
        micros = (value - _EPOCH) // dt.timedelta(microseconds=1)
        target.seconds, remainder = divmod(micros, 1_000_000)
        target.nanos = remainder * 1000
    else:
        _fill(target, value)


def _scalar(fd: FieldDescriptor, value: Any) -> Any:
    if fd.type == FieldDescriptor.TYPE_ENUM and isinstance(value, str):
        found = fd.enum_type.values_by_name.get(value)
        if found is None:
            raise ValueError(f"field {fd.name!r}: {value!r} is not a value of enum {fd.enum_type.full_name}")
        return found.number
    if fd.type in _UNSIGNED_64:
        return int(value)
    return value


class ProtobufColumnEncoder:
    """Encodes a struct column as one message type of one registered schema into wire-format payloads."""

    def __init__(self, schema: SchemaText, references: list[tuple[str, SchemaText]], message: str) -> None:
        self._schema = schema
        self._references = references
        self._message = message
        self._state: Any = None

    def __getstate__(self) -> dict[str, object]:
        return {**self.__dict__, "_state": None}

    def encode(self, column: pa.Array) -> pa.Array:
        """A binary array of framed Protobuf payloads (null rows stay null)."""
        if self._state is None:
            compiled = CompiledSchema(self._schema, self._references)
            descriptor = compiled.descriptor(self._message)
            header = HEADER.pack(MAGIC, self._schema.schema_id)
            indexes = encode_indexes(message_indexes(compiled.file, descriptor.full_name))
            self._state = (message_factory.GetMessageClass(descriptor), header + indexes)
        message_class, prefix = self._state
        out: list[bytes | None] = []
        for row in column.to_pylist():
            if row is None:
                out.append(None)
                continue
            message = message_class()
            _fill(message, row)
            out.append(prefix + message.SerializeToString())
        return pa.array(out, pa.binary())


def reader_type(registry: Registry, schema: SchemaText, message: str | None) -> tuple[str, DataType]:
    """(message full name, Spark type) of the reader message of a schema (driver side)."""
    descriptor = compile_schema(registry, schema).descriptor(message)
    return descriptor.full_name, spark_type(descriptor)
