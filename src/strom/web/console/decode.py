"""Keys and values as the message browser shows them: decoded through the schema registry, else as text
or hex.

Confluent's wire format is a zero magic byte, the 4-byte big-endian schema id, then the payload; what
the payload is depends on the schema's type:

* ``AVRO``: Avro binary of the writer's schema (fastavro's ``schemaless_reader`` with the registry's
  parsed schema, references included), shown as JSON;
* ``JSON`` (JSON Schema): the JSON text itself, shown re-indented;
* ``PROTOBUF``: first the *message indexes*, the path to the message type in the schema's file (a
  zigzag varint count then that many zigzag varint indexes, nested type by nested type; the single byte
  0 means the first message type), then the message in Protobuf binary, shown as JSON through the
  descriptor the registry compiled (``google.protobuf.json_format``); the indexes and the message they
  name are read as the Iceberg translator reads them (strom.lake.protobuf_wire).

A value that does not start that way, names an id the registry does not know, or does not decode with
that schema is shown as UTF-8 text when it is text (no control characters but tabs and line breaks), else
as ``0x`` hex, the form the browser's key search takes, so that a binary key is seen and can be looked
up; shown text is cut at ``MAX_SHOWN`` characters. Message classes are built once per schema id
(`_PROTO_CLASSES`, bounded): a browser page decodes up to hundreds of records of one or two schemas.
"""

from __future__ import annotations

import io
import json
import re
import struct
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import fastavro
from google.protobuf import json_format, message_factory
from google.protobuf.message import Message

from strom.lake.protobuf_wire import descriptor_pool, message_name, read_indexes
from strom.registry.avro import AvroSchema
from strom.registry.errors import RegistryError
from strom.registry.json_schema import JsonSchema
from strom.registry.protobuf_schema import ProtobufSchema
from strom.registry.registry import SchemaRegistry

MAX_SHOWN = 2048
_PROTO_CACHE = 64
_CONTROL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")  # invisible on a page: such bytes are hex


@dataclass(frozen=True, slots=True)
class Shown:
    text: str
    form: str  # "null", "text", "hex", "avro", "json", "protobuf"
    schema_id: int | None = None


def cut(text: str) -> str:
    return text[:MAX_SHOWN] + ("…" if len(text) > MAX_SHOWN else "")


def as_text_or_hex(data: bytes) -> Shown:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        text = None
    if text is not None and _CONTROL.search(text, 0, MAX_SHOWN) is None:
        return Shown(cut(text), "text")
    return Shown("0x" + data[:MAX_SHOWN].hex() + ("…" if len(data) > MAX_SHOWN else ""), "hex")


class RecordDecoder:
    """Decodes keys and values for one page (a registry lookup per distinct schema id)."""

    _PROTO_CLASSES: OrderedDict[int, tuple[ProtobufSchema, dict[tuple[int, ...], type[Message]]]] = (
        OrderedDict()
    )

    def __init__(self, registry: SchemaRegistry) -> None:
        self._registry = registry

    def show(self, data: bytes | None) -> Shown:
        if data is None:
            return Shown("null", "null")
        if len(data) >= 5 and data[0] == 0:
            (schema_id,) = struct.unpack_from(">I", data, 1)
            decoded = self._decode(schema_id, data)
            if decoded is not None:
                return decoded
        return as_text_or_hex(data)

    def _decode(self, schema_id: int, data: bytes) -> Shown | None:
        try:
            parsed = self._registry.parsed_schema(schema_id)
        except RegistryError:
            return None
        if parsed is None:
            return None
        form = parsed.form
        try:
            if isinstance(form, AvroSchema):
                value: Any = fastavro.schemaless_reader(io.BytesIO(data[5:]), form.parsed, None)
                return Shown(cut(json.dumps(value, default=str)), "avro", schema_id)
            if isinstance(form, JsonSchema):
                document = json.loads(data[5:])
                return Shown(cut(json.dumps(document, indent=1)), "json", schema_id)
            indexes, pos = read_indexes(data, 5)
            message = self._proto_class(schema_id, form, tuple(indexes))()
            message.ParseFromString(data[pos:])
            shown = json_format.MessageToJson(message, indent=1, preserving_proto_field_name=True)
            return Shown(cut(shown), "protobuf", schema_id)
        except Exception:  # not this schema's bytes after all: shown as bytes
            return None

    def _proto_class(self, schema_id: int, form: ProtobufSchema, indexes: tuple[int, ...]) -> type[Message]:
        cache = self._PROTO_CLASSES
        entry = cache.get(schema_id)
        if entry is None or entry[0] is not form:
            entry = (form, {})
            cache[schema_id] = entry
            while len(cache) > _PROTO_CACHE:
                cache.popitem(last=False)
        cache.move_to_end(schema_id)
        found = entry[1].get(indexes)
        if found is None:
            found = entry[1][indexes] = _message_class(form, indexes)
        return found


def _message_class(form: ProtobufSchema, indexes: tuple[int, ...]) -> type[Message]:
    """The message type the indexes name, in a pool of its own holding the schema's files."""
    pool = descriptor_pool(form.file, form.dependencies)
    name = message_name(form.file, list(indexes))
    found: type[Message] = message_factory.GetMessageClass(pool.FindMessageTypeByName(name))
    return found
