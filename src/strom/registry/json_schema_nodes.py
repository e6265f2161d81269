"""JSON Schema nodes as the compatibility check sees them, and the context that records differences.

`load` gives a node's *shape* (see `strom.registry.json_schema_compat`): ``$ref`` followed, the kind
(empty, false, object, array, string, number, boolean, null, enum, const, not, combined) and the raw
keywords; a node holding several parts (a type and a combiner, ``enum`` beside ``type``...) is the
``allOf`` of them. `Context` collects (kind, JSON pointer) differences under the current path and
judges them against `COMPATIBLE_CHANGES`, the kinds that do not break a reader (Confluent's strict set).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import referencing.exceptions

from strom._util.json_types import JsonObject, JsonValue
from strom.registry.json_schema import Resolver

COMPATIBLE_CHANGES = frozenset(
    {
        "ID_CHANGED",
        "DESCRIPTION_CHANGED",
        "TITLE_CHANGED",
        "DEFAULT_CHANGED",
        "SCHEMA_REMOVED",
        "TYPE_EXTENDED",
        "MAX_LENGTH_INCREASED",
        "MAX_LENGTH_REMOVED",
        "MIN_LENGTH_DECREASED",
        "MIN_LENGTH_REMOVED",
        "PATTERN_REMOVED",
        "MAXIMUM_INCREASED",
        "MAXIMUM_REMOVED",
        "MINIMUM_DECREASED",
        "MINIMUM_REMOVED",
        "EXCLUSIVE_MAXIMUM_INCREASED",
        "EXCLUSIVE_MAXIMUM_REMOVED",
        "EXCLUSIVE_MINIMUM_DECREASED",
        "EXCLUSIVE_MINIMUM_REMOVED",
        "MULTIPLE_OF_REDUCED",
        "MULTIPLE_OF_REMOVED",
        "REQUIRED_ATTRIBUTE_WITH_DEFAULT_ADDED",
        "REQUIRED_ATTRIBUTE_REMOVED",
        "DEPENDENCY_ARRAY_NARROWED",
        "DEPENDENCY_ARRAY_REMOVED",
        "DEPENDENCY_SCHEMA_REMOVED",
        "MAX_PROPERTIES_INCREASED",
        "MAX_PROPERTIES_REMOVED",
        "MIN_PROPERTIES_DECREASED",
        "MIN_PROPERTIES_REMOVED",
        "ADDITIONAL_PROPERTIES_ADDED",
        "ADDITIONAL_PROPERTIES_EXTENDED",
        "UNEVALUATED_PROPERTIES_ADDED",
        "UNEVALUATED_PROPERTIES_EXTENDED",
        "PROPERTY_WITH_EMPTY_SCHEMA_ADDED_TO_OPEN_CONTENT_MODEL",
        "REQUIRED_PROPERTY_WITH_DEFAULT_ADDED_TO_UNOPEN_CONTENT_MODEL",
        "OPTIONAL_PROPERTY_ADDED_TO_UNOPEN_CONTENT_MODEL",
        "PROPERTY_WITH_FALSE_REMOVED_FROM_CLOSED_CONTENT_MODEL",
        "PROPERTY_REMOVED_FROM_OPEN_CONTENT_MODEL",
        "PROPERTY_ADDED_IS_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL",
        "PROPERTY_REMOVED_IS_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL",
        "MAX_ITEMS_INCREASED",
        "MAX_ITEMS_REMOVED",
        "MIN_ITEMS_DECREASED",
        "MIN_ITEMS_REMOVED",
        "UNIQUE_ITEMS_REMOVED",
        "ADDITIONAL_ITEMS_ADDED",
        "ADDITIONAL_ITEMS_EXTENDED",
        "UNEVALUATED_ITEMS_ADDED",
        "UNEVALUATED_ITEMS_EXTENDED",
        "ITEM_WITH_EMPTY_SCHEMA_ADDED_TO_OPEN_CONTENT_MODEL",
        "ITEM_ADDED_TO_CLOSED_CONTENT_MODEL",
        "ITEM_WITH_FALSE_REMOVED_FROM_CLOSED_CONTENT_MODEL",
        "ITEM_REMOVED_FROM_OPEN_CONTENT_MODEL",
        "ITEM_ADDED_IS_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL",
        "ITEM_REMOVED_IS_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL",
        "ENUM_ARRAY_EXTENDED",
        "COMBINED_TYPE_EXTENDED",
        "PRODUCT_TYPE_NARROWED",
        "SUM_TYPE_EXTENDED",
        "NOT_TYPE_NARROWED",
    }
)

_OBJECT_KEYWORDS = frozenset(
    {
        "properties",
        "required",
        "additionalProperties",
        "patternProperties",
        "minProperties",
        "maxProperties",
        "dependencies",
        "dependentRequired",
        "dependentSchemas",
        "propertyNames",
        "unevaluatedProperties",
    }
)
_ARRAY_KEYWORDS = frozenset(
    {"items", "prefixItems", "additionalItems", "minItems", "maxItems", "uniqueItems", "contains"}
)
_STRING_KEYWORDS = frozenset({"minLength", "maxLength", "pattern", "format"})
_NUMBER_KEYWORDS = frozenset({"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"})
_COMBINERS = ("allOf", "anyOf", "oneOf")
_TYPE_KINDS = {"integer": "number"}
_MAX_REF_HOPS = 64


@dataclass(slots=True)
class Node:
    """One schema node as the diff sees it: its kind and raw keywords (``$ref`` already followed)."""

    kind: str  # empty, false, object, array, string, number, boolean, null, enum, const, not, combined
    raw: JsonObject
    resolver: Resolver
    criterion: str = ""  # combined: allOf, anyOf or oneOf
    subs: Sequence[JsonValue] = ()  # combined: raw sub-schemas (loaded on use)
    integer: bool = False  # number: only integers


def load(node: JsonValue, resolver: Resolver) -> Node:
    for _ in range(_MAX_REF_HOPS):
        if not isinstance(node, dict) or not isinstance(node.get("$ref"), str):
            break
        try:
            resolved = resolver.lookup(node["$ref"])
        except referencing.exceptions.Unresolvable:
            break  # refused at registration; an old stored schema is compared as it stands
        node, resolver = resolved.contents, resolved.resolver
    if node is True:
        return Node("empty", {}, resolver)
    if node is False or not isinstance(node, dict):
        return Node("false", {}, resolver)
    parts: list[JsonObject] = []
    others = [name for name in (*_COMBINERS, "enum", "const", "not") if name in node]
    # The node itself when it has no other part, so that a $ref cycle meets the same object again.
    base = {k: v for k, v in node.items() if k not in (*others, "$ref")} if others else node
    types = node.get("type")
    if isinstance(types, list) and len(types) == 1:
        types = types[0]
    if isinstance(types, list):
        parts.append({"anyOf": [{**base, "type": t} for t in types]})
    elif isinstance(types, str) or _inferred_type(node) is not None:
        parts.append(base)
    parts += [{name: node[name]} for name in others]
    if len(parts) > 1:
        return Node("combined", node, resolver, "allOf", parts)
    part = parts[0] if parts else node
    for name in _COMBINERS:
        subs = part.get(name)
        if isinstance(subs, list):
            return Node("combined", node, resolver, name, list(subs))
    for name in ("enum", "const", "not"):
        if name in part:
            return Node(name, node, resolver)
    declared = part.get("type")
    type_name = declared if isinstance(declared, str) else _inferred_type(part)
    if type_name is None:
        return Node("empty", node, resolver)
    return Node(_TYPE_KINDS.get(type_name, type_name), part, resolver, integer=type_name == "integer")


def _inferred_type(node: JsonObject) -> str | None:
    for keywords, name in (
        (_OBJECT_KEYWORDS, "object"),
        (_ARRAY_KEYWORDS, "array"),
        (_STRING_KEYWORDS, "string"),
        (_NUMBER_KEYWORDS, "number"),
    ):
        if not keywords.isdisjoint(node):
            return name
    return None


CompareFn = Callable[["Context", JsonValue, Resolver, JsonValue, Resolver], None]


class Context:
    def __init__(
        self,
        compare: CompareFn,
        in_progress: dict[tuple[int, int], tuple[JsonObject, JsonObject]] | None = None,
    ) -> None:
        self.compare = compare  # the recursive comparison (strom.registry.json_schema_compat)
        self.differences: list[tuple[str, str]] = []
        self.path: list[str] = ["#"]
        # Pairs of raw nodes under comparison, kept alive so that their ids stay theirs.
        self.in_progress = in_progress if in_progress is not None else {}

    def sub(self) -> Context:
        child = Context(self.compare, self.in_progress)
        child.path = list(self.path)
        return child

    def add(self, kind: str, *where: str) -> None:
        self.differences.append((kind, "/".join([*self.path, *where])))

    def extend(self, other: Context) -> None:
        self.differences += other.differences

    @property
    def compatible(self) -> bool:
        return all(kind in COMPATIBLE_CHANGES for kind, _ in self.differences)

    def enter(self, *names: str) -> PathScope:
        return PathScope(self, names)


class PathScope:
    def __init__(self, ctx: Context, names: tuple[str, ...]) -> None:
        self._ctx, self._names = ctx, names

    def __enter__(self) -> None:
        self._ctx.path += self._names

    def __exit__(self, *exc: object) -> None:
        del self._ctx.path[-len(self._names) :]


def bounds(ctx: Context, o: JsonObject, u: JsonObject, name: str, kind: str) -> None:
    """``maxLength`` → MAX_LENGTH_ADDED / _REMOVED / _INCREASED / _DECREASED, and so on."""
    before, after = number(o.get(name)), number(u.get(name))
    if before == after:
        return
    if before is None:
        ctx.add(f"{kind}_ADDED", name)
    elif after is None:
        ctx.add(f"{kind}_REMOVED", name)
    elif before < after:
        ctx.add(f"{kind}_INCREASED", name)
    else:
        ctx.add(f"{kind}_DECREASED", name)


def number(value: JsonValue) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None
