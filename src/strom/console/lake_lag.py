"""The Iceberg translation lag of an Iceberg topic's partitions, for ``strom topics describe``.

Each partition's leader translates it, so the leader is the one to ask, the way Kafka asks a leader
about its partition's offsets: ListOffsets, sent to each leader, with Strom's ``ICEBERG_TABLE``
timestamp (-100, strom.broker.handlers.list_offsets) answers the next offset the partition's table
records and the wall time since which its oldest record not yet in the table has waited; the same
request with latest (-1) and read_committed answers the last stable offset. The lag is the difference,
in records, and the time since then, in seconds: what the leader's ``/metrics`` has as
``strom_iceberg_translation_lag_records`` and ``_seconds``. A leader that does not translate the
partition (yet) answers -1: the lag is then unknown.

No installed admin client sends a timestamp below Kafka's own (confluent-kafka and kafka-python refuse
-100), so the CLI's protocol client (strom.console.wire) asks, over PLAINTEXT or SSL; with a SASL
``--command-config`` the lag is left out of the lines (docs/cli.md).
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from strom.console.clients import ClientOptions
from strom.console.errors import ConsoleError
from strom.console.wire import WireClient, supported
from strom.protocol.api import ApiKey

ICEBERG_TABLE = -100  # as strom.broker.handlers.list_offsets answers it
LATEST = -1
READ_COMMITTED = 1
LIST_OFFSETS_VERSION = 7


@dataclass(frozen=True, slots=True)
class TranslationLag:
    next_offset: int  # the next offset the table records; -1: the leader does not translate it
    last_stable_offset: int
    waiting_since_ms: int  # -1: no record waits

    @property
    def records(self) -> int:
        return max(self.last_stable_offset - self.next_offset, 0)

    def fields(self, now_ms: int) -> str:
        """The tab-separated fields ``strom topics describe`` appends to the partition's line."""
        if self.next_offset < 0:
            return "\tIcebergLag: unknown (not translated yet)"
        waited = max(now_ms - self.waiting_since_ms, 0) / 1000 if self.waiting_since_ms >= 0 else 0.0
        seconds = waited if self.records else 0.0
        return f"\tInTable: {self.next_offset}\tIcebergLag: {self.records} records, {seconds:.1f} s"


def translation_lag(
    options: ClientOptions, partitions: Sequence[tuple[str, int]]
) -> dict[tuple[str, int], TranslationLag]:
    """Each (topic, partition)'s translation lag, from its leader; {} when the CLI's protocol client
    cannot connect with the given security settings (SASL).

    Raises:
        ConsoleError: no broker answered.
    """
    if not partitions or not supported(options):
        return {}
    topics = sorted({t for t, _ in partitions})
    with WireClient(options) as client:
        leaders, addresses = _leaders(client, topics)
        by_leader: defaultdict[int, list[tuple[str, int]]] = defaultdict(list)
        for tp in partitions:
            if leaders.get(tp, -1) in addresses:
                by_leader[leaders[tp]].append(tp)
        found: dict[tuple[str, int], TranslationLag] = {}
        for leader, led in sorted(by_leader.items()):
            table = _list(client, addresses[leader], led, ICEBERG_TABLE, 0)
            stable = _list(client, addresses[leader], led, LATEST, READ_COMMITTED)
            for tp in led:
                if tp in table and tp in stable:
                    found[tp] = TranslationLag(table[tp][0], stable[tp][0], table[tp][1])
    return found


def now_ms() -> int:
    return int(time.time() * 1000)


def _leaders(
    client: WireClient, topics: list[str]
) -> tuple[dict[tuple[str, int], int], dict[int, tuple[str, int]]]:
    """Each partition's leader and each broker's address, from Metadata at a bootstrap server."""
    answer = client.metadata(topics)
    addresses = {int(b["node_id"]): (str(b["host"]), int(b["port"])) for b in answer["brokers"]}
    leaders = {
        (str(t["name"]), int(p["partition_index"])): int(p["leader_id"])
        for t in answer["topics"]
        for p in t["partitions"]
    }
    return leaders, addresses


def _list(
    client: WireClient,
    address: tuple[str, int],
    partitions: list[tuple[str, int]],
    timestamp: int,
    level: int,
) -> dict[tuple[str, int], tuple[int, int]]:
    """(offset, timestamp) of each partition the leader at ``address`` answered without an error."""
    topics: defaultdict[str, list[int]] = defaultdict(list)
    for topic, index in partitions:
        topics[topic].append(index)
    body = {
        "replica_id": -1,
        "isolation_level": level,
        "topics": [
            {
                "name": topic,
                "partitions": [
                    {"partition_index": index, "current_leader_epoch": -1, "timestamp": timestamp}
                    for index in indexes
                ],
            }
            for topic, indexes in sorted(topics.items())
        ],
    }
    try:
        answer = client.call(address, ApiKey.LIST_OFFSETS, LIST_OFFSETS_VERSION, body)
    except ConsoleError:
        return {}  # a leader that does not answer: its partitions' lag is left out
    return {
        (str(t["name"]), int(p["partition_index"])): (int(p["offset"]), int(p["timestamp"]))
        for t in answer["topics"]
        for p in t["partitions"]
        if int(p["error_code"]) == 0
    }
