"""High watermarks of partitions this broker hosts no replica of, learned from their leaders for
``/metrics`` consumer lag.

A group's coordinator exports ``kafka_consumergroup_lag`` for every partition the group has committed
offsets on (kafka_exporter's series). For a partition it hosts, the high watermark is its replica's;
for any other it asks the partition's leader, as kafka_exporter does (ListOffsets latest,
read_uncommitted: the leader's high watermark, what `strom groups describe` shows).

Theory of operation. A scrape never waits on the network: `LeaderWatermarks.known` returns the last
values learned (each at most ``max_age_ms`` old; an older one, e.g. of a leader that stopped answering,
is dropped rather than served) and records which partitions the scrape wanted. The first scrape starts
one background task that refreshes the wanted partitions every ``refresh_ms``: one ListOffsets per
leader (all leaders at once), over the inter-broker client with the broker's own security. When no
scrape has come for ``idle_ms`` the task ends, closes its connections and forgets the values, so nothing
runs while no one scrapes; the next scrape starts it again and the partitions it learns appear from the
scrape after. The values a scrape serves are thus at most one refresh interval plus a round trip old. Ages,
intervals and the requests' time limit are on the broker's clock.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterable

from strom._util.clock import Clock, sleep_ms
from strom.broker.metadata_cache import ClusterMetadataStore
from strom.broker.network.net_client import BrokerConnection
from strom.broker.security.client import ClientSecurity
from strom.protocol.api import ApiKey
from strom.protocol.messages import ListOffsetsRequest, ListOffsetsResponse

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]

LIST_OFFSETS_VERSION = 2  # the first with isolation_level; read_uncommitted latest = high watermark
LATEST = -1
CONSUMER = -1  # replica_id: answered as to a client (a new leader still catching up says so)
REQUEST_TIMEOUT_MS = 5000


def by_leader(
    wanted: Iterable[TopicPartition], leader_of: Callable[[str, int], int | None]
) -> dict[int, dict[str, list[int]]]:
    """The wanted partitions grouped by the broker leading them, then by topic (a ListOffsets body
    per leader); partitions without a known leader are left out."""
    grouped: dict[int, dict[str, list[int]]] = {}
    for topic, index in sorted(set(wanted)):
        leader = leader_of(topic, index)
        if leader is not None:
            grouped.setdefault(leader, {}).setdefault(topic, []).append(index)
    return grouped


def list_offsets_body(topics: dict[str, list[int]]) -> ListOffsetsRequest:
    return {
        "replica_id": CONSUMER,
        "isolation_level": 0,
        "topics": [
            {"name": topic, "partitions": [{"partition_index": i, "timestamp": LATEST} for i in indexes]}
            for topic, indexes in sorted(topics.items())
        ],
    }


def answered_watermarks(response: ListOffsetsResponse) -> dict[TopicPartition, int]:
    """The high watermarks of a ListOffsets answer; partitions answered with an error (the broker no
    longer leads them, a new leader still catching up) are left out."""
    found: dict[TopicPartition, int] = {}
    for topic in response["topics"]:
        for part in topic["partitions"]:
            if int(part["error_code"]) == 0 and int(part["offset"]) >= 0:
                found[(str(topic["name"]), int(part["partition_index"]))] = int(part["offset"])
    return found


class LeaderWatermarks:
    def __init__(
        self,
        metadata: ClusterMetadataStore,
        client_id: str,
        security: ClientSecurity,
        clock: Clock,
        refresh_ms: int = 5000,
        idle_ms: int = 300_000,
        max_age_ms: int = 30_000,
    ) -> None:
        self._metadata = metadata
        self._client_id = client_id
        self._security = security
        self._refresh_ms = refresh_ms
        self._idle_ms = idle_ms
        self._max_age_ms = max_age_ms
        self._clock = clock
        self._wanted: frozenset[TopicPartition] = frozenset()
        self._wanted_at_ms = 0
        self._values: dict[TopicPartition, tuple[int, int]] = {}  # high watermark, when learned
        self._connections: dict[int, BrokerConnection] = {}
        self._task: asyncio.Task[None] | None = None
        self._failing: set[int] = set()  # leaders whose last answer failed: log a streak's first only

    def known(self, wanted: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """The last known high watermarks of ``wanted`` (no waiting), and a refresh of them in the
        background from now on. Called on the event loop by the scrape."""
        now = self._clock.monotonic_ms()
        self._wanted, self._wanted_at_ms = frozenset(wanted), now
        if self._wanted and (self._task is None or self._task.done()):
            self._task = asyncio.get_running_loop().create_task(self._run(), name="lag-watermarks")
        oldest = now - self._max_age_ms
        known: dict[TopicPartition, int] = {}
        for tp in self._wanted:
            entry = self._values.get(tp)
            if entry is not None and entry[1] >= oldest:
                known[tp] = entry[0]
        return known

    async def close(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._close_connections()

    async def _run(self) -> None:
        try:
            while self._wanted and self._clock.monotonic_ms() - self._wanted_at_ms < self._idle_ms:
                await self._refresh(self._wanted)
                await sleep_ms(self._clock, self._refresh_ms)
        finally:
            self._close_connections()
            self._values.clear()

    async def _refresh(self, wanted: frozenset[TopicPartition]) -> None:
        now = self._clock.monotonic_ms()
        plan = by_leader(wanted, self._leader_id)
        answers = await asyncio.gather(*(self._ask(leader, topics) for leader, topics in plan.items()))
        for found in answers:
            self._values.update({tp: (value, now) for tp, value in found.items()})
        for tp in [tp for tp in self._values if tp not in wanted]:
            del self._values[tp]

    def _leader_id(self, topic: str, index: int) -> int | None:
        leader = self._metadata.partition_leader(topic, index)
        return None if leader is None else leader.node_id

    async def _ask(self, leader: int, topics: dict[str, list[int]]) -> dict[TopicPartition, int]:
        broker = self._metadata.brokers.get(leader)
        if broker is None:
            return {}
        conn = self._connections.get(leader)
        if conn is None or (conn.host, conn.port) != (broker.host, broker.port):
            if conn is not None:
                conn.close()
            conn = self._connections[leader] = BrokerConnection(
                broker.host, broker.port, self._client_id, self._security, self._clock
            )
        try:
            response = await conn.send(
                ApiKey.LIST_OFFSETS, LIST_OFFSETS_VERSION, list_offsets_body(topics), REQUEST_TIMEOUT_MS
            )
            found = answered_watermarks(response)
        except (ConnectionError, LookupError, ValueError) as exc:
            if leader not in self._failing:
                log.info("consumer lag: ListOffsets to broker %d failed: %s", leader, exc)
            self._failing.add(leader)
            return {}
        self._failing.discard(leader)
        return found

    def _close_connections(self) -> None:
        for conn in self._connections.values():
            conn.close()
        self._connections.clear()
