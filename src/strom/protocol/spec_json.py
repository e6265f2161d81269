"""The layout of Kafka's JSON message specs, as the keys spec.py reads (``FieldJson``, ``SpecJson``).

Kafka's spec files carry more keys (``about``, ``entityType``, ``mapKey``...), which nothing here reads.
`field_json` and `message_json` build fields and messages for the specs the project describes itself
(internal_specs.py, consumer_group_specs.py, share_group_specs.py, share_state_specs.py,
telemetry_specs.py...): flexible in every version unless told otherwise (the controller's own
specs are classic encoding only).
"""

from __future__ import annotations

from typing import Required, TypedDict

__all__ = ["FieldJson", "SpecJson", "StructJson", "field_json", "message_json"]


class FieldJson(TypedDict, total=False):
    """A field as a JSON spec writes it (the keys read here; the specs carry others, e.g. ``about``)."""

    name: Required[str]
    type: Required[str]
    versions: str
    nullableVersions: str
    taggedVersions: str
    tag: int
    default: int | float | bool | str  # a number, a bool or a string ("null", "-1", "0x7fffffff"...)
    flexibleVersions: str
    fields: list[FieldJson]


class StructJson(TypedDict):
    name: str
    fields: list[FieldJson]


class SpecJson(TypedDict, total=False):
    """A JSON spec file: one request, response or header."""

    name: Required[str]
    type: Required[str]
    apiKey: int
    validVersions: str
    flexibleVersions: str
    fields: list[FieldJson]
    commonStructs: list[StructJson]


def field_json(
    name: str,
    type_: str,
    versions: str = "0+",
    *,
    fields: list[FieldJson] | None = None,
    default: str | None = None,
    nullable: bool = False,
) -> FieldJson:
    """A field present in ``versions``; ``nullable`` in all of them."""
    field: FieldJson = {"name": name, "type": type_, "versions": versions}
    if fields is not None:
        field["fields"] = fields
    if default is not None:
        field["default"] = default
    if nullable:
        field["nullableVersions"] = versions
    return field


def message_json(
    name: str, kind: str, api_key: int, valid: str, fields: list[FieldJson], *, flexible: str = "0+"
) -> SpecJson:
    """A request or response of versions ``valid``, flexible in ``flexible`` ("none": never)."""
    return {
        "apiKey": api_key,
        "type": kind,
        "name": name,
        "validVersions": valid,
        "flexibleVersions": flexible,
        "fields": fields,
    }
