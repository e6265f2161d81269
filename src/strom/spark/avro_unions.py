"""General Avro unions as Spark structs of their members, as Spark's `from_avro` maps them.

A union other than null-and-one-type (or int/long, float/double) becomes a struct with one nullable field
per non-null branch, named `member0`, `member1`, ... in the union's order; exactly one is set (none when
the value is null). For `["null", "int", "string"]` the value 7 is `{member0: 7, member1: null}`.

Reading: fastavro is asked for named types in unions with more than one as `(full name, value)`
pairs (`return_named_type` and its override), so such a branch is known by name; other branches are told
apart by the value fastavro gives: a record's field names, an enum's symbol, a fixed's size, else the
Python type (`bool` before `int`; int and long, float and double: the first such branch).
`row_converter` builds, once per reader schema, the function that rewrites a decoded datum into the
struct form; it is None when the schema has no general union (then nothing is rewritten).

Writing: `datum_converter` does the inverse for a schema's unions: the first set member's value, as a
`(full name, value)` pair when its branch is a named type, so fastavro writes that branch.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Mapping, Sequence
from decimal import Decimal
from typing import Any

from strom._util.json_types import JsonValue

_WIDENED = ({"int", "long"}, {"float", "double"})
_NAMED = ("record", "enum", "fixed")
Converter = Callable[[Any], Any]
"""Rewrites one decoded datum (fastavro's and Arrow's values are untyped Python objects)."""


def _full_name(name: str, namespace: str) -> str:
    return name if "." in name or not namespace else f"{namespace}.{name}"


class _Walker:
    """Builds converters over a schema, resolving named types by full name."""

    def __init__(self, reading: bool) -> None:
        self.reading = reading
        self.named: dict[str, Mapping[str, JsonValue]] = {}
        self.found_union = False

    def resolve(self, schema: JsonValue, namespace: str) -> tuple[JsonValue, str]:
        """(the definition of a schema node, its namespace for nested names)."""
        if isinstance(schema, str) and schema not in _PYTHON_TYPES:
            full = _full_name(schema, namespace)
            found = self.named.get(full, self.named.get(schema))
            if found is not None:
                return found, full.rpartition(".")[0]
        if isinstance(schema, Mapping) and schema.get("type") in _NAMED:
            full = _full_name(str(schema["name"]), str(schema.get("namespace", namespace)))
            self.named[full] = schema
            return schema, full.rpartition(".")[0]
        return schema, namespace

    def name_of(self, schema: JsonValue, namespace: str) -> str | None:
        definition, _ = self.resolve(schema, namespace)
        if isinstance(definition, Mapping) and definition.get("type") in _NAMED:
            return _full_name(str(definition["name"]), str(definition.get("namespace", namespace)))
        return None

    def build(self, schema: JsonValue, namespace: str) -> Converter | None:
        """The converter of a node (None: values pass unchanged)."""
        schema, namespace = self.resolve(schema, namespace)
        if isinstance(schema, list):
            return self._union(schema, namespace)
        if not isinstance(schema, Mapping):
            return None
        kind = schema.get("type")
        if kind == "record":
            fields = [
                (str(f["name"]), self.build(f["type"], namespace)) for f in _objects(schema.get("fields"))
            ]
            if all(c is None for _, c in fields):
                return None
            return lambda v: None if v is None else {n: c(v.get(n)) if c else v.get(n) for n, c in fields}
        if kind == "array":
            item = self.build(schema["items"], namespace)
            return None if item is None else (lambda v: None if v is None else [item(x) for x in v])
        if kind == "map":
            value = self.build(schema["values"], namespace)
            if value is None:
                return None
            if self.reading:
                return lambda v: None if v is None else {k: value(x) for k, x in v.items()}
            return lambda v: None if v is None else {k: value(x) for k, x in _items(v)}
        if isinstance(kind, list | Mapping):
            return self.build(kind, namespace)
        return None

    def _union(self, branches: Sequence[JsonValue], namespace: str) -> Converter | None:
        others = [b for b in branches if b != "null"]
        if len(others) == 1:
            inner = self.build(others[0], namespace)
            return None if inner is None else (lambda v: None if v is None else inner(v))
        if all(isinstance(b, str) for b in others) and set(others) in _WIDENED:
            return None
        self.found_union = True
        members = [
            (
                f"member{i}",
                self.name_of(b, namespace),
                _matcher(self.resolve(b, namespace)[0]),
                self.build(b, namespace),
            )
            for i, b in enumerate(others)
        ]
        return self._to_struct(members) if self.reading else self._from_struct(members)

    @staticmethod
    def _to_struct(
        members: list[tuple[str, str | None, Callable[[Any], bool], Converter | None]],
    ) -> Converter:
        names = [m[0] for m in members]

        def convert(v: Any) -> Any:
            if v is None:
                return None
            out: dict[str, object] = dict.fromkeys(names)
            named = isinstance(v, tuple) and len(v) == 2 and isinstance(v[0], str)
            for member, full, matches, inner in members:
                if (named and full == v[0]) or (not named and matches(v)):
                    value = v[1] if named else v
                    out[member] = inner(value) if inner else value
                    return out
            raise ValueError(f"no member of the union holds {v!r}")

        return convert

    @staticmethod
    def _from_struct(
        members: list[tuple[str, str | None, Callable[[Any], bool], Converter | None]],
    ) -> Converter:
        def convert(v: Any) -> Any:
            if v is None:
                return None
            for member, full, _python, inner in members:
                value = v.get(member)
                if value is not None:
                    value = inner(value) if inner else value
                    return (full, value) if full is not None else value
            return None

        return convert


def _items(value: Any) -> Any:
    return value.items() if isinstance(value, dict) else value


def _objects(value: JsonValue) -> list[Mapping[str, JsonValue]]:
    """A record's fields (a schema fastavro parsed has only objects there)."""
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, Mapping) for v in value):
        raise ValueError(f"not a list of Avro fields: {value!r}")
    return [v for v in value if isinstance(v, Mapping)]


_PYTHON_TYPES: dict[str, tuple[type, ...]] = {
    "boolean": (bool,),
    "int": (int,),
    "long": (int,),
    "float": (float,),
    "double": (float,),
    "string": (str,),
    "bytes": (bytes,),
    "null": (type(None),),
}
_LOGICAL_TYPES: dict[str, tuple[type, ...]] = {
    "date": (dt.date,),
    "timestamp-millis": (dt.datetime,),
    "timestamp-micros": (dt.datetime,),
    "local-timestamp-millis": (dt.datetime,),
    "local-timestamp-micros": (dt.datetime,),
    "decimal": (Decimal,),
}


def _matcher(schema: JsonValue) -> Callable[[Any], bool]:
    """Whether a value fastavro gives without a name belongs to a branch."""
    if isinstance(schema, Mapping) and schema.get("type") == "record":
        # Plain when it is the union's only named type (`return_named_type_override`).
        names = {str(f["name"]) for f in _objects(schema.get("fields"))}
        return lambda v: isinstance(v, dict) and set(v) == names
    if isinstance(schema, Mapping) and schema.get("type") == "enum":
        declared = schema.get("symbols")
        symbols = set(declared) if isinstance(declared, list) else set()
        return lambda v: isinstance(v, str) and v in symbols
    if isinstance(schema, Mapping) and schema.get("type") == "fixed" and "logicalType" not in schema:
        size = schema.get("size")
        return lambda v: isinstance(v, bytes) and len(v) == size
    python = _python_type(schema)
    return lambda v: _is_a(v, python)


def _python_type(schema: JsonValue) -> tuple[type, ...]:
    """The Python types fastavro gives for an unnamed branch."""
    if isinstance(schema, str):
        return _PYTHON_TYPES.get(schema, ())
    if isinstance(schema, Mapping):
        logical = schema.get("logicalType")
        if isinstance(logical, str) and logical in _LOGICAL_TYPES:
            return _LOGICAL_TYPES[logical]
        kind = schema.get("type")
        if kind == "array":
            return (list,)
        if kind == "map":
            return (dict,)
        if isinstance(kind, str):
            return _PYTHON_TYPES.get(kind, ())
    return ()


def _is_a(value: Any, python: tuple[type, ...]) -> bool:
    if isinstance(value, bool):
        return bool in python
    if isinstance(value, dt.datetime):
        return dt.datetime in python
    return isinstance(value, python)


def row_converter(schema: JsonValue) -> Converter | None:
    """Reading: from a datum decoded with `return_named_type` to the Spark row form (None: no general
    union in the schema, nothing to rewrite and no named-type pairs to ask for)."""
    walker = _Walker(reading=True)
    converter = walker.build(schema, "")
    return converter if walker.found_union else None


def datum_converter(schema: JsonValue) -> Converter | None:
    """Writing: from the Spark row form to a datum fastavro writes (None: no general union)."""
    walker = _Walker(reading=False)
    converter = walker.build(schema, "")
    return converter if walker.found_union else None
