"""JSON Schema compatibility: the differences between two schemas and which of them break readers.

The rules are those Confluent's registry applies to JSON Schema (its ``json.diff`` package): walk the
*original* schema (the writer's: the data) and the *update* (the reader's) side by side, record each
difference with its kind and JSON pointer, and call the update compatible when every difference is of
a kind in `COMPATIBLE_CHANGES`. BACKWARD compares the latest version (original) with the new schema
(update); FORWARD the other way round (`strom.registry.compatibility`).

**The shape of a schema node** (`_load`), as Confluent's loader builds it: ``true`` / ``{}`` accept
anything (*empty*), ``false`` nothing; ``$ref`` is replaced by what it points at; a list of types is an
``anyOf`` of one schema per type; a node whose ``type`` is absent takes it from its keywords
(``properties`` → object, ``items`` → array, ``maxLength`` → string, ``minimum`` → number); ``enum``,
``const``, ``not`` and the combiners ``allOf`` / ``anyOf`` / ``oneOf`` are schemas of their own, and a
node holding several of these parts is the ``allOf`` of them. ``integer`` is a number that requires an
integer (number → integer narrows, integer → number extends).

**Content models.** An object is *open* when it allows any additional property (``additionalProperties``
absent or true, no ``patternProperties``, no restricting ``unevaluatedProperties``), *closed* when
``additionalProperties`` is false, *partially open* when extra properties must match a schema. Adding a
property to an open model breaks old data that used that name with another type (incompatible unless
its schema is empty); removing one from an open model is fine, from a closed model is not (old data may
carry it); a partially open model judges the property by its schema for extra properties. Arrays with
item tuples follow the same rules with ``additionalItems``.

**Combined schemas.** A sum (``anyOf`` / ``oneOf``) may gain branches, a product (``allOf``) may lose
them; branches are paired by a maximum matching of compatible pairs and a pairing that leaves a
branch unmatched is ``COMBINED_TYPE_SUBSCHEMAS_CHANGED``. A plain schema becoming a sum that contains
a compatible branch is compatible (``SUM_TYPE_EXTENDED``), and so is a product narrowed to one of its
branches.

Recursive schemas (``$ref`` cycles) are compared once per pair of nodes: a pair already under
comparison is taken as compatible, the fixpoint the recursion would reach.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence

from strom._util.json_types import JsonValue
from strom.registry.json_schema import JsonSchema, Resolver
from strom.registry.json_schema_content import compare_array, compare_object
from strom.registry.json_schema_nodes import COMPATIBLE_CHANGES, Context, Node, bounds, load, number

__all__ = ["COMPATIBLE_CHANGES", "can_read", "differences"]


def differences(original: JsonSchema, update: JsonSchema) -> list[tuple[str, str]]:
    """Every difference (kind, JSON pointer) from ``original`` to ``update``."""
    ctx = Context(_compare)
    _compare(ctx, original.document, original.resolver, update.document, update.resolver)
    return ctx.differences


def can_read(reader: JsonSchema, writer: JsonSchema) -> list[str]:
    """Why ``reader`` may not accept every document valid against ``writer``; empty if it may."""
    return [
        f"{kind} at {path}" for kind, path in differences(writer, reader) if kind not in COMPATIBLE_CHANGES
    ]


def _compare(ctx: Context, original: JsonValue, o_res: Resolver, update: JsonValue, u_res: Resolver) -> None:
    if original is None and update is None:
        return
    if original is None:
        ctx.add("SCHEMA_ADDED")
        return
    if update is None:
        ctx.add("SCHEMA_REMOVED")
        return
    o, u = load(original, o_res), load(update, u_res)
    key = (id(o.raw), id(u.raw))
    if o.raw and u.raw and key in ctx.in_progress:
        return
    ctx.in_progress[key] = (o.raw, u.raw)
    try:
        _compare_nodes(ctx, o, u)
    finally:
        ctx.in_progress.pop(key, None)


def _source(node: Node) -> JsonValue:
    """The raw schema a loaded node came from (``false`` and ``true`` as themselves)."""
    if node.kind == "false":
        return False
    return node.raw or True


def _compare_nodes(ctx: Context, o: Node, u: Node) -> None:
    if o.kind != "combined" and u.kind == "combined" and (len(u.subs) == 1 or u.criterion != "allOf"):
        for sub in u.subs:  # a plain schema became a sum (or a single-branch combination) holding it
            sub_ctx = ctx.sub()
            _compare(sub_ctx, _source(o), o.resolver, sub, u.resolver)
            if sub_ctx.compatible:
                ctx.extend(sub_ctx)
                if len(u.subs) > 1:
                    ctx.add("SUM_TYPE_EXTENDED")
                return
    elif o.kind == "combined" and u.kind != "combined" and (len(o.subs) == 1 or o.criterion == "allOf"):
        for sub in o.subs:  # a product (or single-branch combination) narrowed to one of its branches
            sub_ctx = ctx.sub()
            _compare(sub_ctx, sub, o.resolver, _source(u), u.resolver)
            if sub_ctx.compatible:
                ctx.extend(sub_ctx)
                if len(o.subs) > 1:
                    ctx.add("PRODUCT_TYPE_NARROWED")
                return
    if o.kind != u.kind:
        if o.kind == "false" or u.kind == "empty":
            return
        ctx.add("TYPE_CHANGED")
        return
    compare = _BY_KIND.get(o.kind)
    if compare is not None:
        compare(ctx, o, u)


def _compare_string(ctx: Context, o: Node, u: Node) -> None:
    bounds(ctx, o.raw, u.raw, "maxLength", "MAX_LENGTH")
    bounds(ctx, o.raw, u.raw, "minLength", "MIN_LENGTH")
    before, after = o.raw.get("pattern"), u.raw.get("pattern")
    if before is None and after is not None:
        ctx.add("PATTERN_ADDED", "pattern")
    elif before is not None and after is None:
        ctx.add("PATTERN_REMOVED", "pattern")
    elif before != after:
        ctx.add("PATTERN_CHANGED", "pattern")


def _compare_number(ctx: Context, o: Node, u: Node) -> None:
    bounds(ctx, o.raw, u.raw, "maximum", "MAXIMUM")
    bounds(ctx, o.raw, u.raw, "minimum", "MINIMUM")
    bounds(ctx, o.raw, u.raw, "exclusiveMaximum", "EXCLUSIVE_MAXIMUM")
    bounds(ctx, o.raw, u.raw, "exclusiveMinimum", "EXCLUSIVE_MINIMUM")
    before, after = number(o.raw.get("multipleOf")), number(u.raw.get("multipleOf"))
    if before != after:
        if before is None:
            ctx.add("MULTIPLE_OF_ADDED", "multipleOf")
        elif after is None:
            ctx.add("MULTIPLE_OF_REMOVED", "multipleOf")
        elif before and (after / before).is_integer():
            ctx.add("MULTIPLE_OF_EXPANDED", "multipleOf")
        elif after and (before / after).is_integer():
            ctx.add("MULTIPLE_OF_REDUCED", "multipleOf")
        else:
            ctx.add("MULTIPLE_OF_CHANGED", "multipleOf")
    if o.integer != u.integer:
        ctx.add("TYPE_EXTENDED" if o.integer else "TYPE_NARROWED")


def _canonical(value: JsonValue) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def _enum(node: Node) -> Sequence[JsonValue]:
    values = node.raw.get("enum")  # an array: the metaschema check at registration sees to it
    return values if isinstance(values, list) else ()


def _compare_enum(ctx: Context, o: Node, u: Node) -> None:
    before = {_canonical(v) for v in _enum(o)}
    after = {_canonical(v) for v in _enum(u)}
    if before == after:
        return
    if after >= before:
        ctx.add("ENUM_ARRAY_EXTENDED", "enum")
    elif before >= after:
        ctx.add("ENUM_ARRAY_NARROWED", "enum")
    else:
        ctx.add("ENUM_ARRAY_CHANGED", "enum")


def _compare_const(ctx: Context, o: Node, u: Node) -> None:
    if _canonical(o.raw.get("const")) != _canonical(u.raw.get("const")):
        ctx.add("ENUM_ARRAY_CHANGED", "const")


def _compare_not(ctx: Context, o: Node, u: Node) -> None:
    with ctx.enter("not"):
        sub_ctx = ctx.sub()
        # What the update refuses must be refused already: compared the other way round.
        _compare(sub_ctx, u.raw.get("not"), u.resolver, o.raw.get("not"), o.resolver)
        ctx.add("NOT_TYPE_NARROWED" if sub_ctx.compatible else "NOT_TYPE_EXTENDED")


def _compare_combined(ctx: Context, o: Node, u: Node) -> None:
    if o.criterion != u.criterion:
        singleton_o, singleton_u = len(o.subs) == 1, len(u.subs) == 1
        if (
            u.criterion == "anyOf"
            or (singleton_o and singleton_u)
            or (singleton_o and u.criterion == "oneOf")
            or (singleton_u and o.criterion == "allOf")
        ):
            ctx.add("COMBINED_TYPE_EXTENDED")
        else:
            ctx.add("COMBINED_TYPE_CHANGED")
            return
    o_subs, u_subs = _distinct(o.subs), _distinct(u.subs)
    if len(o_subs) < len(u_subs):
        ctx.add("PRODUCT_TYPE_EXTENDED" if u.criterion == "allOf" else "SUM_TYPE_EXTENDED")
    elif len(o_subs) > len(u_subs):
        ctx.add("SUM_TYPE_NARROWED" if o.criterion in ("anyOf", "oneOf") else "PRODUCT_TYPE_NARROWED")
    edges: dict[int, dict[int, list[tuple[str, str]]]] = {}
    for i, o_sub in enumerate(o_subs):
        with ctx.enter(o.criterion, str(i)):
            for j, u_sub in enumerate(u_subs):
                sub_ctx = ctx.sub()
                _compare(sub_ctx, o_sub, o.resolver, u_sub, u.resolver)
                if sub_ctx.compatible:
                    edges.setdefault(i, {})[j] = sub_ctx.differences
    matching = _maximum_matching(edges)
    for i, j in sorted(matching.items()):
        ctx.differences += edges[i][j]
    if len(matching) < min(len(o_subs), len(u_subs)):
        ctx.add("COMBINED_TYPE_SUBSCHEMAS_CHANGED")


def _distinct(subs: Sequence[JsonValue]) -> list[JsonValue]:
    seen: dict[str, JsonValue] = {}
    for sub in subs:
        seen.setdefault(_canonical(sub), sub)
    return list(seen.values())


def _maximum_matching(edges: Mapping[int, Mapping[int, object]]) -> dict[int, int]:
    """A maximum matching of left to right indexes (augmenting paths; a handful of branches)."""
    owner: dict[int, int] = {}  # right → left

    def augment(left: int, visited: set[int]) -> bool:
        for right in edges.get(left, {}):
            if right in visited:
                continue
            visited.add(right)
            if right not in owner or augment(owner[right], visited):
                owner[right] = left
                return True
        return False

    for left in edges:
        augment(left, set())
    return {left: right for right, left in owner.items()}


_BY_KIND = {
    "string": _compare_string,
    "number": _compare_number,
    "enum": _compare_enum,
    "const": _compare_const,
    "not": _compare_not,
    "combined": _compare_combined,
    "object": compare_object,
    "array": compare_array,
}
