"""The layout of Kafka's JSON message specs, as the keys spec.py reads (``FieldJson``, ``SpecJson``).

Kafka's spec files carry more keys (``about``, ``entityType``, ``mapKey``...), which nothing here reads.
internal_specs.py writes Strom's own controller specs in this layout.
"""

from __future__ import annotations

from typing import Required, TypedDict

__all__ = ["FieldJson", "SpecJson", "StructJson"]


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
