"""Schema compatibility: Avro's schema-resolution rules and the registry's compatibility modes.

**Reader against writer** (`can_read`): can a reader using schema R decode data written with schema W?
The rules are those of the Avro specification's "Schema Resolution", as Apache Avro's Java
``SchemaCompatibility`` (the check Confluent's registry runs) applies them:

* a writer union: every writer branch must be readable; a reader union (writer not a union): at least
  one reader branch must read the writer's schema;
* equal primitive types match; promotions: int → long, float, double; long → float, double;
  float → double; string ↔ bytes;
* records: the names match (unqualified names, as Java compares them, or the writer's full name is one
  of the reader's aliases); each reader field is found in the writer by name or by one of its aliases
  and its types resolve, or else it must have a default; writer fields the reader lacks are skipped;
* enums: the names match and every writer symbol is a reader symbol, unless the reader's enum has a
  default symbol; fixed: the names match and the sizes are equal; arrays by items, maps by values;
* anything else is a type mismatch. Logical types do not change resolution (Avro ignores them there).

Recursive named types are checked once per (reader name, writer name) pair: a pair already under check
is taken as compatible, which is the fixpoint the recursion would reach. A record pair's result is also
remembered once found, so a named type referenced many times (a schema of a few kilobytes can reach
one type along 2^30 paths) costs one check, not one per path: the check runs on the event loop.

The ``avro`` package ships a port of Java's checker, but it does not qualify aliases in the reader's
namespace (an alias ``"Old"`` in namespace ``n`` does not match ``n.Old``) and it judges a reader field
without a default by its enum default, so this module walks fastavro's parsed form itself.

**Modes** (`check`, for every format: the per-format judge of one reader / writer pair is given to
it): BACKWARD — the new schema reads the latest registered one; FORWARD — the latest
reads the new; FULL — both; the ``_TRANSITIVE`` forms check every registered (not deleted) version
instead of only the latest; NONE checks nothing.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping, Sequence
from typing import TypeVar, cast

from strom._util.json_types import JsonValue
from strom.registry.avro import PRIMITIVES, AvroSchema

S = TypeVar("S")
Node = Mapping[str, JsonValue]
"""A record, enum, fixed, array or map as fastavro parses it (names resolved: see ``_resolve``)."""

_PROMOTIONS = {
    "int": frozenset({"long", "float", "double"}),
    "long": frozenset({"float", "double"}),
    "float": frozenset({"double"}),
    "string": frozenset({"bytes"}),
    "bytes": frozenset({"string"}),
}


class Compatibility(enum.Enum):
    BACKWARD = "BACKWARD"
    BACKWARD_TRANSITIVE = "BACKWARD_TRANSITIVE"
    FORWARD = "FORWARD"
    FORWARD_TRANSITIVE = "FORWARD_TRANSITIVE"
    FULL = "FULL"
    FULL_TRANSITIVE = "FULL_TRANSITIVE"
    NONE = "NONE"

    @property
    def transitive(self) -> bool:
        return self.value.endswith("_TRANSITIVE")

    @property
    def backward(self) -> bool:
        return self.value.startswith(("BACKWARD", "FULL"))

    @property
    def forward(self) -> bool:
        return self.value.startswith(("FORWARD", "FULL"))


DEFAULT_COMPATIBILITY = Compatibility.BACKWARD


def check(
    mode: Compatibility,
    new: S,
    previous: Sequence[S],
    reads: Callable[[S, S], list[str]] | None = None,
) -> list[str]:
    """Why ``new`` may not follow ``previous`` (oldest first) under ``mode``; empty when it may.

    ``reads(reader, writer)`` judges one pair (Avro's `can_read` unless another format's is given).
    """
    can_read_ = reads if reads is not None else cast(Callable[[S, S], list[str]], can_read)
    if mode is Compatibility.NONE or not previous:
        return []
    against = previous if mode.transitive else previous[-1:]
    messages: list[str] = []
    for old in reversed(against):
        if mode.backward:
            messages += [
                f"{m} (the new schema cannot read data written with an earlier one)"
                for m in can_read_(new, old)
            ]
        if mode.forward:
            messages += [
                f"{m} (an earlier schema cannot read data written with the new one)"
                for m in can_read_(old, new)
            ]
    return messages


def can_read(reader: AvroSchema, writer: AvroSchema) -> list[str]:
    """Incompatibilities found when ``reader`` resolves data written with ``writer``; empty if none."""
    return _Checker(reader.named, writer.named).check(reader.parsed, writer.parsed, "")


class _Checker:
    def __init__(self, reader_names: Mapping[str, Node], writer_names: Mapping[str, Node]) -> None:
        self._reader_names = reader_names
        self._writer_names = writer_names
        self._in_progress: set[tuple[str, str]] = set()
        self._checked: dict[tuple[str, str], list[str]] = {}  # record pairs already judged

    def check(self, reader: JsonValue, writer: JsonValue, path: str) -> list[str]:
        reader = _resolve(reader, self._reader_names)
        writer = _resolve(writer, self._writer_names)
        if isinstance(writer, list):
            found: list[str] = []
            for branch in writer:
                found += self.check(reader, branch, path)
            return found
        if isinstance(reader, list):
            if any(not self.check(branch, writer, path) for branch in reader):
                return []
            where = path or "/"
            return [
                f"MISSING_UNION_BRANCH at {where}: the reader's union has no branch for {_describe(writer)}"
            ]
        r_type, w_type = _type_of(reader), _type_of(writer)
        if r_type != w_type:
            if w_type in PRIMITIVES and r_type in _PROMOTIONS.get(w_type, ()):
                return []
            return [f"TYPE_MISMATCH at {path or '/'}: reader type {r_type} cannot read writer type {w_type}"]
        if r_type in PRIMITIVES or not isinstance(reader, Mapping) or not isinstance(writer, Mapping):
            return []  # equal primitives (or one name fastavro left unresolved on both sides)
        if r_type == "array":
            return self.check(reader["items"], writer["items"], f"{path}/items")
        if r_type == "map":
            return self.check(reader["values"], writer["values"], f"{path}/values")
        return self._check_named(reader, writer, r_type, path)

    def _check_named(self, reader: Node, writer: Node, kind: str, path: str) -> list[str]:
        if not _names_match(reader, writer):
            return [f"NAME_MISMATCH at {path}/name: expected {writer['name']}, found {reader['name']}"]
        if kind == "fixed":
            if reader["size"] != writer["size"]:
                return [
                    f"FIXED_SIZE_MISMATCH at {path}/size: expected {writer['size']}, found {reader['size']}"
                ]
            return []
        if kind == "enum":
            symbols = _strings(reader.get("symbols"))
            missing = [s for s in _strings(writer.get("symbols")) if s not in symbols]
            if missing and reader.get("default") not in symbols:
                return [f"MISSING_ENUM_SYMBOLS at {path}/symbols: the reader lacks {', '.join(missing)}"]
            return []
        pair = (str(reader["name"]), str(writer["name"]))
        if (known := self._checked.get(pair)) is not None:
            return known[:1]  # in full where the pair was first met; once more keeps lists linear
        if pair in self._in_progress:
            return []
        self._in_progress.add(pair)
        try:
            found = self._checked[pair] = self._check_fields(reader, writer, path)
            return list(found)
        finally:
            self._in_progress.discard(pair)

    def _check_fields(self, reader: Node, writer: Node, path: str) -> list[str]:
        by_name = {str(f["name"]): f for f in _fields(writer)}
        found: list[str] = []
        for i, reader_field in enumerate(_fields(reader)):
            writer_field = by_name.get(str(reader_field["name"]))
            for alias in _strings(reader_field.get("aliases")):
                if writer_field is None:
                    writer_field = by_name.get(alias)
            where = f"{path}/fields/{i}"
            if writer_field is not None:
                found += self.check(reader_field["type"], writer_field["type"], f"{where}/type")
            elif "default" not in reader_field:
                found.append(
                    f"READER_FIELD_MISSING_DEFAULT_VALUE at {where}: field '{reader_field['name']}' "
                    "has no default value and is missing in the writer's schema"
                )
        return found


def _resolve(node: JsonValue, names: Mapping[str, Node]) -> JsonValue:
    """A named type's definition for a reference to it (fastavro writes later uses as the full name)."""
    if isinstance(node, str) and node not in PRIMITIVES:
        return names.get(node, node)
    if isinstance(node, Mapping):
        kind = node.get("type")
        if isinstance(kind, str) and kind not in _COMPLEX:
            # {"type": "int", "logicalType": ...} or {"type": "some.Named"}
            return _resolve(kind, names)
    return node


_COMPLEX = frozenset({"record", "error", "enum", "fixed", "array", "map"})


def _fields(record: Node) -> list[Node]:
    """A record's fields (fastavro's parsed form has a list of objects there)."""
    return [f for f in _list(record.get("fields")) if isinstance(f, Mapping)]


def _strings(value: JsonValue) -> list[str]:
    """Symbols or aliases: the strings of a JSON array (none when absent)."""
    return [v for v in _list(value) if isinstance(v, str)]


def _list(value: JsonValue) -> Sequence[JsonValue]:
    return value if isinstance(value, list) else ()


def _type_of(node: JsonValue) -> str:
    if isinstance(node, str):
        return node
    kind = str(node["type"]) if isinstance(node, Mapping) else repr(node)
    return "record" if kind == "error" else kind


def _describe(node: JsonValue) -> str:
    if isinstance(node, Mapping) and "name" in node:
        return f"{_type_of(node)} {node['name']}"
    return _type_of(node)


def _short(name: str) -> str:
    return name.rpartition(".")[2]


def _names_match(reader: Node, writer: Node) -> bool:
    reader_name, writer_name = str(reader["name"]), str(writer["name"])
    if _short(reader_name) == _short(writer_name):
        return True
    namespace = reader_name.rpartition(".")[0]
    for alias in _strings(reader.get("aliases")):
        full = alias if "." in alias or not namespace else f"{namespace}.{alias}"
        if full == writer_name:
            return True
    return False
