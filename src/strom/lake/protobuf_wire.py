"""Protobuf values of Confluent's wire format, read into Python rows. Pure; google.protobuf only.

After the 5-byte header (magic byte, schema id) a Protobuf payload names the message it holds within
the schema's file: a zig-zag varint count, then that many zig-zag varint indexes (the first into the
file's top-level messages, each next one into the previous message's nested ones), the common case
[0], the file's first message, written as the single byte 0. Then the message in Protobuf's binary
encoding.

The schema's files come compiled (the registry compiles them with protoc, strom.registry.protobuf_schema):
`descriptor_pool` loads a file and those it imports into a private pool. `row_reader` builds, once per
message type, the function that turns a parsed message into a row, a dict with one entry per field:
nested messages as dicts, repeated fields as lists, maps as (key, value) pairs, enums as their value's
name, uint64 and fixed64 as `Decimal` (they do not fit a signed 64-bit column), and the well-known
types it is given converters for (`WELL_KNOWN_TIMESTAMP`: ``google.protobuf.Timestamp`` as an aware
datetime). A field with presence (proto3 ``optional``, a message, a ``oneof`` member) that is unset
reads as None; a field without presence at its zero value reads as None too unless ``emit_defaults``.

Used by the Iceberg translator (strom.lake.protobuf_arrow) and by strom.spark's Protobuf codec, which
sit on either side of the registry in the layers: this module knows neither.
"""

from __future__ import annotations

import datetime as dt
import importlib
from collections.abc import Callable, Mapping
from decimal import Decimal
from typing import Any

from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.descriptor_pb2 import FileDescriptorProto
from google.protobuf.descriptor_pool import Default as default_pool
from google.protobuf.descriptor_pool import DescriptorPool

TIMESTAMP = "google.protobuf.Timestamp"
MAX_INDEXES = 64  # more message indexes than this is not the wire format (nesting is never that deep)
EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
UNSIGNED_64 = (FieldDescriptor.TYPE_UINT64, FieldDescriptor.TYPE_FIXED64)

Converter = Callable[[Any], Any]
RowReader = Callable[[Any], dict[str, object]]


def timestamp_value(message: Any) -> dt.datetime:
    """A ``google.protobuf.Timestamp`` as an aware UTC datetime (microseconds: nanoseconds cut)."""
    return EPOCH + dt.timedelta(seconds=message.seconds, microseconds=message.nanos // 1000)


WELL_KNOWN_TIMESTAMP: Mapping[str, Converter] = {TIMESTAMP: timestamp_value}


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
        if pos >= len(data) or shift > 63:
            raise ValueError("the message indexes end before the payload does")
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return (result >> 1) ^ -(result & 1), pos
        shift += 7


def read_indexes(payload: bytes, pos: int) -> tuple[list[int], int]:
    """(message indexes, where the message begins) of the payload's index list starting at ``pos``.

    Raises:
        ValueError: truncated indexes, or a count that is not the wire format's.
    """
    count, pos = _read_varint(payload, pos)
    if count == 0:
        return [0], pos
    if count < 0 or count > MAX_INDEXES:
        raise ValueError(f"{count} message indexes: not Protobuf's wire format")
    indexes = []
    for _ in range(count):
        index, pos = _read_varint(payload, pos)
        indexes.append(index)
    return indexes, pos


def message_name(file: FileDescriptorProto, indexes: list[int]) -> str:
    """The full name of the message the indexes select in a file.

    Raises:
        ValueError: an index past the messages there are.
    """
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


def descriptor_pool(
    main: FileDescriptorProto, dependencies: Mapping[str, FileDescriptorProto]
) -> DescriptorPool:
    """A private pool holding ``main`` and, first, each file it imports (transitively, by name).

    An import missing from ``dependencies`` is taken from the runtime's default pool when the runtime
    knows it (Google's well-known types, ``google/protobuf/*.proto``).
    """
    pool = DescriptorPool()
    added: set[str] = set()

    def find(name: str) -> FileDescriptorProto | None:
        found = dependencies.get(name)
        if found is None:
            try:
                if name.startswith("google/protobuf/"):  # its module adds it to the default pool
                    importlib.import_module(
                        "google.protobuf." + name[len("google/protobuf/") : -len(".proto")] + "_pb2"
                    )
                known = default_pool().FindFileByName(name)
            except (ImportError, KeyError):
                return None
            found = FileDescriptorProto.FromString(known.serialized_pb)
        return found

    def add(proto: FileDescriptorProto) -> None:
        for dependency in proto.dependency:
            if dependency not in added:
                imported = find(dependency)
                if imported is not None:
                    add(imported)
        if proto.name not in added:
            added.add(proto.name)
            pool.Add(proto)

    add(main)
    return pool


def is_repeated(fd: FieldDescriptor) -> bool:
    """Whether a field is repeated (protobuf 7 dropped `label`; older runtimes lack `is_repeated`)."""
    flag = getattr(fd, "is_repeated", None)
    return bool(flag) if flag is not None else bool(fd.label == FieldDescriptor.LABEL_REPEATED)


def is_map(fd: FieldDescriptor) -> bool:
    return bool(
        fd.type == FieldDescriptor.TYPE_MESSAGE and is_repeated(fd) and fd.message_type.GetOptions().map_entry
    )


def is_message(fd: FieldDescriptor) -> bool:
    return fd.type in (FieldDescriptor.TYPE_MESSAGE, FieldDescriptor.TYPE_GROUP)


def row_reader(
    descriptor: Descriptor, emit_defaults: bool, well_known: Mapping[str, Converter] = WELL_KNOWN_TIMESTAMP
) -> RowReader:
    """A function from a parsed message of ``descriptor`` to a row (a dict with one entry per field)."""
    fields = [(fd.name, _field_reader(fd, emit_defaults, well_known)) for fd in descriptor.fields]
    return lambda m: {name: read(m) for name, read in fields}


def _value_reader(fd: FieldDescriptor, emit_defaults: bool, well_known: Mapping[str, Converter]) -> Converter:
    if is_message(fd):
        convert = well_known.get(fd.message_type.full_name)
        if convert is not None:
            return convert
        return row_reader(fd.message_type, emit_defaults, well_known)
    if fd.type == FieldDescriptor.TYPE_ENUM:
        names = {v.number: v.name for v in fd.enum_type.values}
        return lambda v: names.get(v, str(v))
    if fd.type in UNSIGNED_64:
        return Decimal
    return lambda v: v


def _field_reader(fd: FieldDescriptor, emit_defaults: bool, well_known: Mapping[str, Converter]) -> Converter:
    name = fd.name
    if is_map(fd):
        value = _value_reader(fd.message_type.fields_by_name["value"], emit_defaults, well_known)
        return lambda m: [(k, value(v)) for k, v in getattr(m, name).items()]
    convert = _value_reader(fd, emit_defaults, well_known)
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
