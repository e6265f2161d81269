"""Avro schema resolution (`can_read`) and the registry's compatibility modes (`check`)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from strom.registry.avro import AvroSchema, parse
from strom.registry.compatibility import Compatibility, can_read, check


def avro(doc: Any) -> AvroSchema:
    return parse(json.dumps(doc))


def record(name: str, *fields: dict[str, Any], **extra: Any) -> AvroSchema:
    return avro({"type": "record", "name": name, "fields": list(fields), **extra})


def field(name: str, type_: Any, **extra: Any) -> dict[str, Any]:
    return {"name": name, "type": type_, **extra}


def compatible(reader: AvroSchema, writer: AvroSchema) -> bool:
    return not can_read(reader, writer)


V1 = record("User", field("name", "string"))
V2 = record("User", field("name", "string"), field("age", "int", default=0))
V3 = record("User", field("name", "string"), field("age", "int", default=0), field("email", "string"))


def test_added_field_with_default_is_backward_compatible() -> None:
    assert compatible(V2, V1)
    assert check(Compatibility.BACKWARD, V2, [V1]) == []


def test_added_field_without_default_is_not() -> None:
    messages = can_read(V3, V2)
    assert len(messages) == 1
    assert "READER_FIELD_MISSING_DEFAULT_VALUE" in messages[0]
    assert "'email'" in messages[0]
    assert check(Compatibility.BACKWARD, V3, [V1, V2])


def test_removed_field_is_skipped_by_the_reader() -> None:
    assert compatible(V1, V2)  # the old reader skips the writer's 'age'
    assert check(Compatibility.FORWARD, V2, [V1]) == []


@pytest.mark.parametrize(
    ("writer", "readers"),
    [
        ("int", {"long", "float", "double"}),
        ("long", {"float", "double"}),
        ("float", {"double"}),
        ("string", {"bytes"}),
        ("bytes", {"string"}),
    ],
)
def test_type_promotions(writer: str, readers: set[str]) -> None:
    for reader in ("null", "boolean", "int", "long", "float", "double", "bytes", "string"):
        ok = compatible(avro(reader), avro(writer))
        assert ok is (reader == writer or reader in readers), (reader, writer)


def test_promotions_apply_inside_records() -> None:
    old = record("R", field("n", "int"))
    new = record("R", field("n", "long"))
    assert compatible(new, old)
    messages = can_read(old, new)
    assert messages and "TYPE_MISMATCH at /fields/0/type" in messages[0]


def test_enums() -> None:
    ab = avro({"type": "enum", "name": "E", "symbols": ["A", "B"]})
    abc = avro({"type": "enum", "name": "E", "symbols": ["A", "B", "C"]})
    abc_default = avro({"type": "enum", "name": "E", "symbols": ["A", "B"], "default": "A"})
    assert compatible(abc, ab)
    assert "MISSING_ENUM_SYMBOLS" in can_read(ab, abc)[0]
    assert compatible(abc_default, abc)  # unknown symbols read as the reader's default
    other = avro({"type": "enum", "name": "F", "symbols": ["A", "B"]})
    assert "NAME_MISMATCH" in can_read(other, ab)[0]


def test_missing_field_of_enum_type_needs_a_field_default() -> None:
    # The enum's own default is for unknown symbols, not for a missing field (the avro package's
    # checker gets this wrong).
    reader = record(
        "R", field("a", "int"), field("e", {"type": "enum", "name": "E", "symbols": ["X"], "default": "X"})
    )
    writer = record("R", field("a", "int"))
    assert "READER_FIELD_MISSING_DEFAULT_VALUE" in can_read(reader, writer)[0]


def test_unions() -> None:
    nullable = avro(["null", "string"])
    assert compatible(nullable, avro("string"))
    assert compatible(avro(["null", "long"]), avro("int"))  # a branch reads it through promotion
    assert "MISSING_UNION_BRANCH" in can_read(avro(["null", "int"]), avro("string"))[0]
    # Every branch the writer may use must be readable.
    assert can_read(avro("string"), nullable)
    assert compatible(avro(["null", "string", "int"]), nullable)
    assert can_read(avro(["null", "int"]), avro(["null", "string"]))


def test_optional_field_added_with_null_default() -> None:
    new = record("User", field("name", "string"), field("nick", ["null", "string"], default=None))
    assert check(Compatibility.FULL, new, [V1]) == []


def test_fixed() -> None:
    f4 = avro({"type": "fixed", "name": "F", "size": 4})
    f8 = avro({"type": "fixed", "name": "F", "size": 8})
    assert compatible(f4, f4)
    assert "FIXED_SIZE_MISMATCH" in can_read(f8, f4)[0]


def test_arrays_and_maps() -> None:
    assert compatible(avro({"type": "array", "items": "long"}), avro({"type": "array", "items": "int"}))
    assert can_read(avro({"type": "array", "items": "int"}), avro({"type": "array", "items": "long"}))
    assert compatible(avro({"type": "map", "values": "double"}), avro({"type": "map", "values": "float"}))
    assert (
        "/values"
        in can_read(avro({"type": "map", "values": "int"}), avro({"type": "map", "values": "string"}))[0]
    )


def test_nested_and_named_types() -> None:
    address_v1 = {"type": "record", "name": "Address", "fields": [field("city", "string")]}
    address_v2 = {
        "type": "record",
        "name": "Address",
        "fields": [field("city", "string"), field("zip", "string")],
    }
    old = record("User", field("home", address_v1), field("work", "Address"))
    new = record("User", field("home", address_v2), field("work", "Address"))
    messages = can_read(new, old)
    # The nested record lacks a default for 'zip': reported at both uses of the named type.
    assert messages and all("zip" in m for m in messages)
    assert "/fields/0/type/fields/1" in messages[0]
    assert compatible(old, new)


def test_recursive_types_terminate() -> None:
    node = {
        "type": "record",
        "name": "Node",
        "fields": [field("value", "int"), field("next", ["null", "Node"])],
    }
    wider = {
        "type": "record",
        "name": "Node",
        "fields": [field("value", "long"), field("next", ["null", "Node"])],
    }
    assert compatible(avro(wider), avro(node))
    assert can_read(avro(node), avro(wider))


def test_aliases_rename_records_and_fields() -> None:
    old = avro({"type": "record", "name": "Old", "namespace": "n", "fields": [field("a", "int")]})
    renamed = avro(
        {
            "type": "record",
            "name": "New",
            "namespace": "n",
            "aliases": ["Old"],
            "fields": [field("b", "int", aliases=["a"])],
        }
    )
    assert compatible(renamed, old)
    assert "NAME_MISMATCH" in can_read(old, renamed)[0]
    full_alias = avro(
        {"type": "record", "name": "X", "namespace": "m", "aliases": ["n.Old"], "fields": [field("a", "int")]}
    )
    assert compatible(full_alias, old)


def test_namespace_change_alone_is_compatible() -> None:
    # Java's check (and so Confluent's) compares unqualified names.
    a = avro({"type": "record", "name": "R", "namespace": "a", "fields": [field("x", "int")]})
    b = avro({"type": "record", "name": "R", "namespace": "b", "fields": [field("x", "int")]})
    assert compatible(a, b)


# --- modes ----------------------------------------------------------------------------------------
# A field added without a default to A gives B; C then drops the field again but adds another with a
# default. B → C is both backward and forward compatible, A → C too, A → B only forward.
A = record("R", field("x", "int"))
B = record("R", field("x", "int"), field("y", "string"))
C = record("R", field("x", "int"), field("z", "string", default=""))


@pytest.mark.parametrize(
    ("mode", "new", "history", "ok"),
    [
        (Compatibility.BACKWARD, B, [A], False),
        (Compatibility.FORWARD, B, [A], True),
        (Compatibility.FULL, B, [A], False),
        (Compatibility.NONE, B, [A], True),
        (Compatibility.BACKWARD, C, [A, B], True),
        (Compatibility.BACKWARD_TRANSITIVE, C, [A, B], True),
        (Compatibility.FORWARD, C, [A, B], False),  # B's reader needs 'y', which C does not write
        (Compatibility.FULL_TRANSITIVE, C, [A, B], False),
        (Compatibility.FULL, C, [A], True),
        (Compatibility.BACKWARD, V3, [V1, V3], True),  # only the latest counts
        (Compatibility.BACKWARD_TRANSITIVE, V3, [V1, V3], False),  # every version counts
        (Compatibility.FORWARD_TRANSITIVE, V1, [V3, V1], False),
        (Compatibility.FORWARD, V1, [V3, V1], True),
    ],
)
def test_modes(mode: Compatibility, new: AvroSchema, history: list[AvroSchema], ok: bool) -> None:
    assert (check(mode, new, history) == []) is ok


def test_first_schema_is_always_compatible() -> None:
    for mode in Compatibility:
        assert check(mode, V3, []) == []


def _diamonds(depth: int, leaf_type: str) -> AvroSchema:
    """T0 → (a: T1, b: T1) → … → T<depth>: a small schema reaching its leaf along 2^depth paths."""
    node: Any = {"type": "record", "name": f"T{depth}", "fields": [field("x", leaf_type)]}
    for d in range(depth - 1, -1, -1):
        node = {"type": "record", "name": f"T{d}", "fields": [field("a", node), field("b", f"T{d + 1}")]}
    return avro(node)


def test_a_type_referenced_along_many_paths_is_checked_once() -> None:
    # Without remembering judged record pairs this took ~2 s at depth 18 and doubled per level: a
    # 4 KB registration would hold the broker's event loop for hours.
    reader, writer = _diamonds(30, "long"), _diamonds(30, "int")
    assert compatible(reader, writer)
    problems = can_read(writer, reader)  # int cannot read long, found below every path
    assert problems and all("TYPE_MISMATCH" in p for p in problems)
    assert check(Compatibility.FULL_TRANSITIVE, reader, [writer, reader])
