"""JSON Schema content models: objects (properties, required, dependencies, additional and unevaluated
properties) and arrays (items, item tuples, additional and unevaluated items), as
`strom.registry.json_schema_compat` describes them. Sub-schemas are compared through ``ctx.compare``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from strom._util.json_types import JsonObject, JsonValue
from strom.registry.json_schema import Resolver
from strom.registry.json_schema_nodes import Context, Node, bounds, load


def compare_array(ctx: Context, o: Node, u: Node) -> None:
    o_items, u_items = _item_schemas(o.raw), _item_schemas(u.raw)
    with ctx.enter("items"):
        ctx.compare(ctx, _all_items(o.raw), o.resolver, _all_items(u.raw), u.resolver)
    common = min(len(o_items), len(u_items))
    for index in range(max(len(o_items), len(u_items))):
        with ctx.enter("items", str(index)):
            if index < common:
                ctx.compare(ctx, o_items[index], o.resolver, u_items[index], u.resolver)
            elif index < len(o_items):
                _removed_item(ctx, o_items[index], o, u)
            else:
                _added_item(ctx, u_items[index], o, u)
    _compare_additional(ctx, o, u, "additionalItems", "ADDITIONAL_ITEMS")
    _compare_unevaluated(ctx, o, u, "unevaluatedItems", "UNEVALUATED_ITEMS")
    bounds(ctx, o.raw, u.raw, "maxItems", "MAX_ITEMS")
    bounds(ctx, o.raw, u.raw, "minItems", "MIN_ITEMS")
    before, after = bool(o.raw.get("uniqueItems")), bool(u.raw.get("uniqueItems"))
    if before != after:
        ctx.add("UNIQUE_ITEMS_REMOVED" if before else "UNIQUE_ITEMS_ADDED", "uniqueItems")
    bounds(ctx, o.raw, u.raw, "maxContains", "MAX_CONTAINS")
    bounds(ctx, o.raw, u.raw, "minContains", "MIN_CONTAINS")


def _item_schemas(raw: JsonObject) -> list[JsonValue]:
    for name in ("prefixItems", "items"):
        items = raw.get(name)
        if isinstance(items, list):
            return list(items)
    return []


def _all_items(raw: JsonObject) -> JsonValue:
    items = raw.get("items")
    return None if isinstance(items, list) else items


def _open_items(raw: JsonObject) -> bool:
    additional = raw.get("additionalItems", True)
    return additional is True and raw.get("unevaluatedItems", True) in (True, {})


def _partial_items(raw: JsonObject) -> JsonValue:
    additional = raw.get("additionalItems", True)
    if isinstance(additional, dict):
        return additional
    uneval = raw.get("unevaluatedItems")
    if additional is True and isinstance(uneval, dict) and uneval:
        return uneval
    return None


def _removed_item(ctx: Context, item: JsonValue, o: Node, u: Node) -> None:
    if _open_items(u.raw):
        ctx.add("ITEM_REMOVED_FROM_OPEN_CONTENT_MODEL")
        return
    partial = _partial_items(u.raw)
    if partial is not None:
        sub_ctx = ctx.sub()
        ctx.compare(sub_ctx, item, o.resolver, partial, u.resolver)
        ctx.extend(sub_ctx)
        ok = sub_ctx.compatible
        ctx.add(f"ITEM_REMOVED_{'IS' if ok else 'NOT'}_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL")
    elif item is False:
        ctx.add("ITEM_WITH_FALSE_REMOVED_FROM_CLOSED_CONTENT_MODEL")
    else:
        ctx.add("ITEM_REMOVED_FROM_CLOSED_CONTENT_MODEL")


def _added_item(ctx: Context, item: JsonValue, o: Node, u: Node) -> None:
    if _open_items(o.raw):
        empty = item is True or item == {}
        ctx.add(f"ITEM_{'WITH_EMPTY_SCHEMA_' if empty else ''}ADDED_TO_OPEN_CONTENT_MODEL")
        return
    partial = _partial_items(o.raw)
    if partial is not None:
        sub_ctx = ctx.sub()
        ctx.compare(sub_ctx, partial, o.resolver, item, u.resolver)
        ctx.extend(sub_ctx)
        ok = sub_ctx.compatible
        ctx.add(f"ITEM_ADDED_{'IS' if ok else 'NOT'}_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL")
    else:
        ctx.add("ITEM_ADDED_TO_CLOSED_CONTENT_MODEL")


def _compare_additional(ctx: Context, o: Node, u: Node, name: str, kind: str) -> None:
    """``additionalProperties`` / ``additionalItems``: allowed, refused, or held to a schema."""
    before, after = o.raw.get(name, True), u.raw.get(name, True)
    with ctx.enter(name):
        if (before is not False) != (after is not False):
            ctx.add(f"{kind}_ADDED" if after is not False else f"{kind}_REMOVED")
        elif not isinstance(before, dict) and isinstance(after, dict):
            ctx.add(f"{kind}_NARROWED")
        elif isinstance(before, dict) and not isinstance(after, dict):
            ctx.add(f"{kind}_EXTENDED")
        elif isinstance(before, dict) and isinstance(after, dict):
            ctx.compare(ctx, before, o.resolver, after, u.resolver)


def _compare_unevaluated(ctx: Context, o: Node, u: Node, name: str, kind: str) -> None:
    before, after = o.raw.get(name), u.raw.get(name)
    if before is None and after is None:
        return
    with ctx.enter(name):
        if before is None:
            ctx.add(f"{kind}_REMOVED" if after is False else f"{kind}_NARROWED")
        elif after is None:
            ctx.add(f"{kind}_ADDED" if before is False else f"{kind}_EXTENDED")
        elif before is False and after is not False:
            ctx.add(f"{kind}_ADDED")
        elif before is not False and after is False:
            ctx.add(f"{kind}_REMOVED")
        elif before in (True, {}) and after not in (True, {}):
            ctx.add(f"{kind}_NARROWED")
        elif before not in (True, {}) and after in (True, {}):
            ctx.add(f"{kind}_EXTENDED")
        else:
            ctx.compare(ctx, before, o.resolver, after, u.resolver)


def _properties(raw: JsonObject) -> JsonObject:
    props = raw.get("properties")
    return props if isinstance(props, dict) else {}


def _required(raw: JsonObject) -> set[str]:
    required = raw.get("required")
    return {r for r in required if isinstance(r, str)} if isinstance(required, list) else set()


def _has_default(node: JsonValue, resolver: Resolver) -> bool:
    return "default" in load(node, resolver).raw


def _open_object(raw: JsonObject) -> bool:
    return (
        raw.get("additionalProperties", True) is True
        and not raw.get("patternProperties")
        and raw.get("unevaluatedProperties", True) in (True, {})
    )


def _partial_object(raw: JsonObject, name: str) -> JsonValue:
    patterns = raw.get("patternProperties")
    if isinstance(patterns, Mapping):
        for pattern, schema in patterns.items():
            try:
                if re.search(pattern, name):
                    return schema
            except re.error:
                continue
    additional = raw.get("additionalProperties", True)
    if isinstance(additional, dict):
        return additional
    uneval = raw.get("unevaluatedProperties")
    if additional is True and isinstance(uneval, dict) and uneval:
        return uneval
    return None


def compare_object(ctx: Context, o: Node, u: Node) -> None:
    o_props, u_props = _properties(o.raw), _properties(u.raw)
    o_req, u_req = _required(o.raw), _required(u.raw)
    for name in o_props:
        if name in u_props and (name in o_req) != (name in u_req):
            if name in o_req:
                kind = "REQUIRED_ATTRIBUTE_REMOVED"
            elif _has_default(u_props[name], u.resolver):
                kind = "REQUIRED_ATTRIBUTE_WITH_DEFAULT_ADDED"
            else:
                kind = "REQUIRED_ATTRIBUTE_ADDED"
            ctx.add(kind, "required", name)
    for name in sorted(set(o_props) | set(u_props)):
        with ctx.enter("properties", name):
            if name not in u_props:
                _removed_property(ctx, name, o_props[name], o, u)
            elif name not in o_props:
                _added_property(ctx, name, u_props[name], o, u, name in u_req)
            else:
                ctx.compare(ctx, o_props[name], o.resolver, u_props[name], u.resolver)
    _compare_dependencies(ctx, o, u)
    _compare_additional(ctx, o, u, "additionalProperties", "ADDITIONAL_PROPERTIES")
    _compare_unevaluated(ctx, o, u, "unevaluatedProperties", "UNEVALUATED_PROPERTIES")
    bounds(ctx, o.raw, u.raw, "maxProperties", "MAX_PROPERTIES")
    bounds(ctx, o.raw, u.raw, "minProperties", "MIN_PROPERTIES")


def _removed_property(ctx: Context, name: str, schema: JsonValue, o: Node, u: Node) -> None:
    if _open_object(u.raw):
        ctx.add("PROPERTY_REMOVED_FROM_OPEN_CONTENT_MODEL")
        return
    partial = _partial_object(u.raw, name)
    if partial is not None:
        sub_ctx = ctx.sub()
        ctx.compare(sub_ctx, schema, o.resolver, partial, u.resolver)
        ctx.extend(sub_ctx)
        ok = sub_ctx.compatible
        ctx.add(f"PROPERTY_REMOVED_{'IS' if ok else 'NOT'}_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL")
    elif schema is False:
        ctx.add("PROPERTY_WITH_FALSE_REMOVED_FROM_CLOSED_CONTENT_MODEL")
    else:
        ctx.add("PROPERTY_REMOVED_FROM_CLOSED_CONTENT_MODEL")


def _added_property(ctx: Context, name: str, schema: JsonValue, o: Node, u: Node, required: bool) -> None:
    with_default = required and _has_default(schema, u.resolver)
    if _open_object(o.raw):
        if load(schema, u.resolver).kind == "empty":  # {} or true, whatever its annotations
            ctx.add("PROPERTY_WITH_EMPTY_SCHEMA_ADDED_TO_OPEN_CONTENT_MODEL")
        elif required:
            ctx.add(f"REQUIRED_PROPERTY_{'WITH_DEFAULT_' if with_default else ''}ADDED_TO_OPEN_CONTENT_MODEL")
        else:
            ctx.add("OPTIONAL_PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL")
        return
    partial = _partial_object(o.raw, name)
    if partial is not None:
        sub_ctx = ctx.sub()
        ctx.compare(sub_ctx, partial, o.resolver, schema, u.resolver)
        ctx.extend(sub_ctx)
        ok = sub_ctx.compatible
        ctx.add(f"PROPERTY_ADDED_{'IS' if ok else 'NOT'}_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL")
    if required:
        ctx.add(f"REQUIRED_PROPERTY_{'WITH_DEFAULT_' if with_default else ''}ADDED_TO_UNOPEN_CONTENT_MODEL")
    else:
        ctx.add("OPTIONAL_PROPERTY_ADDED_TO_UNOPEN_CONTENT_MODEL")


def _dependencies(raw: JsonObject) -> tuple[dict[str, set[str]], JsonObject]:
    arrays: dict[str, set[str]] = {}
    schemas: JsonObject = {}
    for name in ("dependencies", "dependentRequired", "dependentSchemas"):
        found = raw.get(name)
        for key, value in found.items() if isinstance(found, dict) else ():
            if isinstance(value, list):
                arrays[key] = {str(v) for v in value}
            else:
                schemas[key] = value
    return arrays, schemas


def _compare_dependencies(ctx: Context, o: Node, u: Node) -> None:
    (o_arrays, o_schemas), (u_arrays, u_schemas) = _dependencies(o.raw), _dependencies(u.raw)
    with ctx.enter("dependencies"):
        for key in sorted(set(o_arrays) | set(u_arrays)):
            before, after = o_arrays.get(key), u_arrays.get(key)
            if after is None:
                ctx.add("DEPENDENCY_ARRAY_REMOVED", key)
            elif before is None:
                ctx.add("DEPENDENCY_ARRAY_ADDED", key)
            elif before != after:
                if after >= before:
                    ctx.add("DEPENDENCY_ARRAY_EXTENDED", key)
                elif before >= after:
                    ctx.add("DEPENDENCY_ARRAY_NARROWED", key)
                else:
                    ctx.add("DEPENDENCY_ARRAY_CHANGED", key)
        for key in sorted(set(o_schemas) | set(u_schemas)):
            if key not in u_schemas:
                ctx.add("DEPENDENCY_SCHEMA_REMOVED", key)
            elif key not in o_schemas:
                ctx.add("DEPENDENCY_SCHEMA_ADDED", key)
            else:
                with ctx.enter(key):
                    ctx.compare(ctx, o_schemas[key], o.resolver, u_schemas[key], u.resolver)
