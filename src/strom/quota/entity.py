"""Quota entities, their config keys, and Kafka's order of precedence between them.

A quota entity names who a quota applies to: a user, a client id, or a user's client id, where either
name may be the *default* (``<default>`` in ZooKeeper, a null name on the wire). `QuotaEntity` holds
one optional component of each type; a component given as `DEFAULT` is the default entity of its type.
On the wire (DescribeClientQuotas/AlterClientQuotas) an entity is a list of (entity_type, entity_name)
pairs with the types ``user`` and ``client-id``.

Precedence (Kafka's documentation of quotas): for a request from user U with client id C, each quota
type (`producer_byte_rate`, ...) takes its value from the first of these entities that sets it:

1. user U, client C            5. default user, default client
2. user U, default client      6. default user
3. user U                      7. client C
4. default user, client C      8. default client

`candidates` lists those eight in that order; `resolve` applies them to a table of configured quotas.
A quota's *metric tags* (`metric_tags`) are the entity's user and client id with the request's real
names in place of defaults: a default quota applies to every user (client) on its own, while a user's
quota is shared by all that user's client ids.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

__all__ = [
    "CLIENT_ID",
    "CONSUMER_BYTE_RATE",
    "CONTROLLER_MUTATION_RATE",
    "DEFAULT",
    "PRODUCER_BYTE_RATE",
    "QUOTA_KEYS",
    "REQUEST_PERCENTAGE",
    "USER",
    "QuotaEntity",
    "candidates",
    "check_quota_value",
    "metric_tags",
    "resolve",
]

USER: Final = "user"
CLIENT_ID: Final = "client-id"
PRODUCER_BYTE_RATE: Final = "producer_byte_rate"
CONSUMER_BYTE_RATE: Final = "consumer_byte_rate"
REQUEST_PERCENTAGE: Final = "request_percentage"
CONTROLLER_MUTATION_RATE: Final = "controller_mutation_rate"
#: The quota keys and whether Kafka types each as a whole number (LONG) or a DOUBLE.
QUOTA_KEYS: Final[Mapping[str, bool]] = {
    PRODUCER_BYTE_RATE: True,
    CONSUMER_BYTE_RATE: True,
    REQUEST_PERCENTAGE: False,
    CONTROLLER_MUTATION_RATE: False,
}


class _Default:
    """The default entity of a type (a singleton; never equal to any name)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "DEFAULT"


DEFAULT: Final = _Default()
Name = str | _Default


@dataclass(frozen=True, slots=True)
class QuotaEntity:
    """A user, a client id, or both; each a name or `DEFAULT`; None is a component the entity lacks."""

    user: Name | None = None
    client_id: Name | None = None

    def __post_init__(self) -> None:
        if self.user is None and self.client_id is None:
            raise ValueError("a quota entity names a user, a client id or both")

    @classmethod
    def from_wire(cls, components: Mapping[str, str | None]) -> QuotaEntity:
        """From {entity_type: entity_name or None for the default}; ValueError for an unknown type."""
        unknown = set(components) - {USER, CLIENT_ID}
        if unknown:
            raise ValueError(f"unsupported quota entity type(s) {sorted(unknown)}")

        def name(kind: str) -> Name | None:
            if kind not in components:
                return None
            value = components[kind]
            return DEFAULT if value is None else value

        return cls(name(USER), name(CLIENT_ID))

    def to_wire(self) -> list[tuple[str, str | None]]:
        """The (entity_type, entity_name) pairs, user first; a default's name is None."""
        out: list[tuple[str, str | None]] = []
        for kind, value in ((USER, self.user), (CLIENT_ID, self.client_id)):
            if value is not None:
                out.append((kind, None if isinstance(value, _Default) else value))
        return out

    def describe(self) -> str:
        """As kafka-configs.sh prints it: ``user-principal 'alice', client-id 'app'``."""
        parts = []
        for kind, value in ((USER, self.user), (CLIENT_ID, self.client_id)):
            if value is not None:
                label = "user-principal" if kind == USER else "client-id"
                parts.append(f"the default {label}" if isinstance(value, _Default) else f"{label} '{value}'")
        return ", ".join(parts)


def candidates(user: str, client_id: str) -> tuple[QuotaEntity, ...]:
    """The eight entities a request from (``user``, ``client_id``) may take a quota from, first wins."""
    return (
        QuotaEntity(user, client_id),
        QuotaEntity(user, DEFAULT),
        QuotaEntity(user, None),
        QuotaEntity(DEFAULT, client_id),
        QuotaEntity(DEFAULT, DEFAULT),
        QuotaEntity(DEFAULT, None),
        QuotaEntity(None, client_id),
        QuotaEntity(None, DEFAULT),
    )


def resolve(
    quotas: Mapping[QuotaEntity, Mapping[str, float]], key: str, user: str, client_id: str
) -> tuple[QuotaEntity, float] | None:
    """The entity whose ``key`` quota applies to (``user``, ``client_id``) and its value; None: none."""
    for entity in candidates(user, client_id):
        values = quotas.get(entity)
        if values is not None and key in values:
            return entity, values[key]
    return None


def metric_tags(entity: QuotaEntity, user: str, client_id: str) -> tuple[str, str]:
    """The (user, client-id) tags of the quota's sensor: the request's names where the entity has a
    component (a default one included), empty where it has none (a user quota is shared by clients)."""
    return ("" if entity.user is None else user, "" if entity.client_id is None else client_id)


def check_quota_value(key: str, value: float) -> None:
    """ValueError unless ``value`` is valid for ``key`` (known key, positive, whole for the byte rates)."""
    whole = QUOTA_KEYS.get(key)
    if whole is None:
        raise ValueError(f"unknown quota key {key!r} (known: {', '.join(QUOTA_KEYS)})")
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"{key} must be a positive number, not {value}")
    if whole and value != int(value):
        raise ValueError(f"{key} must be a whole number of bytes per second, not {value}")
