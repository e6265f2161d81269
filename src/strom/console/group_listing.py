"""Every group's type and state as the brokers name them: ListGroups v5 at each broker.

confluent-kafka's admin client knows a classic group's states but neither the states of a KIP-848
consumer group while it assigns or reconciles (librdkafka reads ``Assigning`` and ``Reconciling`` as
UNKNOWN) nor share groups at all. ListGroups v5 (KIP-848's group types, KIP-518's states) names both
for every group a broker coordinates, so ``strom groups`` asks every broker over its own protocol
client (strom.console.wire). Names are printed as the CLI prints every enum, upper case with
underscores: Kafka's ``GroupType`` and ``GroupState`` constants (``CONSUMER``, ``PREPARING_REBALANCE``,
``RECONCILING``).
"""

from __future__ import annotations

import re

from strom.console.errors import ConsoleError
from strom.console.wire import WireClient
from strom.protocol.api import ApiKey
from strom.protocol.errors import ErrorCode

LIST_GROUPS_VERSION = 5
Listing = tuple[str, str]  # (type, state), e.g. ("CONSUMER", "RECONCILING")


def constant_name(name: str) -> str:
    """A broker's name for a type or state as Kafka's enum constant: ``PreparingRebalance`` ->
    ``PREPARING_REBALANCE``, ``share`` -> ``SHARE``."""
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", name).upper()


def _listed(wire: WireClient, address: tuple[str, int], types: list[str]) -> dict[str, Listing]:
    body = {"states_filter": [], "types_filter": types}
    answer = wire.call(address, ApiKey.LIST_GROUPS, LIST_GROUPS_VERSION, body)
    if answer["error_code"]:
        raise ConsoleError(
            f"cannot list groups at {address[0]}:{address[1]}: {ErrorCode(answer['error_code']).name}"
        )
    return {
        str(g["group_id"]): (constant_name(str(g["group_type"])), constant_name(str(g["group_state"])))
        for g in answer["groups"]
    }


def list_groups(wire: WireClient, types: list[str] | None = None) -> dict[str, Listing]:
    """Every group of ``types`` (None: all) -> its (type, state), from every broker (each answers for
    the groups it coordinates).

    Raises:
        ConsoleError: a broker did not answer, or refused.
    """
    found: dict[str, Listing] = {}
    for address in wire.brokers():
        found.update(_listed(wire, address, types or []))
    return found


def group_listing(wire: WireClient, group: str) -> Listing | None:
    """The group's (type, state) from its coordinator; None when the coordinator lists no such group."""
    return _listed(wire, wire.coordinator(group), []).get(group)
