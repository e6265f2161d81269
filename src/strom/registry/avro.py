"""Avro schemas for the registry: validation, the stored (canonical) text, the parsed form for checks.

Two well-kept libraries do the parsing, each for what it does well:

* the ``avro`` package (Apache Avro's own Python implementation) validates the structure strictly:
  names, duplicate fields, duplicate union branches, fixed sizes, missing ``fields`` / ``items``;
* ``fastavro.parse_schema`` checks every field default against its type (``avro`` does not) and gives
  the parsed form the compatibility check walks: named types with full names, later uses of a name as a
  string, ``named`` holding every named type by full name.

A schema that either library refuses is invalid (42201, with the library's reason).

**Canonical text.** The registry stores, compares and returns one text per schema: the schema's own
JSON with insignificant differences removed — no whitespace, ``{"type": "int"}`` written ``"int"``,
object keys in a fixed order (``type``, ``name``, ``namespace``, ``doc``, ``aliases``, ``fields``,
``symbols``, ``items``, ``values``, ``size``, ``default``, logical-type keys, ``order``, then the other
keys sorted; a field's ``name``, ``type``, ``doc``, ``default``, ``order``, ``aliases`` first). Two
registrations whose canonical texts are equal are the same schema (same id). Unlike Avro's Parsing
Canonical Form it keeps defaults, docs, aliases and custom properties, because those matter to readers.

**References.** A schema may use named types defined by other registered schemas (Confluent's
``references``): their texts, dependencies first, are parsed into the same name tables before it.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TypeAlias

import avro.errors
import avro.name
import avro.schema
import fastavro

from strom._util.json_types import JsonObject, JsonValue
from strom.registry.errors import RegistryError, invalid_schema

PRIMITIVES = frozenset({"null", "boolean", "int", "long", "float", "double", "bytes", "string"})
_KEY_ORDER = (
    "type",
    "name",
    "namespace",
    "doc",
    "aliases",
    "fields",
    "symbols",
    "items",
    "values",
    "size",
    "default",
    "logicalType",
    "precision",
    "scale",
    "order",
)
_FIELD_KEY_ORDER = ("name", "type", "doc", "default", "order", "aliases")
ParsedSchema: TypeAlias = "str | list[JsonValue] | JsonObject"
"""A schema as fastavro takes and gives it: a type name, a union, or a type's object."""


@dataclass(frozen=True, slots=True)
class AvroSchema:
    """A validated schema: its canonical text and fastavro's parsed form (with every named type)."""

    canonical: str
    parsed: ParsedSchema
    named: dict[str, JsonObject] = field(default_factory=dict)


MAX_DEPTH = 100


def parse(text: str, references: list[str] | tuple[str, ...] = ()) -> AvroSchema:
    """Validate ``text`` (after the referenced schemas' texts, dependencies first).

    Raises:
        RegistryError: 42201 when the text is not JSON or not a valid Avro schema, or is nested deeper
            than ``MAX_DEPTH`` (the parsers and the compatibility check recurse per level).
    """
    if depth(text) > MAX_DEPTH:
        raise invalid_schema(f"the schema is nested more than {MAX_DEPTH} levels deep")
    try:
        document: JsonValue = json.loads(text)
    except (ValueError, TypeError) as exc:
        raise invalid_schema(f"the schema is not valid JSON: {exc}") from None
    ref_docs: list[JsonValue] = []
    for ref in references:
        try:
            ref_docs.append(json.loads(ref))
        except ValueError as exc:
            raise invalid_schema(f"a referenced schema is not valid JSON: {exc}") from None
    _check_with_avro(document, ref_docs)
    named: dict[str, JsonObject] = {}
    try:
        for ref_doc in ref_docs:
            fastavro.parse_schema(_schema_node(ref_doc), named_schemas=named)
        parsed = fastavro.parse_schema(_schema_node(document), named_schemas=named)
    except RegistryError:
        raise
    except Exception as exc:  # fastavro raises SchemaParseException, UnknownType, KeyError, ...
        raise invalid_schema(f"{type(exc).__name__}: {exc}") from None
    return AvroSchema(canonical_text(document), parsed, named)


def _schema_node(document: JsonValue) -> ParsedSchema:
    """A document the ``avro`` package accepted, as the name, union or object it then is."""
    if isinstance(document, str | list | dict):
        return document
    raise invalid_schema(f"not an Avro schema: {document!r}")


def depth(text: str) -> int:
    """The deepest nesting of JSON arrays and objects in ``text`` (brackets inside strings skipped)."""
    depth = deepest = 0
    in_string = escaped = False
    for char in text:
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif char in "]}":
            depth -= 1
    return deepest


def _check_with_avro(document: JsonValue, ref_docs: list[JsonValue]) -> None:
    names = avro.name.Names()
    try:
        with warnings.catch_warnings():
            # Unknown or malformed logical types are ignored by readers; the library only warns.
            warnings.simplefilter("ignore")
            for ref_doc in ref_docs:
                avro.schema.make_avsc_object(ref_doc, names)
            avro.schema.make_avsc_object(document, names)
    except (avro.errors.AvroException, ValueError, TypeError, KeyError, AttributeError) as exc:
        raise invalid_schema(str(exc) or type(exc).__name__) from None


def canonical_text(document: JsonValue) -> str:
    """The stored text of a schema document (see the module docstring)."""
    return json.dumps(_normalize(document), separators=(",", ":"), ensure_ascii=False)


def _normalize(node: JsonValue) -> JsonValue:
    if isinstance(node, list):
        return [_normalize(item) for item in node]
    if not isinstance(node, Mapping):
        return node
    if set(node) == {"type"} and isinstance(node["type"], str) and node["type"] in PRIMITIVES:
        return node["type"]
    out: JsonObject = {}
    for key in (*_KEY_ORDER, *sorted(set(node) - set(_KEY_ORDER))):
        if key not in node:
            continue
        value = node[key]
        if key == "fields" and isinstance(value, list):
            out[key] = [_normalize_field(f) for f in value]
        elif key in ("type", "items", "values"):
            out[key] = _normalize(value)
        else:
            out[key] = value
    return out


def _normalize_field(node: JsonValue) -> JsonValue:
    if not isinstance(node, Mapping):
        return node
    out: JsonObject = {}
    for key in (*_FIELD_KEY_ORDER, *sorted(set(node) - set(_FIELD_KEY_ORDER))):
        if key in node:
            out[key] = _normalize(node[key]) if key == "type" else node[key]
    return out
