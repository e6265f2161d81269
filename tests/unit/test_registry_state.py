"""The registry's decisions (`SchemaRegistry`) and its state replayed from ``_schemas`` records."""

from __future__ import annotations

import json
from typing import Any

import pytest

from strom.registry.errors import RegistryError
from strom.registry.records import (
    RecordError,
    Reference,
    SchemaKey,
    SchemaValue,
    decode_key,
    encode_key,
    schema_record,
)
from strom.registry.registry import SchemaRegistry, SchemaRequest, Write
from strom.registry.state import RegistryState

V1 = {"type": "record", "name": "User", "fields": [{"name": "name", "type": "string"}]}
V2 = {
    "type": "record",
    "name": "User",
    "fields": [{"name": "name", "type": "string"}, {"name": "age", "type": "int", "default": 0}],
}
V3 = {"type": "record", "name": "User", "fields": [*V2["fields"], {"name": "email", "type": "string"}]}


class Log:
    """A registry and the records it committed, as ``_schemas`` would hold them."""

    def __init__(self) -> None:
        self.registry = SchemaRegistry()
        self.records: list[tuple[bytes, bytes | None]] = []

    def commit(self, write: Write) -> Any:
        for key, value in write.records:
            self.registry.state.apply(key, value)
        self.records += write.records
        return write.answer

    def register(self, subject: str, doc: Any, **kw: Any) -> int:
        return int(self.commit(self.registry.register(subject, SchemaRequest(json.dumps(doc), **kw)))["id"])

    def replay(self, compacted: bool = False) -> RegistryState:
        records = self.records
        if compacted:  # what the log cleaner leaves: the last record per key, tombstones gone
            latest = dict(records)
            records = [(k, v) for k, v in latest.items() if v is not None]
        state = RegistryState()
        for key, value in records:
            state.apply(key, value)
        return state


def error_of(call: Any, *args: Any) -> tuple[int, int]:
    with pytest.raises(RegistryError) as info:
        call(*args)
    return info.value.status, info.value.error_code


def test_register_evolve_and_refuse() -> None:
    log = Log()
    assert log.register("u", V1) == 1
    assert log.register("u", V1) == 1  # the same schema: same id, no new version
    assert log.register("u", json.loads(json.dumps(V1))) == 1
    assert log.register("u", V2) == 2
    assert error_of(log.registry.register, "u", SchemaRequest(json.dumps(V3))) == (409, 409)
    assert log.registry.versions("u") == [1, 2]
    assert log.registry.version("u", None).schema_id == 2


def test_same_schema_text_in_any_layout_is_one_id_across_subjects() -> None:
    log = Log()
    assert log.register("a", V1) == 1
    spaced = json.dumps({"fields": V1["fields"], "name": "User", "type": "record"}, indent=4)
    assert log.commit(log.registry.register("b", SchemaRequest(spaced))) == {"id": 1}
    assert log.registry.schema_versions(1) == [{"subject": "a", "version": 1}, {"subject": "b", "version": 1}]
    assert log.register("c", "string") == 2
    assert log.register("d", {"type": "string"}) == 2


def test_soft_and_permanent_deletes() -> None:
    log = Log()
    log.register("u", V1)
    log.register("u", V2)
    assert log.commit(log.registry.delete_version("u", 1, False)) == 1
    assert log.registry.versions("u") == [2]
    assert log.registry.versions("u", deleted=True) == [1, 2]
    assert error_of(log.registry.delete_version, "u", 1, False)[1] == 40406
    assert error_of(log.registry.delete_version, "u", 2, True)[1] == 40407
    assert error_of(log.registry.delete_subject, "u", True)[1] == 40405
    assert log.commit(log.registry.delete_subject("u", False)) == [2]
    assert log.registry.subjects() == []
    assert log.registry.subjects(deleted=True) == ["u"]
    assert error_of(log.registry.versions, "u")[1] == 40401
    assert error_of(log.registry.delete_subject, "u", False)[1] == 40404
    assert log.commit(log.registry.delete_subject("u", True)) == [1, 2]
    assert error_of(log.registry.schema, 1)[1] == 40403


def test_ids_are_never_reused_after_permanent_deletes_and_compaction() -> None:
    log = Log()
    log.register("u", V1)
    log.register("u", V2)
    log.commit(log.registry.delete_subject("u", False))
    log.commit(log.registry.delete_subject("u", True))
    for state in (log.registry.state, log.replay(), log.replay(compacted=True)):
        assert state.max_id == 2
        assert state.subjects == {}
    log.registry = SchemaRegistry(log.replay(compacted=True))
    assert log.register("v", {"type": "enum", "name": "E", "symbols": ["A"]}) == 3


def test_replay_rebuilds_the_same_state() -> None:
    log = Log()
    log.register("u", V1)
    log.register("u", V2)
    log.register("w", V1)
    log.commit(log.registry.set_compatibility("w", "full"))
    log.commit(log.registry.delete_version("u", 1, False))
    state = log.replay()
    assert state.subjects == log.registry.state.subjects
    assert state.schemas == log.registry.state.schemas
    assert state.configs == {"w": "FULL"}
    assert log.replay(compacted=True).subjects == log.registry.state.subjects


def test_records_that_do_not_parse_raise_record_error() -> None:
    state = RegistryState()
    for key, value in [
        (b"not json", b"{}"),
        (b'{"keytype":"SCHEMA"}', b"{}"),
        (b'{"keytype":"NOPE","magic":0}', b"{}"),
        (encode_key(SchemaKey("u", 1)), b"[1]"),
        (encode_key(SchemaKey("u", 1)), b'{"subject":"u","version":1,"id":"x","schema":"{}"}'),
        (b'{"keytype":"CONFIG","subject":null,"magic":0}', b'{"compatibilityLevel":7}'),
    ]:
        with pytest.raises(RecordError):
            state.apply(key, value)
    assert state.subjects == {} and state.configs == {}
    good = SchemaValue("u", 1, 1, "AVRO", '"string"', (), False)
    state.apply(*schema_record(good))
    assert state.versions("u") == [good]
    assert decode_key(encode_key(SchemaKey("u", 1))) == SchemaKey("u", 1)


def test_invalid_schemas_and_types() -> None:
    registry = SchemaRegistry()
    for text in ("{not json", '{"type":"nope"}', '{"type":"record","name":"R"}', '"Undefined"'):
        assert error_of(registry.register, "u", SchemaRequest(text)) == (422, 42201), text
    deep = '{"type":"array","items":' * 3000 + '"int"' + "}" * 3000
    assert error_of(registry.register, "u", SchemaRequest(deep)) == (422, 42201)
    bad_default = {"type": "record", "name": "R", "fields": [{"name": "a", "type": "int", "default": "x"}]}
    assert error_of(registry.register, "u", SchemaRequest(json.dumps(bad_default)))[1] == 42201
    for schema_type, text in (("XML", "{}"), ("JSON", '{"type":"objekt"}'), ("PROTOBUF", "message {")):
        with pytest.raises(RegistryError) as info:
            registry.register("u", SchemaRequest(text, schema_type))
        assert info.value.error_code == 42201


def test_versions_and_lookups() -> None:
    log = Log()
    log.register("u", V1)
    assert error_of(log.registry.version, "u", 7) == (404, 40402)
    assert error_of(log.registry.version, "nope", None) == (404, 40401)
    assert log.registry.lookup("u", SchemaRequest(json.dumps(V1))).version == 1
    assert error_of(log.registry.lookup, "u", SchemaRequest(json.dumps(V2))) == (404, 40403)


def test_compatibility_settings() -> None:
    log = Log()
    log.register("u", V2)
    assert log.registry.compatibility(None) == "BACKWARD"
    assert error_of(log.registry.compatibility, "u", False) == (404, 40408)
    assert error_of(log.registry.set_compatibility, None, "SIDEWAYS") == (422, 42203)
    log.commit(log.registry.set_compatibility("u", "NONE"))
    assert log.register("u", V3) == 2  # NONE: anything goes
    assert log.commit(log.registry.delete_compatibility("u")) == {"compatibilityLevel": "NONE"}
    assert log.registry.compatibility("u") == "BACKWARD"
    assert log.registry.test_compatibility("u", None, SchemaRequest(json.dumps(V1))) == []
    assert log.registry.test_compatibility("u", 1, SchemaRequest(json.dumps(V3)))


def test_modes() -> None:
    log = Log()
    log.register("u", V1)
    log.commit(log.registry.set_mode(None, "READONLY"))
    assert error_of(log.registry.register, "u", SchemaRequest(json.dumps(V2))) == (422, 42205)
    assert error_of(log.registry.set_mode, None, "IMPORT") == (422, 42205)  # subjects exist
    assert error_of(log.registry.set_mode, None, "WRONG") == (422, 42204)
    log.commit(log.registry.set_mode("imported", "IMPORT"))
    request = SchemaRequest(json.dumps(V3), schema_id=100, version=5)
    assert log.commit(log.registry.register("imported", request)) == {"id": 100}
    assert log.registry.version("imported", 5).schema_id == 100
    assert log.registry.state.max_id == 100


def test_references_across_subjects() -> None:
    log = Log()
    address = {
        "type": "record",
        "name": "Address",
        "namespace": "acme",
        "fields": [{"name": "city", "type": "string"}],
    }
    log.register("address", address)
    user = {
        "type": "record",
        "name": "User",
        "namespace": "acme",
        "fields": [{"name": "home", "type": "acme.Address"}],
    }
    refs = (Reference("acme.Address", "address", 1),)
    assert log.register("user", user, references=refs) == 2
    assert log.registry.version("user", None).references == refs
    assert error_of(log.registry.register, "other", SchemaRequest(json.dumps(user)))[1] == 42201
    missing = (Reference("acme.Address", "address", 9),)
    assert (
        error_of(log.registry.register, "other", SchemaRequest(json.dumps(user), references=missing))[1]
        == 42201
    )
    assert error_of(log.registry.delete_version, "address", 1, False) == (422, 42206)
