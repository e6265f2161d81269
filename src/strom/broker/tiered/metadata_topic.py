"""`RemoteLogMetadataManager`: ``__remote_log_metadata``, where leaders record their remote segments
(Kafka's ``TopicBasedRemoteLogMetadataManager``).

Theory of operation. Every event of a tiered partition ``<topic>-<partition>`` (segment_metadata.py's
records, keyed by that name) goes to one metadata partition, ``crc32(key) % partitions``, so its events
stay in order. The topic is created on first use (``rlmm.config.remote.log.metadata.topic.num.partitions``,
default 50, and ``...replication.factor``, default 3, capped at the live brokers; retention unlimited,
as Kafka's). `publish` appends one record as an acks=all write: as the metadata partition's leader
through the replica manager, or as a Produce (acks=-1) to the leader the metadata cache names; it
returns once the record is committed, so what a leader records survives its own crash. `load` builds
a partition's `RemotePartitionMetadata` by reading its metadata partition from the start up to the
high watermark: from the local replica when this broker hosts one, else as a consumer fetching from
the leader; a partition loaded before keeps its one state, which absorbs the reload (a lagging replica
must not make a finished copy look unfinished, strom.tiered.metadata_cache). A new leader of a tiered
partition loads it before it copies anything, and so carries on where the last leader stopped. The
manager then keeps each loaded state up to date with what it publishes itself (a partition has one
leader, the only writer of its events).

Call only from the broker's event loop.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Mapping

from strom._util.clock import Clock
from strom.broker.control.topic_admin import TopicAdmin
from strom.broker.coordinators.coordinator_partitions import CoordinatorPartitions
from strom.broker.metadata_cache import ClusterMetadataStore
from strom.broker.network.net_client import BrokerConnection
from strom.broker.security.client import ClientSecurity
from strom.broker.tiered.config_defs import METADATA_TOPIC, TOPIC_PARTITIONS, TOPIC_REPLICATION_FACTOR
from strom.protocol.api import ApiKey
from strom.protocol.codec import RecordsRegion
from strom.protocol.errors import ErrorCode, KafkaError
from strom.protocol.messages import FetchRequest, ProduceRequest
from strom.protocol.records.builder import build_batch, decode_batches
from strom.tiered.metadata_cache import RemotePartitionMetadata
from strom.tiered.segment_metadata import (
    CorruptMetadataRecordError,
    RemoteLogSegmentMetadata,
    decode,
    metadata_partition,
)

log = logging.getLogger(__name__)

PRODUCE_VERSION = 8
FETCH_VERSION = 4
READ_CHUNK_BYTES = 1 << 20
WRITE_TIMEOUT_MS = 30_000


class RemoteLogMetadataManager:
    def __init__(
        self,
        settings: Mapping[str, str],
        partitions: CoordinatorPartitions,
        topics: TopicAdmin,
        metadata: ClusterMetadataStore,
        security: ClientSecurity,
        clock: Clock,
    ) -> None:
        self.num_partitions = int(settings.get(TOPIC_PARTITIONS, "50"))
        self.replication_factor = int(settings.get(TOPIC_REPLICATION_FACTOR, "3"))
        self._partitions = partitions
        self._topics = topics
        self._metadata = metadata
        self._security = security
        self._clock = clock
        self._connections: dict[tuple[str, int], BrokerConnection] = {}
        self.loaded: dict[tuple[str, int], RemotePartitionMetadata] = {}

    def metadata_partition(self, topic: str, partition: int) -> int:
        return metadata_partition(topic, partition, self.num_partitions)

    def ensure_topic(self) -> None:
        self._topics.ensure_internal_topic(
            METADATA_TOPIC, self.num_partitions, self.replication_factor, {"retention.ms": "-1"}
        )

    async def publish(self, metadata: RemoteLogSegmentMetadata) -> None:
        """Record ``metadata`` durably (acks=all); raises KafkaError or ConnectionError if it is not."""
        self.ensure_topic()
        key, value = metadata.encode()
        batch = build_batch([(key, value, (), self._clock.time_ms())])
        target = self.metadata_partition(metadata.topic, metadata.partition)
        if self._partitions.is_leader(METADATA_TOPIC, target):
            end = self._partitions.append(METADATA_TOPIC, target, batch, False)
            code = await self._partitions.wait_committed(METADATA_TOPIC, target, end, WRITE_TIMEOUT_MS)
        else:
            code = await self._produce(target, batch)
        if code is not ErrorCode.NONE:
            raise KafkaError(code, f"{METADATA_TOPIC}-{target}: recording {metadata.state.name} failed")
        state = self.loaded.get((metadata.topic, metadata.partition))
        if state is not None:
            state.apply(metadata)

    async def _produce(self, target: int, batch: bytes) -> ErrorCode:
        conn = self._connection(target)
        if conn is None:
            return ErrorCode.LEADER_NOT_AVAILABLE
        body: ProduceRequest = {
            "transactional_id": None,
            "acks": -1,
            "timeout_ms": WRITE_TIMEOUT_MS,
            "topic_data": [{"name": METADATA_TOPIC, "partition_data": [{"index": target, "records": batch}]}],
        }
        response = await conn.send(ApiKey.PRODUCE, PRODUCE_VERSION, body, timeout_ms=WRITE_TIMEOUT_MS + 5_000)
        return ErrorCode(int(response["responses"][0]["partition_responses"][0]["error_code"]))

    def _connection(self, target: int) -> BrokerConnection | None:
        leader = self._metadata.partition_leader(METADATA_TOPIC, target)
        if leader is None:
            return None
        key = (leader.host, leader.port)
        conn = self._connections.get(key)
        if conn is None:
            conn = self._connections[key] = BrokerConnection(
                leader.host, leader.port, "strom-remote-log-metadata", self._security, self._clock
            )
        return conn

    async def load(
        self, topic: str, topic_id: str, partition: int, from_leader: bool = False
    ) -> RemotePartitionMetadata:
        """The partition's remote segments, read from its metadata partition (kept up to date after).

        Records of an earlier topic of the same name (another topic id) are skipped. ``from_leader``:
        read the metadata partition's leader even where this broker hosts a follower of it, which may
        lag (a broker that has just joined, for one).
        """
        self.ensure_topic()
        target = self.metadata_partition(topic, partition)
        wanted = f"{topic}-{partition}".encode()
        state = RemotePartitionMetadata(topic_id)
        async for value in self._values(target, wanted, from_leader):
            try:
                metadata = decode(value)
            except CorruptMetadataRecordError as exc:
                log.error("%s-%d: skipping a remote log metadata record: %s", METADATA_TOPIC, target, exc)
                continue
            if metadata.topic_id == topic_id:
                state.apply(metadata)
        known = self.loaded.get((topic, partition))
        if known is not None and known.topic_id == topic_id:
            # The replica read may lag behind what this broker published: knowledge only grows.
            known.absorb(state)
            return known
        self.loaded[(topic, partition)] = state
        return state

    def forget(self, topic: str, partition: int) -> None:
        self.loaded.pop((topic, partition), None)

    async def _values(self, target: int, wanted: bytes, from_leader: bool) -> AsyncIterator[bytes]:
        """The values of ``wanted``'s committed records in the metadata partition, in order."""
        local = self._partitions.replica(METADATA_TOPIC, target) is not None and (
            not from_leader or self._partitions.is_leader(METADATA_TOPIC, target)
        )
        offset = 0
        while True:
            chunk, next_offset, end = await self._read(target, offset, local)
            for record_offset, key, value in chunk:
                if record_offset >= offset and key == wanted and value is not None:
                    yield value
            if next_offset >= end or next_offset == offset:
                return
            offset = next_offset

    async def _read(
        self, target: int, offset: int, local: bool
    ) -> tuple[list[tuple[int, bytes | None, bytes | None]], int, int]:
        """Records from ``offset``: (records, next offset, the high watermark to read up to), from this
        broker's replica (``local``) or its leader."""
        if local:
            start = self._partitions.log_start_offset(METADATA_TOPIC, target)
            offset = max(offset, start)
            end = self._partitions.high_watermark(METADATA_TOPIC, target)
            if offset >= end:
                return [], offset, end
            data = self._partitions.read(METADATA_TOPIC, target, offset, READ_CHUNK_BYTES, end)
        else:
            data, end = await self._fetch(target, offset)
        batches = decode_batches(data) if data else []
        records = [(r.offset, r.key, r.value) for b in batches if not b.is_control for r in b.records]
        return records, (batches[-1].next_offset if batches else offset), end

    async def _fetch(self, target: int, offset: int) -> tuple[bytes, int]:
        conn = self._connection(target)
        if conn is None:
            raise KafkaError(ErrorCode.LEADER_NOT_AVAILABLE, f"{METADATA_TOPIC}-{target} has no leader")
        body: FetchRequest = {
            "replica_id": -1,
            "max_wait_ms": 0,
            "min_bytes": 0,
            "max_bytes": READ_CHUNK_BYTES,
            "isolation_level": 0,
            "topics": [
                {
                    "topic": METADATA_TOPIC,
                    "partitions": [
                        {"partition": target, "fetch_offset": offset, "partition_max_bytes": READ_CHUNK_BYTES}
                    ],
                }
            ],
        }
        response = await conn.send(ApiKey.FETCH, FETCH_VERSION, body, timeout_ms=WRITE_TIMEOUT_MS)
        part = response["responses"][0]["partitions"][0]
        code = ErrorCode(int(part["error_code"]))
        if code is ErrorCode.OFFSET_OUT_OF_RANGE:
            return b"", offset
        records = part["records"]
        if code is not ErrorCode.NONE or isinstance(records, RecordsRegion):
            raise KafkaError(code, f"reading {METADATA_TOPIC}-{target} failed")
        return bytes(records or b""), int(part["high_watermark"])

    def close(self) -> None:
        for conn in self._connections.values():
            conn.close()
        self._connections.clear()
