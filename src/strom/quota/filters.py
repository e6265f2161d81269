"""DescribeClientQuotas' filter (KIP-546): which quota entities a list of filter components selects.

Each component names an entity type and a match: ``EXACT`` (0) a given name, ``DEFAULT`` (1) the type's
default entity, ``ANY`` (2) any entity with that type (a name or the default). An entity matches when it
satisfies every component; with ``strict`` it must also have no component of a type the filter does not
name (without it, other components are free). A type named twice, an unknown type or an unknown match
type is an invalid filter (`InvalidFilter`, INVALID_REQUEST on the wire).
"""

from __future__ import annotations

from dataclasses import dataclass

from strom.quota.entity import CLIENT_ID, DEFAULT, USER, QuotaEntity

__all__ = [
    "MATCH_ANY",
    "MATCH_DEFAULT",
    "MATCH_EXACT",
    "FilterComponent",
    "InvalidFilter",
    "check_filter",
    "matches",
]

MATCH_EXACT, MATCH_DEFAULT, MATCH_ANY = 0, 1, 2


class InvalidFilter(ValueError):
    """The filter itself is malformed."""


@dataclass(frozen=True, slots=True)
class FilterComponent:
    entity_type: str
    match_type: int
    match: str | None = None


def check_filter(components: list[FilterComponent]) -> None:
    seen: set[str] = set()
    for component in components:
        if component.entity_type not in (USER, CLIENT_ID):
            raise InvalidFilter(f"unsupported entity type {component.entity_type!r}")
        if component.entity_type in seen:
            raise InvalidFilter(f"entity type {component.entity_type!r} given twice")
        seen.add(component.entity_type)
        if component.match_type not in (MATCH_EXACT, MATCH_DEFAULT, MATCH_ANY):
            raise InvalidFilter(f"unknown match type {component.match_type}")
        if component.match_type == MATCH_EXACT and component.match is None:
            raise InvalidFilter(f"an exact match of {component.entity_type!r} needs a name")


def matches(entity: QuotaEntity, components: list[FilterComponent], strict: bool) -> bool:
    """Whether the (checked) filter selects ``entity``."""
    named: set[str] = set()
    for component in components:
        named.add(component.entity_type)
        value = entity.user if component.entity_type == USER else entity.client_id
        if value is None:
            return False
        if component.match_type == MATCH_EXACT and value != component.match:
            return False
        if component.match_type == MATCH_DEFAULT and value is not DEFAULT:
            return False
    if strict:
        if entity.user is not None and USER not in named:
            return False
        if entity.client_id is not None and CLIENT_ID not in named:
            return False
    return True
