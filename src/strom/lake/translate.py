"""Records to rows, per mode, with the dead letters and their reasons. Pure (the schema lookup is
passed in).

``key_value``: every record is a row; nothing goes to the dead-letter table.

``value_schema_id_prefix``: the value is Confluent's wire format, a zero byte, the schema id (4 bytes,
big-endian) and the value's encoding under the writer's schema from the registry: Avro's binary
encoding (avro_arrow.py), for a JSON Schema the JSON text (json_arrow.py), for a Protobuf schema the
message indexes and the message (protobuf_arrow.py; the registry compiles the schema with its imports,
`ProtobufLookup`, since this layer sits below it). Its fields become the row's columns; each row
records the schema it was decoded with (`SchemaKey`: the id, and a Protobuf value's message), whose
columns the table's schema then takes in. A record goes to the dead-letter table, with its raw value
and the reason, when it has no value or no prefix, its schema has no table mapping, or its bytes do
not decode. A schema id the registry does not know (yet: this broker may
replay ``_schemas`` a moment after the record arrived) stops the translation just before that record
(`Translation.waiting_for`) until the translator's patience runs out; then the record is a dead letter
too, so the topic is never blocked.
"""

from __future__ import annotations

import io
import json
import struct
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import pyarrow as pa
from fastavro import parse_schema, schemaless_reader
from google.protobuf.descriptor_pb2 import FileDescriptorProto

from strom.avro.native_block import BlockSchema, block_schema
from strom.lake.avro_arrow import UnsupportedSchema, arrow_value, value_fields
from strom.lake.columns import Row, meta_row
from strom.lake.json_arrow import json_row, json_value_fields
from strom.lake.protobuf_arrow import ProtobufValues
from strom.protocol.records.record import Record

KEY_VALUE = "key_value"
VALUE_SCHEMA_ID_PREFIX = "value_schema_id_prefix"
MODES = (KEY_VALUE, VALUE_SCHEMA_ID_PREFIX)

_PREFIX = struct.Struct(">bI")

# (schema type, schema text) of a registry id, or None while the registry does not know it.
SchemaLookup = Callable[[int], tuple[str, str] | None]
# A Protobuf schema id's compiled file and the files it imports, by name (raises when it does not compile).
ProtobufLookup = Callable[[int], tuple[FileDescriptorProto, Mapping[str, FileDescriptorProto]]]
# The schema a row was decoded with: its registry id, and for Protobuf the message's full name ("" else).
SchemaKey = tuple[int, str]


# The value's columns from its bytes after the prefix; raises ValueError (or the decoder's own error)
# for bytes that do not decode.
Decoder = Callable[[bytes], Row]


@dataclass
class ValueSchema:
    """One registry schema, parsed once: its columns and decoder (for Protobuf: its messages'), or why
    it has none."""

    schema_id: int
    fields: list[pa.Field] = field(default_factory=list)
    decode: Decoder | None = None
    error: str | None = None
    protobuf: ProtobufValues | None = None
    block: BlockSchema | None = None  # an Avro schema the columnar path decodes (strom.avro)


@dataclass
class Translation:
    """The rows of a range of records, for the table and for the dead-letter table."""

    rows: list[Row] = field(default_factory=list)
    dead: list[Row] = field(default_factory=list)
    row_schemas: list[SchemaKey] = field(default_factory=list)  # the schema each row was decoded with
    next_offset: int | None = None  # set when it stopped early (see waiting_for)
    waiting_for: int | None = None  # the unknown schema id it stopped at


class SchemaCache:
    """Registry schemas by id, parsed for decoding and mapped to columns (kept for the broker's life:
    a registry id never changes its schema)."""

    def __init__(self, lookup: SchemaLookup, protobuf: ProtobufLookup | None = None) -> None:
        self._lookup = lookup
        self._protobuf = protobuf
        self._schemas: dict[int, ValueSchema] = {}

    def get(self, schema_id: int) -> ValueSchema | None:
        cached = self._schemas.get(schema_id)
        if cached is not None:
            return cached
        found = self._lookup(schema_id)
        if found is None:
            return None
        self._schemas[schema_id] = schema = _parse(schema_id, *found, self._protobuf)
        return schema

    def columns(self, key: SchemaKey) -> list[pa.Field]:
        """The columns of a schema rows were decoded with (so one the cache holds)."""
        schema = self._schemas[key[0]]
        return schema.protobuf.columns(key[1]) if schema.protobuf is not None else schema.fields


def _parse(schema_id: int, schema_type: str, text: str, protobuf: ProtobufLookup | None) -> ValueSchema:
    kind = schema_type.upper()
    if kind == "PROTOBUF" and protobuf is not None:
        try:
            return ValueSchema(schema_id, protobuf=ProtobufValues(*protobuf(schema_id)))
        except Exception as exc:
            return ValueSchema(schema_id, error=f"schema {schema_id} does not compile: {exc}")
    if kind not in ("AVRO", "JSON"):
        return ValueSchema(schema_id, error=f"schema {schema_id} is {schema_type}: it has no decoder here")
    try:
        document = json.loads(text)
        if kind == "JSON":
            columns = json_value_fields(document)
            return ValueSchema(schema_id, columns, partial(_decode_json, columns))
        decode = partial(_decode_avro, parse_schema(document))
        return ValueSchema(schema_id, value_fields(document), decode, block=block_schema(document))
    except UnsupportedSchema as exc:
        return ValueSchema(schema_id, error=f"schema {schema_id}: {exc}")
    except Exception as exc:
        return ValueSchema(schema_id, error=f"schema {schema_id} does not parse: {exc}")


def _decode_avro(parsed: Any, body: bytes) -> Row:
    buffer = io.BytesIO(body)
    decoded = schemaless_reader(buffer, parsed, None)
    if buffer.tell() != len(body):
        raise ValueError("bytes left over after decoding")
    if not isinstance(decoded, dict):
        raise ValueError("the decoded value is not a record")
    return {name: arrow_value(v) for name, v in decoded.items()}


def _decode_json(columns: list[pa.Field], body: bytes) -> Row:
    row = json_row(json.loads(body), columns)
    if row is None:
        raise ValueError("the decoded value is not a JSON object")
    return row


def dead_row(partition: int, record: Record, reason: str) -> Row:
    row = meta_row(partition, record)
    row["value"] = record.value
    row["reason"] = reason
    return row


def translate(
    mode: str,
    partition: int,
    records: Sequence[Record],
    schemas: SchemaCache | None = None,
    give_up_waiting: bool = False,
) -> Translation:
    """The rows of ``records`` under ``mode``; ``give_up_waiting`` turns unknown schema ids into dead
    letters instead of a stop."""
    out = Translation()
    if mode == KEY_VALUE:
        for record in records:
            row = meta_row(partition, record)
            row["value"] = record.value
            out.rows.append(row)
        return out
    if schemas is None:
        raise ValueError(f"mode {mode} needs the registry's schemas")
    for record in records:
        value = record.value
        if value is None or len(value) < _PREFIX.size or value[0] != 0:
            out.dead.append(dead_row(partition, record, "the value has no schema id prefix"))
            continue
        _, schema_id = _PREFIX.unpack_from(value)
        schema = schemas.get(schema_id)
        if schema is None:
            if not give_up_waiting:
                out.next_offset, out.waiting_for = record.offset, schema_id
                return out
            out.dead.append(dead_row(partition, record, f"schema id {schema_id} is not in the registry"))
            continue
        if schema.decode is None and schema.protobuf is None:
            out.dead.append(dead_row(partition, record, schema.error or f"schema {schema_id}: no decoder"))
            continue
        message = ""
        try:
            if schema.protobuf is not None:
                message, decoded = schema.protobuf.decode(value[_PREFIX.size :])
            else:
                assert schema.decode is not None
                decoded = schema.decode(value[_PREFIX.size :])
        except UnsupportedSchema as exc:
            out.dead.append(dead_row(partition, record, f"schema {schema_id}: {exc}"))
            continue
        except Exception as exc:
            reason = f"the value does not decode with schema {schema_id}: {exc!r}"
            out.dead.append(dead_row(partition, record, reason))
            continue
        row = meta_row(partition, record)
        row.update(decoded)
        out.rows.append(row)
        out.row_schemas.append((schema_id, message))
    return out
