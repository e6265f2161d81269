"""The simulation's clients: idempotent producers with acks=all, and readers, speaking the Kafka protocol.

Real client libraries cannot run on a simulated network, so the workload is written here on the
broker's own client connection (`BrokerConnection`) and record-batch codec, the way a Kafka client
behaves:

* `IdempotentProducer`: one per partition, with a producer id from InitProducerId, sends one batch at a
  time with acks=all and consecutive sequence numbers. A failed or unanswered request is retried with
  the same batch and sequence (against the leader that metadata names then), as librdkafka does with
  idempotence on, until it is acknowledged; the broker's producer state must turn a retry of a batch it
  already has into the original acknowledgement. Every acknowledgement is recorded with its offset.
* `read_partition`: the whole partition, from offset 0 up to the high watermark, from its leader.
* `Observer`: reads each partition's new records from its leader while the faults run (what a
  consumer saw: it must never disappear) and notes which broker led at which leader epoch.

Values name their producer and sequence (``p<partition>-<seq>``), so the checker can tell every record.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Iterable
from dataclasses import dataclass, field

from strom._util.clock import Clock
from strom.broker.network.net_client import BrokerConnection
from strom.broker.security.client import ClientSecurity
from strom.protocol.api import ApiKey
from strom.protocol.errors import ErrorCode
from strom.protocol.messages import (
    CreateTopicsRequestCreatableTopic,
    FetchRequest,
    FetchResponseAbortedTransaction,
    ProduceRequest,
    Records,
)
from strom.protocol.primitives import RecordsRegion
from strom.protocol.records.builder import build_batch, decode_batches
from strom.protocol.records.control import parse_marker

__all__ = ["Acked", "IdempotentProducer", "Observer", "Topology", "read_partition", "settle"]

TOPIC = "events"


@dataclass(frozen=True, slots=True)
class Acked:
    partition: int
    offset: int
    value: bytes


class Topology:
    """The clients' view of who leads what, refreshed from any broker that answers Metadata."""

    def __init__(
        self, bootstrap: list[tuple[str, int]], clock: Clock, rng: random.Random, topic: str = TOPIC
    ) -> None:
        self.topic = topic
        self._bootstrap = bootstrap
        self._clock = clock
        self._rng = rng
        self._connections: dict[tuple[str, int], BrokerConnection] = {}
        self.brokers: dict[int, tuple[str, int]] = {}
        self.leaders: dict[int, tuple[int, int]] = {}  # partition -> (leader id, leader epoch)
        self.in_sync: dict[int, bool] = {}  # partition -> every replica in the ISR
        self.replicas: dict[int, list[int]] = {}  # partition -> its replicas, as Metadata lists them
        self.controller_id = -1

    def connection(self, address: tuple[str, int]) -> BrokerConnection:
        conn = self._connections.get(address)
        if conn is None:
            conn = BrokerConnection(address[0], address[1], "sim-client", ClientSecurity(), self._clock, 2000)
            self._connections[address] = conn
        return conn

    async def refresh(self) -> bool:
        addresses = list(self._bootstrap) + [a for a in self.brokers.values() if a not in self._bootstrap]
        self._rng.shuffle(addresses)
        for address in addresses:
            try:
                answer = await self.connection(address).send(
                    ApiKey.METADATA,
                    8,
                    {
                        "topics": [{"name": self.topic}],
                        "allow_auto_topic_creation": False,
                        "include_cluster_authorized_operations": False,
                        "include_topic_authorized_operations": False,
                    },
                    2000,
                )
            except ConnectionError:
                continue
            self.brokers = {b["node_id"]: (b["host"], b["port"]) for b in answer["brokers"]}
            self.controller_id = answer["controller_id"]
            for topic in answer["topics"]:
                for p in topic["partitions"]:
                    self.in_sync[p["partition_index"]] = set(p["isr_nodes"]) == set(p["replica_nodes"])
                    self.replicas[p["partition_index"]] = list(p["replica_nodes"])
                    if p["error_code"] == 0 and p["leader_id"] >= 0:
                        self.leaders[p["partition_index"]] = (p["leader_id"], p["leader_epoch"])
                    else:
                        self.leaders.pop(p["partition_index"], None)
            return True
        return False

    def leader_address(self, partition: int) -> tuple[str, int] | None:
        leader = self.leaders.get(partition)
        return None if leader is None else self.brokers.get(leader[0])

    async def create_topic(
        self, partitions: int, replication_factor: int, min_isr: int, until_s: float = float("inf")
    ) -> bool:
        """Create this topology's topic (retrying through any broker); False if ``until_s`` came first."""
        loop = asyncio.get_running_loop()
        topic: CreateTopicsRequestCreatableTopic = {
            "name": self.topic,
            "num_partitions": partitions,
            "replication_factor": replication_factor,
            "assignments": [],
            "configs": [{"name": "min.insync.replicas", "value": str(min_isr)}],
        }
        while loop.time() < until_s:
            for address in self._bootstrap:
                try:
                    answer = await self.connection(address).send(
                        ApiKey.CREATE_TOPICS,
                        4,
                        {"topics": [topic], "timeout_ms": 30000, "validate_only": False},
                        30_000,
                    )
                except ConnectionError:
                    continue
                code = answer["topics"][0]["error_code"]
                if code in (0, ErrorCode.TOPIC_ALREADY_EXISTS):
                    return True
            await asyncio.sleep(0.5)
        return False

    def close(self) -> None:
        for conn in self._connections.values():
            conn.close()


@dataclass
class IdempotentProducer:
    topology: Topology
    partition: int
    batch_records: int
    acks: int = -1
    # Between batches: a steady load, not a flood the simulation must step through (see strom.sim.run).
    interval_s: float = 0.1
    acked: list[Acked] = field(default_factory=list)
    sent: int = 0  # records handed to a Produce request at least once
    producer_id: int = -1
    producer_epoch: int = 0
    errors: dict[str, int] = field(default_factory=dict)

    async def _init(self) -> None:
        while self.producer_id < 0:
            if not await self.topology.refresh():
                await asyncio.sleep(0.2)
                continue
            for address in list(self.topology.brokers.values()):
                try:
                    answer = await self.topology.connection(address).send(
                        ApiKey.INIT_PRODUCER_ID,
                        1,
                        {"transactional_id": None, "transaction_timeout_ms": 60000},
                        5000,
                    )
                except ConnectionError:
                    continue
                if answer["error_code"] == 0:
                    self.producer_id, self.producer_epoch = answer["producer_id"], answer["producer_epoch"]
                    return
            await asyncio.sleep(0.2)

    async def run(self, until_s: float) -> None:
        loop = asyncio.get_running_loop()
        await self._init()
        seq = 0
        while loop.time() < until_s:
            values = [b"p%d-%d" % (self.partition, seq + i) for i in range(self.batch_records)]
            self.sent = seq + len(values)
            base = await self._send(values, seq, until_s)
            if base is None:
                return  # the run ended with this batch unacknowledged: its records are in doubt
            self.acked.extend(Acked(self.partition, base + i, v) for i, v in enumerate(values))
            seq += len(values)
            await asyncio.sleep(self.interval_s)

    async def _send(self, values: list[bytes], seq: int, until_s: float) -> int | None:
        loop = asyncio.get_running_loop()
        while loop.time() < until_s:
            address = self.topology.leader_address(self.partition)
            if address is None:
                await self.topology.refresh()
                await asyncio.sleep(0.1)
                continue
            batch = build_batch(
                [(None, v, [], 0) for v in values],
                producer_id=self.producer_id,
                producer_epoch=self.producer_epoch,
                base_sequence=seq,
            )
            body: ProduceRequest = {
                "transactional_id": None,
                "acks": self.acks,
                "timeout_ms": 5000,
                "topic_data": [
                    {"name": TOPIC, "partition_data": [{"index": self.partition, "records": batch}]}
                ],
            }
            try:
                answer = await self.topology.connection(address).send(ApiKey.PRODUCE, 8, body, 8000)
            except ConnectionError:
                self._count("connection")
                await asyncio.sleep(0.1)  # librdkafka's reconnect back-off
                await self.topology.refresh()
                continue
            result = answer["responses"][0]["partition_responses"][0]
            code = result["error_code"]
            if code == 0:
                return int(result["base_offset"])
            self._count(ErrorCode(code).name)
            if code in (ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, ErrorCode.UNKNOWN_PRODUCER_ID):
                raise SequenceLost(self.partition, seq, ErrorCode(code).name)
            await self.topology.refresh()
            await asyncio.sleep(0.05)
        return None

    def _count(self, what: str) -> None:
        self.errors[what] = self.errors.get(what, 0) + 1


class SequenceLost(Exception):
    """The broker no longer knows the producer's sequence: acknowledged state of the producer was lost."""


async def settle(topology: Topology, partitions: int, end_s: float) -> bool:
    """Until every partition has a leader and all its replicas in sync (then its high watermark is its
    leader's log end: everything written is readable); False if ``end_s`` came first."""
    loop = asyncio.get_running_loop()
    while loop.time() < end_s:
        await topology.refresh()
        if all(p in topology.leaders and topology.in_sync.get(p) for p in range(partitions)):
            return True
        await asyncio.sleep(0.5)
    return False


async def read_partition(
    topology: Topology, partition: int, end_s: float, isolation_level: int = 0
) -> list[tuple[int, bytes]] | None:
    """Every record of ``partition`` below the high watermark, as (offset, value); None if no leader
    answered before ``end_s``. With ``isolation_level`` 1 (read_committed), the records of aborted
    transactions are left out, as a consumer leaves them out, and the read ends only once no
    transaction is open (the last stable offset is the high watermark)."""
    loop = asyncio.get_running_loop()
    records: list[tuple[int, bytes]] = []
    offset = 0
    while loop.time() < end_s:
        address = topology.leader_address(partition)
        if address is None:
            await topology.refresh()
            await asyncio.sleep(0.2)
            continue
        try:
            answer = await topology.connection(address).send(
                ApiKey.FETCH, 11, fetch_body(partition, offset, topology.topic, isolation_level), 5000
            )
        except ConnectionError:
            await topology.refresh()
            continue
        data = answer["responses"][0]["partitions"][0]
        if data["error_code"] != 0:
            await topology.refresh()
            await asyncio.sleep(0.1)
            continue
        got = list(_records(data["records"], data["aborted_transactions"] if isolation_level else None))
        records.extend((o, v) for o, v in got if o >= offset)
        if got:
            offset = max(offset, got[-1][0] + 1)
        if isolation_level:
            offset = max(offset, data["last_stable_offset"])  # past aborted batches and markers
            if data["last_stable_offset"] < data["high_watermark"]:
                await asyncio.sleep(0.5)  # an open transaction: wait for its end
                continue
        if offset >= data["high_watermark"]:
            return records
    return None


def fetch_body(partition: int, offset: int, topic: str = TOPIC, isolation_level: int = 0) -> FetchRequest:
    return {
        "replica_id": -1,
        "max_wait_ms": 0,
        "min_bytes": 0,
        "max_bytes": 1 << 20,
        "isolation_level": isolation_level,
        "session_id": 0,
        "session_epoch": -1,
        "topics": [
            {
                "topic": topic,
                "partitions": [
                    {
                        "partition": partition,
                        "current_leader_epoch": -1,
                        "fetch_offset": offset,
                        "log_start_offset": -1,
                        "partition_max_bytes": 1 << 20,
                    }
                ],
            }
        ],
        "forgotten_topics_data": [],
        "rack_id": "",
    }


def _records(
    buf: Records | None, aborted_transactions: list[FetchResponseAbortedTransaction] | None = None
) -> Iterable[tuple[int, bytes]]:
    """The data records in ``buf``; given the response's aborted transactions (read_committed), without
    theirs: a producer's transactional batches from an aborted transaction's first offset are skipped
    until its ABORT marker, as Kafka's consumer does."""
    if not buf:
        return
    if isinstance(buf, RecordsRegion):  # only a broker's own responses, before they are sent, hold one
        raise TypeError("a decoded response holds its records' bytes")
    pending = sorted((a["first_offset"], a["producer_id"]) for a in aborted_transactions or ())
    aborting: set[int] = set()
    for batch in decode_batches(buf):
        while pending and pending[0][0] <= batch.last_offset:
            aborting.add(pending.pop(0)[1])
        if batch.is_control:
            marker = parse_marker(batch.records[0].key, batch.records[0].value) if batch.records else None
            if marker is not None and not marker.is_commit:
                aborting.discard(batch.producer_id)
            continue
        if batch.is_transactional and batch.producer_id in aborting:
            continue
        for record in batch.records:
            yield record.offset, record.value or b""


@dataclass
class Observer:
    """Reads what a consumer would, while the faults run; notes leaders per epoch."""

    topology: Topology
    partitions: int
    seen: dict[int, dict[int, bytes]] = field(default_factory=dict)
    leaders_by_epoch: dict[tuple[int, int], set[int]] = field(default_factory=dict)

    async def run(self, until_s: float, period_s: float = 0.25) -> None:
        loop = asyncio.get_running_loop()
        next_offset = dict.fromkeys(range(self.partitions), 0)
        while loop.time() < until_s:
            await self.topology.refresh()
            for partition, (leader, epoch) in sorted(self.topology.leaders.items()):
                self.leaders_by_epoch.setdefault((partition, epoch), set()).add(leader)
                address = self.topology.brokers.get(leader)
                if address is None:
                    continue
                try:
                    body = fetch_body(partition, next_offset[partition])
                    answer = await self.topology.connection(address).send(ApiKey.FETCH, 11, body, 2000)
                except ConnectionError:
                    continue
                data = answer["responses"][0]["partitions"][0]
                if data["error_code"] != 0:
                    continue
                seen = self.seen.setdefault(partition, {})
                for offset, value in _records(data["records"]):
                    if offset < data["high_watermark"]:
                        seen.setdefault(offset, value)
                        next_offset[partition] = max(next_offset[partition], offset + 1)
            await asyncio.sleep(period_s)
