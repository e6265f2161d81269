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
private `DescriptorPool`; messages are dynamic classes of that pool. The message indexes, the pool and
the reading of a parsed message into a row are strom.lake.protobuf_wire's, which the Iceberg translator
shares.

Decoding: the reader message is fixed when the query starts (the subject's latest or pinned schema, the
file's first message unless `valueMessage` names one). Protobuf's own evolution rules resolve writers:
each payload is parsed with the *reader's* message class, so fields the writer added are skipped as
unknown fields and fields it did not have are unset -- exactly what a Protobuf reader does. The writer's
message indexes are checked against the reader's message by name (the writer's schema is fetched by id
once per process when it is not the reader's): a payload holding another message is a bad record.
A parsed message becomes a row by the plan `row_reader` builds once per message type.

Encoding: the struct column's rows fill messages of the chosen message class field by field (by name),
which are serialized and framed with the schema id and the message's indexes.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from google.protobuf import message_factory
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from pyspark.sql.types import DataType

from strom.lake.protobuf_wire import (
    EPOCH,
    TIMESTAMP,
    UNSIGNED_64,
    descriptor_pool,
    encode_indexes,
    is_map,
    is_message,
    is_repeated,
    message_indexes,
    message_name,
    read_indexes,
    row_reader,
)
from strom.registry import protobuf_schema
from strom.spark.avro_codec import arrow_type
from strom.spark.protobuf_types import spark_type
from strom.spark.registry_client import Registry, SchemaText
from strom.spark.wire import HEADER, MAGIC, RecordDecodeError, split_header


def split(payload: bytes) -> tuple[int, list[int], int]:
    """(schema id, message indexes, where the message begins) of a wire-format payload.

    Raises:
        ValueError: a short payload, a wrong magic byte, or truncated indexes.
    """
    schema_id, pos = split_header(payload)
    indexes, pos = read_indexes(payload, pos)
    return schema_id, indexes, pos


class CompiledSchema:
    """A registered Protobuf schema compiled into a private pool (not picklable: rebuilt per process)."""

    def __init__(self, schema: SchemaText, references: list[tuple[str, SchemaText]]) -> None:
        parsed = protobuf_schema.parse(schema.text, [(name, ref.text) for name, ref in references])
        self.file = parsed.file
        self.pool = descriptor_pool(parsed.file, parsed.dependencies)

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
                row_reader(descriptor, self._emit_defaults),
                arrow_type(self._data_type),
            )
        state: tuple[Any, Callable[[Any], Any], pa.DataType] = self._state
        return state

    def from_table(self, column: pa.Array, registry: Registry) -> pa.Array:
        """A struct column built from an Iceberg table's columns (each record decoded by the broker with
        its writer's schema, proto3 zeros kept) as this decoder gives the same records from the log:
        fields without presence null at their zero value, or their zero value where null (a writer
        without the field) under ``emit.default.values``; repeated and map fields never null."""
        message_class, _, _ = self._prepare(registry)
        return _as_read(column, message_class.DESCRIPTOR, self._emit_defaults)

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


def _as_read(column: pa.Array, descriptor: Descriptor, emit_defaults: bool) -> pa.Array:
    """`ProtobufColumnDecoder.from_table` of one struct column of ``descriptor``'s message."""
    if not pa.types.is_struct(column.type):
        return column
    n = len(column)
    children = []
    for i in range(column.type.num_fields):
        field, child = column.type.field(i), column.field(i)
        fd = descriptor.fields_by_name.get(field.name)
        if fd is None:
            pass
        elif is_map(fd) or is_repeated(fd):
            child = pc.fill_null(child, pa.scalar([], child.type))
        elif is_message(fd):
            if fd.message_type.full_name != TIMESTAMP:
                child = _as_read(child, fd.message_type, emit_defaults)
        elif not fd.has_presence:
            default = pa.scalar(_read_default(fd), child.type)
            if emit_defaults:
                child = pc.fill_null(child, default)
            else:
                zero = pc.fill_null(pc.equal(child, default), False)
                child = pc.if_else(zero, pa.nulls(n, child.type), child)
        children.append(child)
    return pa.StructArray.from_arrays(children, fields=list(column.type), mask=column.is_null())


def _read_default(fd: FieldDescriptor) -> Any:
    """A field's zero value as the log read gives it (an enum's name, an unsigned 64-bit decimal)."""
    if fd.type == FieldDescriptor.TYPE_ENUM:
        return fd.enum_type.values_by_number[fd.default_value].name
    if fd.type in UNSIGNED_64:
        return Decimal(fd.default_value)
    return fd.default_value


def _fill(message: Any, row: dict[str, Any]) -> None:
    """Set the message's fields from a row (Arrow's `to_pylist` form: maps as (key, value) pairs)."""
    descriptor = message.DESCRIPTOR
    for name, value in row.items():
        if value is None:
            continue
        fd = descriptor.fields_by_name[name]
        target: Any = getattr(message, name) if is_repeated(fd) or is_message(fd) else None
        if is_map(fd):
            value_fd = fd.message_type.fields_by_name["value"]
            for k, v in value.items() if isinstance(value, dict) else value:
                if v is None:
                    continue
                if is_message(value_fd):
                    _set_message(target[k], value_fd, v)
                else:
                    target[k] = _scalar(value_fd, v)
        elif is_repeated(fd):
            for v in value:
                if v is None:
                    raise ValueError(f"field {name!r}: a repeated Protobuf field cannot hold null")
                if is_message(fd):
                    _set_message(target.add(), fd, v)
                else:
                    target.append(_scalar(fd, v))
        elif is_message(fd):
            target.SetInParent()
            _set_message(target, fd, value)
        else:
            setattr(message, name, _scalar(fd, value))


def _set_message(target: Any, fd: FieldDescriptor, value: Any) -> None:
    if fd.message_type.full_name == TIMESTAMP:
        micros = (value - EPOCH) // dt.timedelta(microseconds=1)
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
    if fd.type in UNSIGNED_64:
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
