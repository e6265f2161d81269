"""The schema registry as the Spark connector uses it: look-ups by subject, version and id, registration.

Theory of operation
-------------------
confluent-kafka's `SchemaRegistryClient` does the HTTP; it is created lazily and never pickled, so a
`Registry` crosses from the driver to the executors as its settings only. Every look-up answers a
`SchemaText`: the id, the schema text, its type (`AVRO`, `PROTOBUF`, `JSON`) and its references (other
subjects' versions, imported by name). `references()` follows them depth-first, so a Protobuf schema
compiles with every file it imports and a JSON Schema resolves every `$ref` to another subject.

Schemas by id are immutable, so executors cache them for the life of their Python worker process
(`_BY_ID`, keyed by registry URL and id): a task decoding records written with an older schema asks
the registry once per process, not once per record or batch.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

from strom.spark.errors import KafkaOptionError

_BY_ID: dict[tuple[str, int], SchemaText] = {}
_BY_ID_LOCK = threading.Lock()


@dataclass(frozen=True)
class SchemaText:
    """A registered schema: id, text, type and references as (name, subject, version) triples."""

    schema_id: int
    text: str
    schema_type: str = "AVRO"
    references: tuple[tuple[str, str, int], ...] = ()


def _as_text(schema_id: int, schema: Any) -> SchemaText:
    refs = tuple((str(r.name), str(r.subject), int(r.version)) for r in (schema.references or []))
    return SchemaText(int(schema_id), str(schema.schema_str), str(schema.schema_type or "AVRO"), refs)


class Registry:
    """confluent-kafka's `SchemaRegistryClient`, opened on first use (picklable)."""

    def __init__(self, config: dict[str, str]) -> None:
        self._config = dict(config)
        self._client: Any = None

    def __getstate__(self) -> dict[str, object]:
        return {"_config": self._config, "_client": None}

    @property
    def url(self) -> str:
        return self._config.get("url", "")

    def _open(self) -> Any:
        if self._client is None:
            from confluent_kafka.schema_registry import SchemaRegistryClient

            self._client = SchemaRegistryClient(self._config)
        return self._client

    def latest(self, subject: str) -> SchemaText:
        """The subject's latest version."""
        return self.version(subject, None)

    def version(self, subject: str, version: int | None) -> SchemaText:
        """A version of the subject (None: the latest).

        Raises:
            KafkaOptionError: the registry has no such subject or version.
        """
        from confluent_kafka.schema_registry.error import SchemaRegistryError

        try:
            client = self._open()
            found = (
                client.get_latest_version(subject)
                if version is None
                else client.get_version(subject, version)
            )
        except SchemaRegistryError as e:
            which = "latest version" if version is None else f"version {version}"
            raise KafkaOptionError(
                f"schema registry {self.url}: no {which} for subject {subject!r} ({e})"
            ) from e
        return _as_text(found.schema_id, found.schema)

    def by_id(self, schema_id: int) -> SchemaText:
        """The schema registered with `schema_id` (cached for the life of the process)."""
        key = (self.url, schema_id)
        with _BY_ID_LOCK:
            found = _BY_ID.get(key)
        if found is None:
            found = _as_text(schema_id, self._open().get_schema(schema_id))
            with _BY_ID_LOCK:
                _BY_ID[key] = found
        return found

    def schema(self, schema_id: int) -> str:
        """The text of the schema registered with `schema_id`."""
        return self.by_id(schema_id).text

    def references(self, schema: SchemaText) -> list[tuple[str, SchemaText]]:
        """Every schema `schema` references, directly or not, as (name, schema), dependencies first."""
        found: dict[str, SchemaText] = {}

        def visit(current: SchemaText) -> None:
            for name, subject, version in current.references:
                if name in found:
                    continue
                referenced = self.version(subject, version)
                visit(referenced)
                found[name] = referenced

        visit(schema)
        return list(found.items())

    def register(self, subject: str, text: str, schema_type: str = "AVRO") -> int:
        """Register `text` under `subject` (the registry answers the existing id when it is there)."""
        from confluent_kafka.schema_registry import Schema

        return int(self._open().register_schema(subject, Schema(text, schema_type)))
