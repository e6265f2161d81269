"""The records of ``_schemas``, the registry's compacted internal topic (one partition).

Keys are JSON objects shaped like Confluent Schema Registry's, so that compaction keeps exactly the
latest record per logical key and a reader of the topic recognises them; values are Strom's own JSON.
Both are written compactly with a fixed key order, so the same logical key is always the same bytes.

* ``SCHEMA`` (subject, version, magic=1) → ``{"subject", "version", "id", "schemaType", "schema",
  "references", "deleted"}``: a subject's version; ``deleted`` marks a soft delete; a tombstone (null
  value) is a permanent delete.
* ``CONFIG`` (subject, null for the global one; magic=0) → ``{"compatibilityLevel": "BACKWARD"}``;
  a tombstone goes back to the global setting / the default.
* ``MODE`` (subject or null; magic=0) → ``{"mode": "READWRITE"}`` (or READONLY, IMPORT); tombstone
  as for CONFIG.
* ``ID`` (magic=0) → ``{"max_id": N}``: the largest id ever given, written before permanent deletes so
  that no id is given again once the deleted versions' records are compacted away.
* ``WRITER`` (magic=0) → ``{"broker_id": B, "url": "http://host:port", "leader_epoch": E}``: the broker
  now allocating ids (leader of ``_schemas``-0), where the other brokers forward writes.

Decoding raises `RecordError` for anything else; the replay logs and skips such a record.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, NotRequired, TypedDict, TypeVar, cast

from strom._util.json_types import JsonObject, JsonValue

SCHEMAS_TOPIC = "_schemas"


class RecordError(ValueError):
    """A ``_schemas`` record that does not parse."""


@dataclass(frozen=True, slots=True)
class Reference:
    """A named type this schema uses from another subject's version (Confluent's ``references``)."""

    name: str
    subject: str
    version: int

    def to_json(self) -> dict[str, str | int]:
        return {"name": self.name, "subject": self.subject, "version": self.version}


@dataclass(frozen=True, slots=True)
class SchemaKey:
    subject: str
    version: int


@dataclass(frozen=True, slots=True)
class SchemaValue:
    subject: str
    version: int
    schema_id: int
    schema_type: str
    schema: str
    references: tuple[Reference, ...]
    deleted: bool


@dataclass(frozen=True, slots=True)
class ConfigKey:
    subject: str | None


@dataclass(frozen=True, slots=True)
class ModeKey:
    subject: str | None


@dataclass(frozen=True, slots=True)
class IdKey:
    pass


@dataclass(frozen=True, slots=True)
class WriterKey:
    pass


@dataclass(frozen=True, slots=True)
class Writer:
    broker_id: int
    url: str | None
    leader_epoch: int


Key = SchemaKey | ConfigKey | ModeKey | IdKey | WriterKey
Record = tuple[bytes, bytes | None]


def _dumps(doc: Mapping[str, JsonValue]) -> bytes:
    return json.dumps(doc, separators=(",", ":"), ensure_ascii=False).encode()


def encode_key(key: Key) -> bytes:
    if isinstance(key, SchemaKey):
        return _dumps({"keytype": "SCHEMA", "subject": key.subject, "version": key.version, "magic": 1})
    if isinstance(key, ConfigKey):
        return _dumps({"keytype": "CONFIG", "subject": key.subject, "magic": 0})
    if isinstance(key, ModeKey):
        return _dumps({"keytype": "MODE", "subject": key.subject, "magic": 0})
    if isinstance(key, IdKey):
        return _dumps({"keytype": "ID", "magic": 0})
    return _dumps({"keytype": "WRITER", "magic": 0})


def schema_record(value: SchemaValue) -> Record:
    doc: JsonObject = {
        "subject": value.subject,
        "version": value.version,
        "id": value.schema_id,
        "schemaType": value.schema_type,
        "schema": value.schema,
        "references": [r.to_json() for r in value.references],
        "deleted": value.deleted,
    }
    return encode_key(SchemaKey(value.subject, value.version)), _dumps(doc)


def config_record(subject: str | None, level: str | None) -> Record:
    value = None if level is None else _dumps({"compatibilityLevel": level})
    return encode_key(ConfigKey(subject)), value


def mode_record(subject: str | None, mode: str | None) -> Record:
    return encode_key(ModeKey(subject)), None if mode is None else _dumps({"mode": mode})


def id_record(max_id: int) -> Record:
    return encode_key(IdKey()), _dumps({"max_id": max_id})


def writer_record(writer: Writer) -> Record:
    doc = {"broker_id": writer.broker_id, "url": writer.url, "leader_epoch": writer.leader_epoch}
    return encode_key(WriterKey()), _dumps(doc)


class _KeyJson(TypedDict, total=False):
    keytype: str
    subject: str | None
    version: int


class _ReferenceJson(TypedDict):
    name: str
    subject: str
    version: int


class _SchemaValueJson(TypedDict):
    subject: str
    version: int
    id: int
    schemaType: NotRequired[str | None]
    schema: str
    references: NotRequired[list[_ReferenceJson] | None]
    deleted: NotRequired[bool]


class _WriterJson(TypedDict):
    broker_id: int
    url: NotRequired[str | None]
    leader_epoch: int


_Doc = TypeVar("_Doc")


def _load(data: bytes, what: str) -> JsonObject:
    try:
        doc = json.loads(data)
    except (ValueError, UnicodeDecodeError) as exc:
        raise RecordError(f"{what} is not JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise RecordError(f"{what} is not a JSON object")
    return doc


def _load_as(data: bytes, what: str, shape: type[_Doc]) -> _Doc:
    """`_load`, read as ``shape``; decoders still convert and check each value they use."""
    return cast(_Doc, _load(data, what))


def _optional_subject(doc: _KeyJson) -> str | None:
    subject = doc.get("subject")
    if subject is not None and not isinstance(subject, str):
        raise RecordError(f"subject {subject!r} is not a string")
    return subject


def decode_key(data: bytes) -> Key:
    doc = _load_as(data, "key", _KeyJson)
    keytype = doc.get("keytype")
    try:
        if keytype == "SCHEMA":
            return SchemaKey(str(doc["subject"]), int(doc["version"]))
        if keytype == "CONFIG":
            return ConfigKey(_optional_subject(doc))
        if keytype == "MODE":
            return ModeKey(_optional_subject(doc))
        if keytype == "ID":
            return IdKey()
        if keytype == "WRITER":
            return WriterKey()
    except (KeyError, TypeError, ValueError) as exc:
        raise RecordError(f"{keytype} key {doc!r}: {exc}") from None
    raise RecordError(f"unknown keytype {keytype!r}")


def decode_schema_value(data: bytes) -> SchemaValue:
    doc = _load_as(data, "SCHEMA value", _SchemaValueJson)
    try:
        refs = tuple(
            Reference(str(r["name"]), str(r["subject"]), int(r["version"]))
            for r in doc.get("references") or ()
        )
        return SchemaValue(
            str(doc["subject"]),
            int(doc["version"]),
            int(doc["id"]),
            str(doc.get("schemaType") or "AVRO"),
            str(doc["schema"]),
            refs,
            bool(doc.get("deleted", False)),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise RecordError(f"SCHEMA value {doc!r}: {exc}") from None


def decode_field(data: bytes, name: str, kind: type) -> Any:
    """One field of a CONFIG / MODE / ID value, checked for its type."""
    doc = _load(data, "value")
    value = doc.get(name)
    if not isinstance(value, kind) or isinstance(value, bool) is not (kind is bool):
        raise RecordError(f"value {doc!r} has no {kind.__name__} {name!r}")
    return value


def decode_writer(data: bytes) -> Writer:
    doc = _load_as(data, "WRITER value", _WriterJson)
    try:
        url = doc.get("url")
        return Writer(int(doc["broker_id"]), None if url is None else str(url), int(doc["leader_epoch"]))
    except (KeyError, TypeError, ValueError) as exc:
        raise RecordError(f"WRITER value {doc!r}: {exc}") from None
