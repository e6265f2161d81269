"""Confluent Schema Registry's operations over a `RegistryState`, sans-I/O.

Reads answer from the state. Writes *decide*: they validate, check compatibility and return a `Write`
holding the ``_schemas`` records to append and the answer to give once those records are committed;
they change nothing themselves (the host appends the records, waits for the high watermark to pass
them, replays them into the state, then answers). The host runs one write at a time, so each decision
sees every earlier one. Answers are the JSON bodies of Confluent's REST API.

Semantics follow Confluent's registry: a schema already registered (not deleted) under the subject
returns its id without a write; otherwise it must be compatible with the subject's versions under the
subject's compatibility (or the global one), gets the id its identity already has anywhere in the
registry or ``max_id + 1``, and the subject's next version. Soft deletes mark versions ``deleted``
(hidden unless ``deleted=true``); permanent deletes need a soft delete first and leave tombstones.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from strom.registry import errors
from strom.registry.compatibility import DEFAULT_COMPATIBILITY, Compatibility
from strom.registry.compatibility import check as check_modes
from strom.registry.formats import ParsedSchema, can_read, formatted, parse
from strom.registry.records import (
    Record,
    Reference,
    SchemaValue,
    config_record,
    id_record,
    mode_record,
    schema_record,
)
from strom.registry.state import RegistryState, StoredSchema

MODES = ("READWRITE", "READONLY", "IMPORT")


@dataclass(slots=True)
class Write:
    records: list[Record]
    answer: Any = None


@dataclass(frozen=True, slots=True)
class SchemaRequest:
    """The body of a register / lookup / compatibility request."""

    schema: str
    schema_type: str = "AVRO"
    references: tuple[Reference, ...] = ()
    schema_id: int | None = None  # IMPORT mode only
    version: int | None = None  # IMPORT mode only
    normalize: bool = False  # ``?normalize=true``: the format's normalized canonical text


class SchemaRegistry:
    def __init__(self, state: RegistryState | None = None) -> None:
        self.state = state or RegistryState()

    # --- parsing ---------------------------------------------------------------------------------
    def parse(self, request: SchemaRequest) -> ParsedSchema:
        references = self._reference_texts(request.references, set())
        return parse(request.schema_type, request.schema, references, request.normalize)

    def _reference_texts(
        self, references: tuple[Reference, ...], seen: set[tuple[str, int]]
    ) -> list[tuple[str, str]]:
        """The referenced schemas' (name, text), each one's own references first."""
        texts: list[tuple[str, str]] = []
        for ref in references:
            if (ref.subject, ref.version) in seen:
                continue
            seen.add((ref.subject, ref.version))
            value = self.state.subjects.get(ref.subject, {}).get(ref.version)
            if value is None:
                raise errors.invalid_schema(
                    f"reference {ref.name!r} to subject {ref.subject!r} version {ref.version} does not exist"
                )
            texts += self._reference_texts(value.references, seen)
            texts.append((ref.name, value.schema))
        return texts

    def _parsed(self, value: SchemaValue) -> ParsedSchema:
        return parse(value.schema_type, value.schema, self._reference_texts(value.references, set()))

    def formatted(self, stored: SchemaValue | StoredSchema, fmt: str | None) -> str:
        """A stored schema in the form ``fmt`` names (Protobuf's ``serialized``), else its text."""
        if not fmt or stored.schema_type == "AVRO":
            return stored.schema
        references = self._reference_texts(stored.references, set())
        return formatted(parse(stored.schema_type, stored.schema, references), fmt)

    # --- reads -----------------------------------------------------------------------------------
    def subjects(self, deleted: bool = False, prefix: str = "") -> list[str]:
        return [
            s for s in sorted(self.state.subjects) if s.startswith(prefix) and self.state.versions(s, deleted)
        ]

    def versions(self, subject: str, deleted: bool = False) -> list[int]:
        found = self.state.versions(subject, deleted)
        if not found:
            raise errors.subject_not_found(subject)
        return [v.version for v in found]

    def version(self, subject: str, version: int | None, deleted: bool = False) -> SchemaValue:
        """A subject's version (``None``: the latest); soft-deleted ones only when ``deleted``."""
        found = self.state.versions(subject, deleted=True)
        visible = [v for v in found if deleted or not v.deleted]
        if not visible:
            raise errors.subject_not_found(subject)
        if version is None:
            return visible[-1]
        for value in visible:
            if value.version == version:
                return value
        raise errors.version_not_found(version)

    def schema(self, schema_id: int) -> StoredSchema:
        stored = self.state.schemas.get(schema_id)
        if stored is None:
            raise errors.schema_not_found(schema_id)
        return stored

    def parsed_schema(self, schema_id: int) -> ParsedSchema | None:
        """The schema of an id, parsed with its references (a deserializer's view); None if unknown.

        Raises:
            RegistryError: 42201 when a reference it names is gone.
        """
        stored = self.state.schemas.get(schema_id)
        if stored is None:
            return None
        references = self._reference_texts(stored.references, set())
        return parse(stored.schema_type, stored.schema, references)

    def schema_versions(self, schema_id: int, deleted: bool = False) -> list[dict[str, str | int]]:
        self.schema(schema_id)
        return [{"subject": v.subject, "version": v.version} for v in self.state.usages(schema_id, deleted)]

    def schema_subjects(self, schema_id: int, deleted: bool = False) -> list[str]:
        self.schema(schema_id)
        return sorted({v.subject for v in self.state.usages(schema_id, deleted)})

    def lookup(self, subject: str, request: SchemaRequest, deleted: bool = False) -> SchemaValue:
        found = self.state.versions(subject, deleted)
        if not found:
            raise errors.subject_not_found(subject)
        identity = self._identity(self.parse(request), request)
        for value in reversed(found):
            if (value.schema_type, value.schema, value.references) == identity:
                return value
        raise errors.schema_not_found()

    def compatibility(self, subject: str | None, default_to_global: bool = True) -> str:
        level = self.state.configs.get(subject)
        if level is not None:
            return level
        if subject is not None and not default_to_global:
            raise errors.subject_config_not_found(subject)
        return self.state.configs.get(None, DEFAULT_COMPATIBILITY.value)

    def mode(self, subject: str | None, default_to_global: bool = True) -> str:
        mode = self.state.modes.get(subject)
        if mode is not None:
            return mode
        if subject is not None and not default_to_global:
            raise errors.subject_mode_not_found(subject)
        return self.state.modes.get(None, "READWRITE")

    def test_compatibility(
        self, subject: str, version: int | None, request: SchemaRequest, all_versions: bool = False
    ) -> list[str]:
        """Messages of incompatibility (empty: compatible) of the schema against a version or all."""
        new = self.parse(request)
        mode = Compatibility(self.compatibility(subject))
        if all_versions:
            return check_modes(mode, new, [self._parsed(v) for v in self.state.versions(subject)], can_read)
        old = self.version(subject, version)
        single = Compatibility(mode.value.removesuffix("_TRANSITIVE"))
        return check_modes(single, new, [self._parsed(old)], can_read)

    @staticmethod
    def _identity(parsed: ParsedSchema, request: SchemaRequest) -> tuple[str, str, tuple[Reference, ...]]:
        return (request.schema_type, parsed.canonical, request.references)

    # --- writes ----------------------------------------------------------------------------------
    def register(self, subject: str, request: SchemaRequest) -> Write:
        """Decide a registration; the answer is ``{"id": N}``."""
        mode = self.mode(subject)
        if mode == "READONLY":
            raise errors.operation_not_permitted(f"Subject {subject} is in read-only mode")
        if request.schema_id is not None and mode != "IMPORT":
            raise errors.operation_not_permitted(f"Subject {subject} is not in import mode")
        parsed = self.parse(request)
        identity = self._identity(parsed, request)
        live = self.state.versions(subject)
        for value in live:
            if (value.schema_type, value.schema, value.references) == identity and (
                request.schema_id in (None, value.schema_id)
            ):
                return Write([], {"id": value.schema_id})
        if mode != "IMPORT":
            previous = [self._parsed(v) for v in live]
            problems = check_modes(Compatibility(self.compatibility(subject)), parsed, previous, can_read)
            if problems:
                raise errors.incompatible(subject, problems)
        schema_id = self._allocate_id(identity, request.schema_id)
        every = self.state.versions(subject, deleted=True)
        version = request.version or (every[-1].version + 1 if every else 1)
        if request.version is not None and any(v.version == version for v in every):
            raise errors.operation_not_permitted(f"Subject {subject} already has a version {version}")
        value = SchemaValue(
            subject, version, schema_id, request.schema_type, parsed.canonical, request.references, False
        )
        return Write([schema_record(value)], {"id": schema_id})

    def _allocate_id(self, identity: tuple[str, str, tuple[Reference, ...]], wanted: int | None) -> int:
        known = self.state.ids.get(identity)
        if wanted is None:
            return known if known is not None else self.state.max_id + 1
        holder = self.state.schemas.get(wanted)
        if holder is not None and holder.identity != identity:
            raise errors.operation_not_permitted(f"Schema id {wanted} is already used by another schema")
        if wanted <= 0:
            raise errors.operation_not_permitted(f"Schema id {wanted} is not a positive number")
        return wanted

    def delete_subject(self, subject: str, permanent: bool) -> Write:
        every = self.state.versions(subject, deleted=True)
        if not every:
            raise errors.subject_not_found(subject)
        self._check_unreferenced(subject, every)
        live = [v for v in every if not v.deleted]
        if permanent:
            if live:
                raise errors.subject_not_soft_deleted(subject)
            records = [id_record(self.state.max_id)]
            records += [(schema_record(v)[0], None) for v in every]
            return Write(records, [v.version for v in every])
        if not live:
            raise errors.subject_soft_deleted(subject)
        records = [schema_record(_deleted(v)) for v in live]
        return Write(records, [v.version for v in live])

    def delete_version(self, subject: str, version: int | None, permanent: bool) -> Write:
        value = self.version(subject, version, deleted=permanent or version is not None)
        self._check_unreferenced(subject, [value])
        if permanent:
            if not value.deleted:
                raise errors.version_not_soft_deleted(subject, value.version)
            records = [id_record(self.state.max_id), (schema_record(value)[0], None)]
            return Write(records, value.version)
        if value.deleted:
            raise errors.version_soft_deleted(subject, value.version)
        return Write([schema_record(_deleted(value))], value.version)

    def _check_unreferenced(self, subject: str, values: list[SchemaValue]) -> None:
        targets = {(subject, v.version) for v in values}
        for versions in self.state.subjects.values():
            for other in versions.values():
                for ref in other.references:
                    if (ref.subject, ref.version) in targets and not other.deleted:
                        raise errors.referenced_by_others(ref.subject, ref.version)

    def set_compatibility(self, subject: str | None, level: object) -> Write:
        if not isinstance(level, str) or level.upper() not in Compatibility.__members__:
            raise errors.invalid_compatibility(level)
        return Write([config_record(subject, level.upper())], {"compatibility": level.upper()})

    def delete_compatibility(self, subject: str | None) -> Write:
        if subject is not None and subject not in self.state.subjects and subject not in self.state.configs:
            raise errors.subject_not_found(subject)
        previous = self.compatibility(subject)
        return Write([config_record(subject, None)], {"compatibilityLevel": previous})

    def set_mode(self, subject: str | None, mode: object, force: bool = False) -> Write:
        if not isinstance(mode, str) or mode.upper() not in MODES:
            raise errors.invalid_mode(mode)
        mode = mode.upper()
        if mode == "IMPORT" and not force:
            has = self.state.versions(subject) if subject is not None else self.subjects()
            if has:
                raise errors.operation_not_permitted(
                    "Cannot import since found existing subjects; set force=true to import anyway"
                )
        return Write([mode_record(subject, mode)], {"mode": mode})

    def delete_mode(self, subject: str) -> Write:
        previous = self.mode(subject)
        return Write([mode_record(subject, None)], {"mode": previous})


def _deleted(value: SchemaValue) -> SchemaValue:
    return SchemaValue(
        value.subject, value.version, value.schema_id, value.schema_type, value.schema, value.references, True
    )
