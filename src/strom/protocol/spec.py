"""Apache Kafka's JSON message specs, parsed into typed, immutable descriptions.

Source of truth. The specs are read from the installed ``kafka-python`` package
(``kafka/protocol/schemas/resources/*.json``); nothing is copied into this repository. Each file is
JSON with ``//`` line comments (the ASF licence header and per-version notes), which we strip.

What a spec says. A message (``type`` request, response or header) has ``apiKey``, ``validVersions``,
``flexibleVersions`` and an ordered list of ``fields``. A field has a ``type`` (a primitive such as
``int32``/``string``/``records``/``uuid``, ``[]T`` for arrays, or a capitalised struct name whose
``fields`` are inline or in the message's ``commonStructs``), the ``versions`` in which it is on the
wire, optional ``nullableVersions``, an optional ``tag`` + ``taggedVersions`` (then it travels in the
struct's tagged-field section instead of positionally), an optional ``default`` and, rarely, a
field-level ``flexibleVersions`` override (``RequestHeader.ClientId`` is ``"none"``: always a
classic string).

Versions. The minimum of ``validVersions`` is *not* a lower bound for us: Kafka 4 dropped e.g.
Produce v0-2 from the specs but kept the fields' ``"0+"`` ranges, which still describe the old
layouts exactly. We therefore accept any version ``0..max`` (:attr:`MessageSpec.max_version`).

Python names. Dict keys are the snake_case of the JSON names, by inserting ``_`` before every upper
case letter except the first (``ThrottleTimeMs`` -> ``throttle_time_ms``); this is also the rule
kafka-python uses, which keeps our dicts comparable with that oracle.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TypeAlias

from strom.protocol.spec_json import FieldJson, SpecJson

__all__ = [
    "FIXED_TYPES",
    "FieldSpec",
    "MessageSpec",
    "VersionRange",
    "all_api_specs",
    "header_spec",
    "load_spec",
    "request_spec",
    "response_spec",
    "snake_case",
    "spec_dir",
]

# Upper bound used for open ranges ("3+"); API versions are int16 on the wire.
MAX_VERSION = 0x7FFF

# Primitive types of fixed width: struct format character and byte size.
FIXED_TYPES: dict[str, tuple[str, int]] = {
    "int8": ("b", 1),
    "int16": ("h", 2),
    "uint16": ("H", 2),
    "int32": ("i", 4),
    "uint32": ("I", 4),
    "int64": ("q", 8),
    "float64": ("d", 8),
    "bool": ("?", 1),
    "uuid": ("16s", 16),
}
VARIABLE_TYPES = frozenset({"string", "bytes", "records"})
_SPEC_SUBDIR = ("protocol", "schemas", "resources")
_COMMENT = re.compile(r"^\s*//.*$", re.MULTILINE)
_UPPER = re.compile(r"(?<!^)(?=[A-Z])")


def snake_case(name: str) -> str:
    """``TopicData`` -> ``topic_data`` (the key used in message dicts)."""
    return _UPPER.sub("_", name).lower()


@dataclass(frozen=True, slots=True)
class VersionRange:
    """An inclusive version range; ``VersionRange.NONE`` (empty) is spelled ``"none"`` in the JSON."""

    low: int
    high: int

    @classmethod
    def parse(cls, text: str | None) -> VersionRange:
        if text is None or text == "none":
            return cls(1, 0)
        text = text.strip()
        if text.endswith("+"):
            return cls(int(text[:-1]), MAX_VERSION)
        low, sep, high = text.partition("-")
        return cls(int(low), int(high) if sep else int(low))

    def __contains__(self, version: object) -> bool:
        return isinstance(version, int) and self.low <= version <= self.high

    @property
    def empty(self) -> bool:
        return self.low > self.high


@dataclass(frozen=True, slots=True)
class FieldSpec:
    """One field of a message or struct.

    ``type`` is the element type: a primitive name, or ``"struct"`` (then ``fields`` holds its fields
    and ``struct_name`` its JSON type name). ``is_array`` marks ``[]T``.
    """

    name: str
    attr: str
    type: str
    is_array: bool
    versions: VersionRange
    nullable_versions: VersionRange
    tagged_versions: VersionRange
    tag: int | None
    default: int | float | bool | str | None
    fields: tuple[FieldSpec, ...] = ()
    struct_name: str = ""
    never_flexible: bool = False

    def present(self, version: int) -> bool:
        return version in self.versions

    def nullable(self, version: int) -> bool:
        return version in self.nullable_versions

    def tagged(self, version: int) -> bool:
        return self.tag is not None and version in self.tagged_versions

    def default_for(self, version: int) -> FieldDefault:
        """The value written when a dict lacks this field (and the value decoded when a tag is absent)."""
        nullable = self.nullable(version)
        if self.is_array:
            return None if (nullable and self.default == "null") else []
        if self.type == "struct":
            return None
        if self.type == "records":
            return None if nullable else b""
        if self.default == "null":
            return None if nullable else _ZERO[self.type]
        if self.default is None:
            return _ZERO[self.type]
        return _parse_default(self.type, self.default)


FieldDefault: TypeAlias = int | float | bool | str | bytes | list[object] | None
"""The value of an absent field: its type's zero or its spec's default, [] for arrays, None if nullable."""

_ZERO: dict[str, FieldDefault] = {
    "int8": 0,
    "int16": 0,
    "uint16": 0,
    "int32": 0,
    "uint32": 0,
    "int64": 0,
    "float64": 0.0,
    "bool": False,
    "uuid": bytes(16),
    "string": "",
    "bytes": b"",
}


def _parse_default(type_: str, raw: int | float | bool | str) -> FieldDefault:
    if type_ == "bool":
        return raw if isinstance(raw, bool) else str(raw).lower() == "true"
    if type_ == "float64":
        return float(raw)
    if type_ in FIXED_TYPES and type_ != "uuid":
        return raw if isinstance(raw, int) else int(str(raw), 0)
    if type_ == "string":
        return str(raw)
    return _ZERO[type_]


@dataclass(frozen=True, slots=True)
class MessageSpec:
    """A request, response or header spec."""

    name: str
    api_key: int | None
    kind: str
    valid_versions: VersionRange
    flexible_versions: VersionRange
    fields: tuple[FieldSpec, ...]

    @property
    def max_version(self) -> int:
        return self.valid_versions.high

    def flexible(self, version: int) -> bool:
        return version in self.flexible_versions


def _parse_field(raw: FieldJson, common: dict[str, list[FieldJson]]) -> FieldSpec:
    type_text: str = raw["type"]
    is_array = type_text.startswith("[]")
    elem = type_text[2:] if is_array else type_text
    sub_fields: tuple[FieldSpec, ...] = ()
    struct_name = ""
    if elem[:1].isupper():
        struct_name = elem
        raw_fields = raw.get("fields", common.get(elem))
        if raw_fields is None:
            raise ValueError(f"struct type {elem!r} of field {raw['name']!r} is not defined")
        sub_fields = tuple(_parse_field(f, common) for f in raw_fields)
        elem = "struct"
    elif elem not in FIXED_TYPES and elem not in VARIABLE_TYPES:
        raise ValueError(f"unknown type {type_text!r} of field {raw['name']!r}")
    tag = raw.get("tag")
    return FieldSpec(
        name=raw["name"],
        attr=snake_case(raw["name"]),
        type=elem,
        is_array=is_array,
        versions=VersionRange.parse(raw.get("versions")),
        nullable_versions=VersionRange.parse(raw.get("nullableVersions")),
        tagged_versions=VersionRange.parse(raw.get("taggedVersions"))
        if tag is not None
        else VersionRange(1, 0),
        tag=tag,
        default=raw.get("default"),
        fields=sub_fields,
        struct_name=struct_name,
        never_flexible=raw.get("flexibleVersions") == "none",
    )


def parse_spec(text: str) -> MessageSpec:
    """Parse the text of one JSON spec file (with ``//`` comments)."""
    return parse_spec_data(json.loads(_COMMENT.sub("", text)))


def parse_spec_data(data: SpecJson) -> MessageSpec:
    """Parse one spec already loaded as a dict (used for Strom's internal API specs)."""
    common = {s["name"]: s["fields"] for s in data.get("commonStructs", [])}
    return MessageSpec(
        name=data["name"],
        api_key=data.get("apiKey"),
        kind=data["type"],
        valid_versions=VersionRange.parse(data.get("validVersions")),
        flexible_versions=VersionRange.parse(data.get("flexibleVersions")),
        fields=tuple(_parse_field(f, common) for f in data.get("fields", [])),
    )


@functools.cache
def spec_dir() -> Path:
    """The spec directory of the installed kafka-python.

    Located with ``find_spec`` rather than ``importlib.resources`` so that the ``kafka`` package (a
    whole client library with import-time side effects) is never imported by the broker.
    """
    found = importlib.util.find_spec("kafka")
    if found is None or not found.submodule_search_locations:
        raise RuntimeError("kafka-python is not installed: Kafka's JSON message specs come from it")
    return Path(next(iter(found.submodule_search_locations)), *_SPEC_SUBDIR)


@functools.cache
def load_spec(name: str) -> MessageSpec:
    """Load e.g. ``"ProduceRequest"`` from the installed kafka-python package."""
    return parse_spec((spec_dir() / f"{name}.json").read_text("utf-8"))


@functools.cache
def all_api_specs() -> dict[tuple[int, str], MessageSpec]:
    """Every request/response spec, keyed by ``(api_key, "request" | "response")``."""
    found: dict[tuple[int, str], MessageSpec] = {}
    for entry in sorted(spec_dir().glob("*.json")):
        stem = entry.stem
        if stem.endswith(("Request", "Response")):
            spec = load_spec(stem)
            if spec.api_key is not None and spec.kind in ("request", "response"):
                found[(spec.api_key, spec.kind)] = spec
    # The controller APIs Kafka 4 removed: Strom's own layouts (internal_specs.py), never advertised.
    # KIP-848's consumer-group APIs, which the installed specs lack (consumer_group_specs.py).
    # KIP-714's client telemetry APIs, which they lack too (telemetry_specs.py), and KIP-932's
    # share-group APIs (share_group_specs.py), its share-state APIs between brokers
    # (share_state_specs.py) and DescribeShareGroupOffsets (share_offsets_specs.py).
    from strom.protocol.consumer_group_specs import CONSUMER_GROUP_SPECS
    from strom.protocol.internal_specs import INTERNAL_SPECS
    from strom.protocol.share_group_specs import SHARE_GROUP_SPECS
    from strom.protocol.share_offsets_specs import SHARE_OFFSETS_SPECS
    from strom.protocol.share_state_specs import SHARE_STATE_SPECS
    from strom.protocol.telemetry_specs import TELEMETRY_SPECS

    specs = [
        *INTERNAL_SPECS,
        *CONSUMER_GROUP_SPECS,
        *TELEMETRY_SPECS,
        *SHARE_GROUP_SPECS,
        *SHARE_STATE_SPECS,
        *SHARE_OFFSETS_SPECS,
    ]
    for data in specs:
        spec = parse_spec_data(data)
        assert spec.api_key is not None
        found.setdefault((spec.api_key, spec.kind), spec)
    return found


def request_spec(api_key: int) -> MessageSpec | None:
    return all_api_specs().get((api_key, "request"))


def response_spec(api_key: int) -> MessageSpec | None:
    return all_api_specs().get((api_key, "response"))


def header_spec(name: str) -> MessageSpec:
    """``"RequestHeader"`` or ``"ResponseHeader"``."""
    return load_spec(name)
