"""The registry's schema formats (``schemaType``): one entry point per operation, dispatched by type.

* ``AVRO`` (`strom.registry.avro`, compatibility in `strom.registry.compatibility`);
* ``JSON`` — JSON Schema (`strom.registry.json_schema`, `strom.registry.json_schema_compat`);
* ``PROTOBUF`` (`strom.registry.protobuf_schema`, `strom.registry.protobuf_compat`).

`parse` validates a schema text with the texts of everything it references, as (name, text) pairs
with dependencies first (Avro uses the texts, JSON Schema resolves ``$ref`` by name, Protobuf
imports files by name), and gives a
`ParsedSchema` holding the canonical text the registry stores and compares. `can_read` is the
per-format judge of one reader / writer pair that the compatibility modes apply; schemas of
different types never read each other. `formatted` gives a stored schema in another form a format
offers (Protobuf's ``format=serialized``: the base64 ``FileDescriptorProto`` confluent-kafka reads).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass

from strom.registry import (
    avro,
    compatibility,
    json_schema,
    json_schema_compat,
    protobuf_compat,
    protobuf_schema,
)
from strom.registry.errors import invalid_schema

SCHEMA_TYPES = ("AVRO", "JSON", "PROTOBUF")


@dataclass(frozen=True, slots=True)
class ParsedSchema:
    schema_type: str
    canonical: str
    form: avro.AvroSchema | json_schema.JsonSchema | protobuf_schema.ProtobufSchema


PARSED_CACHE_SIZE = 512


def parse(
    schema_type: str, text: str, references: Sequence[tuple[str, str]] = (), normalize: bool = False
) -> ParsedSchema:
    """Validate a schema of ``schema_type`` (42201 when it is invalid or the type is unknown).

    Results are remembered (never mutated by their users): a transitive check parses every registered
    version again on each registration, and a Protobuf parse runs protoc.
    """
    return _parse(schema_type, text, tuple(references), normalize)


@functools.lru_cache(maxsize=PARSED_CACHE_SIZE)
def _parse(
    schema_type: str, text: str, references: tuple[tuple[str, str], ...], normalize: bool
) -> ParsedSchema:
    if schema_type == "AVRO":
        parsed_avro = avro.parse(text, [ref_text for _, ref_text in references])
        return ParsedSchema(schema_type, parsed_avro.canonical, parsed_avro)
    if schema_type == "JSON":
        parsed_json = json_schema.parse(text, references, normalize)
        return ParsedSchema(schema_type, parsed_json.canonical, parsed_json)
    if schema_type == "PROTOBUF":
        parsed_proto = protobuf_schema.parse(text, references)
        return ParsedSchema(schema_type, parsed_proto.canonical, parsed_proto)
    raise invalid_schema(f"schema type {schema_type} is not one of {', '.join(SCHEMA_TYPES)}")


def can_read(reader: ParsedSchema, writer: ParsedSchema) -> list[str]:
    """Why ``reader`` cannot read data written with ``writer``; empty when it can."""
    r, w = reader.form, writer.form
    if isinstance(r, avro.AvroSchema) and isinstance(w, avro.AvroSchema):
        return compatibility.can_read(r, w)
    if isinstance(r, json_schema.JsonSchema) and isinstance(w, json_schema.JsonSchema):
        return json_schema_compat.can_read(r, w)
    if isinstance(r, protobuf_schema.ProtobufSchema) and isinstance(w, protobuf_schema.ProtobufSchema):
        return protobuf_compat.can_read(r, w)
    return [
        f"TYPE_MISMATCH: a {reader.schema_type} schema cannot read data written with {writer.schema_type}"
    ]


def formatted(parsed: ParsedSchema, fmt: str | None) -> str:
    """The schema in the form ``fmt`` names (``serialized`` for Protobuf), else its canonical text."""
    if fmt == "serialized" and isinstance(parsed.form, protobuf_schema.ProtobufSchema):
        return parsed.form.serialized()
    return parsed.canonical
