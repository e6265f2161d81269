"""JSON Schema in the registry: validation, ``$ref`` across references, and Confluent's evolution rules."""

from __future__ import annotations

import json
from typing import Any

import pytest

from strom.registry.compatibility import Compatibility, check
from strom.registry.errors import RegistryError
from strom.registry.json_schema import JsonSchema, parse
from strom.registry.json_schema_compat import can_read, differences


def js(doc: Any, refs: tuple[tuple[str, Any], ...] = ()) -> JsonSchema:
    return parse(json.dumps(doc), [(name, json.dumps(ref)) for name, ref in refs])


def obj(props: dict[str, Any], required: tuple[str, ...] = (), **extra: Any) -> JsonSchema:
    return js({"type": "object", "properties": props, "required": list(required), **extra})


def kinds(original: JsonSchema, update: JsonSchema) -> set[str]:
    return {kind for kind, _ in differences(original, update)}


def backward(new: JsonSchema, old: JsonSchema) -> bool:
    return not check(Compatibility.BACKWARD, new, [old], can_read)


STR = {"type": "string"}
INT = {"type": "integer"}
CLOSED = {"additionalProperties": False}


def test_invalid_schemas_are_refused_with_42201() -> None:
    for text in ("{", '{"type": "strnig"}', '{"properties": 3}', "[1]", '{"$ref": "missing.json"}'):
        with pytest.raises(RegistryError) as info:
            parse(text)
        assert info.value.error_code == 42201, text


def test_canonical_text_is_compact_and_normalize_sorts_keys() -> None:
    text = '{ "type": "object",\n  "properties": {"b": {"type": "string"}, "a": {"type": "integer"}} }'
    assert (
        parse(text).canonical
        == '{"type":"object","properties":{"b":{"type":"string"},"a":{"type":"integer"}}}'
    )
    normalized = parse(text, normalize=True).canonical
    assert normalized == '{"properties":{"a":{"type":"integer"},"b":{"type":"string"}},"type":"object"}'


def test_refs_resolve_by_reference_name_and_relative_to_the_id() -> None:
    address = {"type": "object", "properties": {"city": STR}}
    plain = js(
        {"type": "object", "properties": {"home": {"$ref": "address.json"}}}, (("address.json", address),)
    )
    assert plain.resolver.lookup("address.json").contents == address
    with_id = {"$id": "https://example.com/order.json", "properties": {"to": {"$ref": "address.json"}}}
    js(with_id, (("address.json", address),))
    with pytest.raises(RegistryError):
        js({"properties": {"to": {"$ref": "address.json"}}})


def test_open_content_model_strict_rules() -> None:
    v1 = obj({"name": STR})
    v2 = obj({"name": STR, "age": INT})
    # Adding a typed property to an open model may clash with what old data carried under that name.
    assert "OPTIONAL_PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL" in kinds(v1, v2)
    assert not backward(v2, v1)
    # Removing one from an open model is fine: the new reader accepts anything there.
    assert kinds(v2, v1) == {"PROPERTY_REMOVED_FROM_OPEN_CONTENT_MODEL"}
    assert backward(v1, v2)
    assert backward(obj({"name": STR, "any": {}}), v1)  # an empty schema accepts everything
    assert backward(obj({"name": STR, "any": {"description": "free form"}}), v1)


def test_closed_content_model_rules() -> None:
    v1 = obj({"name": STR}, **CLOSED)
    v2 = obj({"name": STR, "age": INT}, **CLOSED)
    assert kinds(v1, v2) == {"OPTIONAL_PROPERTY_ADDED_TO_UNOPEN_CONTENT_MODEL"}
    assert backward(v2, v1)
    assert "PROPERTY_REMOVED_FROM_CLOSED_CONTENT_MODEL" in kinds(v2, v1)
    assert not backward(v1, v2)
    # Forward: an old closed reader refuses documents carrying the new property.
    assert check(Compatibility.FORWARD, v2, [v1], can_read)
    assert check(Compatibility.FULL, v2, [v1], can_read)


def test_partially_open_content_model_judges_by_the_extra_property_schema() -> None:
    v1 = obj({"name": STR}, additionalProperties=STR)
    assert backward(obj({"name": STR, "nick": STR}, additionalProperties=STR), v1)
    worse = obj({"name": STR, "n": INT}, additionalProperties=STR)
    assert "PROPERTY_ADDED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL" in kinds(v1, worse)
    assert not backward(worse, v1)


def test_type_changes() -> None:
    assert not backward(obj({"a": INT}), obj({"a": STR}))
    assert backward(obj({"a": {"type": "number"}}), obj({"a": INT}))  # integer → number extends
    assert not backward(obj({"a": INT}), obj({"a": {"type": "number"}}))
    assert backward(obj({"a": {"type": ["string", "null"]}}), obj({"a": STR}))
    assert not backward(obj({"a": STR}), obj({"a": {"type": ["string", "null"]}}))


def test_required_and_defaults() -> None:
    v1 = obj({"a": STR, "b": STR}, ("a",))
    assert not backward(obj({"a": STR, "b": STR}, ("a", "b")), v1)
    assert backward(obj({"a": STR, "b": {"type": "string", "default": "x"}}, ("a", "b")), v1)
    assert backward(obj({"a": STR, "b": STR}), v1)  # no longer required


def test_enums_and_string_and_number_bounds() -> None:
    small, big = js({"enum": ["A", "B"]}), js({"enum": ["A", "B", "C"]})
    assert backward(big, small)
    assert not backward(small, big)
    assert backward(js({"type": "string", "maxLength": 10}), js({"type": "string", "maxLength": 5}))
    assert not backward(js({"type": "string", "maxLength": 5}), js({"type": "string", "maxLength": 10}))
    assert not backward(js({"type": "integer", "minimum": 3}), js({"type": "integer"}))
    assert backward(js({"type": "integer"}), js({"type": "integer", "minimum": 3}))


def test_combined_schemas() -> None:
    two = js({"oneOf": [STR, INT]})
    three = js({"oneOf": [STR, INT, {"type": "boolean"}]})
    assert backward(three, two)
    assert "SUM_TYPE_NARROWED" in kinds(three, two)
    assert not backward(two, three)
    assert backward(js(STR), js({"allOf": [STR, {"maxLength": 3}]}))  # a product narrowed to a branch


def test_arrays_and_refs_across_versions() -> None:
    assert backward(js({"type": "array", "items": {"type": "number"}}), js({"type": "array", "items": INT}))
    assert not backward(js({"type": "array", "items": INT}), js({"type": "array", "items": STR}))
    address_v1 = {"type": "object", "properties": {"city": STR}, "additionalProperties": False}
    address_v2 = {"type": "object", "properties": {"city": STR, "zip": STR}, "additionalProperties": False}
    order = {"type": "object", "properties": {"to": {"$ref": "address.json"}}}
    old, new = js(order, (("address.json", address_v1),)), js(order, (("address.json", address_v2),))
    assert backward(new, old)
    assert not backward(old, new)  # the old reader's closed address refuses zip


def test_recursive_schemas_terminate() -> None:
    tree = {"type": "object", "properties": {"v": INT, "kids": {"type": "array", "items": {"$ref": "#"}}}}
    wider = {
        "type": "object",
        "properties": {"v": {"type": "number"}, "kids": {"type": "array", "items": {"$ref": "#"}}},
    }
    assert backward(js(wider), js(tree))
    assert not backward(js(tree), js(wider))


@pytest.mark.parametrize("mode", list(Compatibility))
def test_every_mode_over_three_versions(mode: Compatibility) -> None:
    # v1 → v2 drops a closed property (breaks BACKWARD); v3 adds one back (breaks FORWARD against v1/v2
    # only where the earlier model was closed).
    v1 = obj({"a": STR, "b": STR}, **CLOSED)
    v2 = obj({"a": STR, "b": STR, "c": STR}, **CLOSED)
    v3 = obj({"a": STR, "b": STR, "c": STR, "d": STR}, **CLOSED)
    problems = check(mode, v3, [v1, v2], can_read)
    expect_forward_failure = mode.forward
    assert bool(problems) == expect_forward_failure
    if mode.transitive and mode.forward:
        assert len(problems) == 3  # d against v2; c and d against v1
