"""A partition's offsets from its leader, over the CLI's protocol client (strom.console.wire).

Only a partition's leader knows its log end offset, high watermark and last stable offset, so Kafka's
tools ask each leader with ListOffsets (``kafka-consumer-groups.sh`` for a group's lag); a group's
coordinator, which may not host the partition at all, is not the one to ask. `leaders` reads every
partition's leader and every broker's address from Metadata at a bootstrap server, `by_leader` groups
partitions by leader, and `high_watermarks` sends one ListOffsets per leader for the partitions it
leads (built and read as the Iceberg lag's, strom.broker.lake.lag) and keeps the answers without an
error; a leader that does not answer leaves its partitions out (the caller shows them as unknown).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

from strom.broker.lake.lag import (
    LATEST,
    LIST_OFFSETS_VERSION,
    READ_UNCOMMITTED,
    list_offsets_body,
    offsets_answered,
)
from strom.console.errors import ConsoleError
from strom.console.wire import WireClient
from strom.protocol.api import ApiKey

TopicPartition = tuple[str, int]
Address = tuple[str, int]


def leaders(
    client: WireClient, topics: Iterable[str]
) -> tuple[dict[TopicPartition, int], dict[int, Address]]:
    """Each partition's leader (-1: none) and each broker's address, from Metadata at a bootstrap
    server.

    Raises:
        ConsoleError: no bootstrap server answered.
    """
    answer = client.metadata(sorted(set(topics)))
    addresses = {int(b["node_id"]): (str(b["host"]), int(b["port"])) for b in answer["brokers"]}
    led = {
        (str(t["name"]), int(p["partition_index"])): int(p["leader_id"])
        for t in answer["topics"]
        for p in t["partitions"]
    }
    return led, addresses


def by_leader(
    client: WireClient, partitions: Iterable[TopicPartition]
) -> dict[Address, list[TopicPartition]]:
    """The partitions grouped by their leader's address; those without a known leader are left out."""
    wanted = sorted(set(partitions))
    led, addresses = leaders(client, {t for t, _ in wanted})
    grouped: defaultdict[Address, list[TopicPartition]] = defaultdict(list)
    for tp in wanted:
        if led.get(tp, -1) in addresses:
            grouped[addresses[led[tp]]].append(tp)
    return dict(sorted(grouped.items()))


def high_watermarks(client: WireClient, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
    """Each partition's high watermark (latest, read_uncommitted), from its leader; the partitions
    whose leader is unknown or did not answer are left out."""
    found: dict[TopicPartition, int] = {}
    for address, led in by_leader(client, partitions).items():
        body = list_offsets_body(led, LATEST, READ_UNCOMMITTED)
        try:
            answer = client.call(address, ApiKey.LIST_OFFSETS, LIST_OFFSETS_VERSION, body)
        except ConsoleError:
            continue  # a leader that does not answer: its partitions stay unknown
        found.update({tp: offset for tp, (offset, _) in offsets_answered(answer).items()})
    return found
