"""The registry's state, rebuilt by replaying ``_schemas`` in offset order (`RegistryState.apply`).

Every broker holds one: the writer applies the records it appended once they are committed, the others
as they follow the topic, and all of them on start by reading it from the beginning. `apply` is the
only way the state changes, so a state rebuilt from the log equals the one that wrote it.

* ``subjects[subject][version]`` → `SchemaValue` (with its ``deleted`` flag for soft deletes);
* ``schemas[id]`` → `StoredSchema`, ``ids`` from a schema's identity (type, canonical text,
  references) to its id: the same schema registered under several subjects shares one id;
* ``max_id``: the largest id ever seen (SCHEMA records and the ``ID`` watermark); it never goes down,
  so a permanently deleted schema's id is not given again;
* ``configs`` / ``modes``: by subject, ``None`` for the global setting;
* ``writer``: the last broker that announced itself as the writer (where writes are forwarded).
"""

from __future__ import annotations

from dataclasses import dataclass

from strom.registry.records import (
    ConfigKey,
    IdKey,
    ModeKey,
    RecordError,
    Reference,
    SchemaKey,
    SchemaValue,
    Writer,
    WriterKey,
    decode_field,
    decode_key,
    decode_schema_value,
    decode_writer,
)

SchemaIdentity = tuple[str, str, tuple[Reference, ...]]


@dataclass(frozen=True, slots=True)
class StoredSchema:
    schema_id: int
    schema_type: str
    schema: str
    references: tuple[Reference, ...]

    @property
    def identity(self) -> SchemaIdentity:
        return (self.schema_type, self.schema, self.references)


class RegistryState:
    def __init__(self) -> None:
        self.subjects: dict[str, dict[int, SchemaValue]] = {}
        self.schemas: dict[int, StoredSchema] = {}
        self.ids: dict[SchemaIdentity, int] = {}
        self.max_id = 0
        self.configs: dict[str | None, str] = {}
        self.modes: dict[str | None, str] = {}
        self.writer: Writer | None = None

    def apply(self, key: bytes, value: bytes | None) -> None:
        """Apply one ``_schemas`` record. Raises `RecordError` (and changes nothing) if it does not parse."""
        decoded = decode_key(key)
        if isinstance(decoded, SchemaKey):
            if value is None:
                self._remove_version(decoded.subject, decoded.version)
            else:
                self._put_version(decode_schema_value(value))
        elif isinstance(decoded, ConfigKey):
            self._set(self.configs, decoded.subject, value, "compatibilityLevel")
        elif isinstance(decoded, ModeKey):
            self._set(self.modes, decoded.subject, value, "mode")
        elif isinstance(decoded, IdKey):
            if value is not None:
                self.max_id = max(self.max_id, int(decode_field(value, "max_id", int)))
        elif isinstance(decoded, WriterKey) and value is not None:
            self.writer = decode_writer(value)

    @staticmethod
    def _set(table: dict[str | None, str], subject: str | None, value: bytes | None, name: str) -> None:
        if value is None:
            table.pop(subject, None)
        else:
            table[subject] = str(decode_field(value, name, str))

    def _put_version(self, value: SchemaValue) -> None:
        if value.schema_id <= 0 or value.version <= 0:
            raise RecordError(f"id {value.schema_id} / version {value.version} out of range")
        stored = StoredSchema(value.schema_id, value.schema_type, value.schema, value.references)
        known = self.schemas.get(value.schema_id)
        if known is not None and known.identity != stored.identity:
            raise RecordError(f"id {value.schema_id} already names another schema")
        previous = self.subjects.get(value.subject, {}).get(value.version)
        self.subjects.setdefault(value.subject, {})[value.version] = value
        if previous is not None and previous.schema_id != value.schema_id:
            self._forget_if_unused(previous.schema_id)
        self.schemas[value.schema_id] = stored
        self.ids[stored.identity] = value.schema_id
        self.max_id = max(self.max_id, value.schema_id)

    def _remove_version(self, subject: str, version: int) -> None:
        versions = self.subjects.get(subject)
        if versions is None or version not in versions:
            return
        removed = versions.pop(version)
        if not versions:
            del self.subjects[subject]
        self._forget_if_unused(removed.schema_id)

    def _forget_if_unused(self, schema_id: int) -> None:
        for versions in self.subjects.values():
            if any(v.schema_id == schema_id for v in versions.values()):
                return
        stored = self.schemas.pop(schema_id, None)
        if stored is not None:
            self.ids.pop(stored.identity, None)

    # --- queries -------------------------------------------------------------------------------
    def versions(self, subject: str, deleted: bool = False) -> list[SchemaValue]:
        """The subject's versions in order; soft-deleted ones only when ``deleted``."""
        found = self.subjects.get(subject, {})
        return [found[v] for v in sorted(found) if deleted or not found[v].deleted]

    def usages(self, schema_id: int, deleted: bool = False) -> list[SchemaValue]:
        return [
            value
            for subject in sorted(self.subjects)
            for value in self.versions(subject, deleted)
            if value.schema_id == schema_id
        ]
