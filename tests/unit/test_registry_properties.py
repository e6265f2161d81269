"""Properties of the registry's Avro handling over generated record schemas (hypothesis)."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from strom.registry.avro import canonical_text, parse
from strom.registry.compatibility import Compatibility, can_read, check
from strom.registry.errors import RegistryError
from strom.registry.registry import SchemaRegistry, SchemaRequest

PRIMITIVE = st.sampled_from(["null", "boolean", "int", "long", "float", "double", "bytes", "string"])
NAMES = st.from_regex(r"[a-z][a-z0-9_]{0,6}", fullmatch=True)


def _type(depth: int) -> st.SearchStrategy[Any]:
    if depth == 0:
        return PRIMITIVE
    inner = _type(depth - 1)
    return st.one_of(
        PRIMITIVE,
        st.builds(lambda t: {"type": "array", "items": t}, inner),
        st.builds(lambda t: {"type": "map", "values": t}, inner),
        st.builds(lambda t: ["null", t] if t != "null" else ["null", "int"], PRIMITIVE),
    )


@st.composite
def records(draw: st.DrawFn) -> dict[str, Any]:
    names = draw(st.lists(NAMES, min_size=1, max_size=6, unique=True))
    fields = [{"name": n, "type": draw(_type(2))} for n in names]
    return {"type": "record", "name": "R", "namespace": "gen", "fields": fields}


def _shuffled_layout(doc: Any) -> str:
    """The same schema written differently: keys reversed, indented, primitives as {"type": ...}."""

    def walk(node: Any) -> Any:
        if isinstance(node, str) and node in {"int", "long", "string"}:
            return {"type": node}
        if isinstance(node, list):
            return [walk(item) for item in node]
        if isinstance(node, dict):
            return {
                k: walk(v) if k in ("type", "items", "values", "fields") else v
                for k, v in reversed(node.items())
            }
        return node

    return json.dumps(walk(doc), indent=3)


@settings(max_examples=60, deadline=None)
@given(records())
def test_every_schema_reads_itself_and_the_canonical_text_is_a_fixpoint(doc: dict[str, Any]) -> None:
    schema = parse(json.dumps(doc))
    assert can_read(schema, schema) == []
    assert parse(schema.canonical).canonical == schema.canonical
    assert parse(_shuffled_layout(doc)).canonical == schema.canonical
    assert canonical_text(json.loads(schema.canonical)) == schema.canonical


@settings(max_examples=60, deadline=None)
@given(records(), NAMES, PRIMITIVE)
def test_adding_a_field_with_a_default_is_backward_and_forward_compatible(
    doc: dict[str, Any], name: str, kind: str
) -> None:
    if any(f["name"] == name for f in doc["fields"]):
        return
    defaults = {
        "null": None,
        "boolean": False,
        "int": 0,
        "long": 0,
        "float": 0.0,
        "double": 0.0,
        "bytes": "",
        "string": "",
    }
    wider = {**doc, "fields": [*doc["fields"], {"name": name, "type": kind, "default": defaults[kind]}]}
    old, new = parse(json.dumps(doc)), parse(json.dumps(wider))
    assert check(Compatibility.FULL_TRANSITIVE, new, [old]) == []
    without_default = {**doc, "fields": [*doc["fields"], {"name": name, "type": kind}]}
    assert check(Compatibility.BACKWARD, parse(json.dumps(without_default)), [old])
    assert check(Compatibility.FORWARD, parse(json.dumps(without_default)), [old]) == []


JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-5, 5)
    | st.sampled_from(["int", "record", "enum", "R", "", "fixed"]),
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(
            st.sampled_from(["type", "name", "fields", "symbols", "items", "values", "size", "default"]),
            inner,
            max_size=5,
        )
    ),
    max_leaves=20,
)


@settings(max_examples=300, deadline=None)
@given(st.one_of(JSON.map(json.dumps), st.text(max_size=40)))
def test_any_text_is_registered_or_refused_with_a_registry_error(text: str) -> None:
    """The contract the REST layer relies on: bad schemas raise RegistryError (42201), nothing else."""
    registry = SchemaRegistry()
    try:
        write = registry.register("fuzz", SchemaRequest(text))
    except RegistryError as exc:
        assert exc.error_code == 42201
        return
    assert write.answer == {"id": 1}
