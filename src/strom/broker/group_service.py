"""Glue between the broker and the group coordinator: `__consumer_offsets`, timers, start-up replay.

The coordinator (`strom.coordinator`) is sans-I/O; this module gives it

* a `PartitionWriter` over the `__consumer_offsets` partition logs: each call becomes one uncompressed
  record batch (keys and values laid out as documented in `strom.coordinator.records`), appended as
  leader through the replica manager;
* a `Scheduler` on the broker's clock (`Clock.call_later`);
* the records of a `__consumer_offsets` partition, replayed in offset order when this broker becomes its
  leader (on a single node, at start-up: the local control plane makes it leader of every partition),
  so committed offsets and group membership survive restarts;
* a periodic task expiring offsets after `offsets.retention.minutes`.

Durability (Kafka's coordinator appends with acks=-1): the writer appends as leader and
remembers, per `__consumer_offsets` partition, the end offset of the latest coordinator append; the
OffsetCommit and SyncGroup handlers then `wait_for_replication`, which parks in the same purgatory as an
acks=all produce (`ReplicaManager.wait_for_replication`) until the high watermark passes that offset, for
at most `offsets.commit.timeout.ms`. Failures map as Kafka's `GroupMetadataManager` maps them:
NOT_LEADER_OR_FOLLOWER -> NOT_COORDINATOR; NOT_ENOUGH_REPLICAS(_AFTER_APPEND), REQUEST_TIMED_OUT ->
COORDINATOR_NOT_AVAILABLE. (Memory is updated at the append, before the ISR has it: an OffsetFetch may see
a commit whose answer is still pending; if leadership moves, the partition's groups are unloaded anyway.)

Leadership moves: becoming leader of a `__consumer_offsets` partition loads its groups from
the log, replacing what memory held; losing it (LeaderAndIsr as follower, or StopReplica) unloads them, so
a former coordinator neither answers for nor keeps timers on groups it no longer owns.

`__consumer_offsets` is created on first use (the first group request or commit) with
`offsets.topic.num.partitions` partitions, `cleanup.policy=compact` and
``min(offsets.topic.replication.factor, live brokers)`` replicas (so 1 on a single node). A group lives in
partition ``abs(java_hash(group_id)) % partitions``; the coordinator of a group is the leader of that
partition (FindCoordinator answers with that leader from the metadata cache), a broker loads a
partition's groups when it becomes its leader, and coordinator writes go through the replica manager
(leader epoch, replicated high watermark).

Call only from the broker's event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterator, Sequence
from typing import TypeVar

from strom._util.clock import Clock, sleep_ms
from strom.broker.config import BrokerConfig
from strom.broker.metadata_cache import ClusterMetadataStore
from strom.broker.partition import Partition
from strom.broker.replica_manager import ReplicaManager
from strom.broker.topic_admin import TopicAdmin
from strom.coordinator import (
    GroupConfig,
    GroupCoordinator,
    JoinGroupRequest,
    JoinResult,
    SyncGroupRequest,
    SyncResult,
    partition_for,
)
from strom.coordinator.ports import Cancellable
from strom.protocol.errors import ErrorCode, KafkaError
from strom.protocol.records.builder import RecordValidationError, build_batch, decode_batches

log = logging.getLogger(__name__)

T = TypeVar("T")

OFFSETS_TOPIC = "__consumer_offsets"
OFFSETS_TOPIC_SEGMENT_BYTES = 100 * 1024 * 1024  # Kafka's offsets.topic.segment.bytes
OFFSETS_RETENTION_CHECK_INTERVAL_MS = 600_000  # Kafka's offsets.retention.check.interval.ms
_READ_CHUNK_BYTES = 1 << 20
# How a failed replication wait reaches clients (Kafka's GroupMetadataManager.storeOffsets).
_COORDINATOR_ERRORS = {
    ErrorCode.NOT_LEADER_OR_FOLLOWER: ErrorCode.NOT_COORDINATOR,
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_ENOUGH_REPLICAS: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.REQUEST_TIMED_OUT: ErrorCode.COORDINATOR_NOT_AVAILABLE,
}


class ClockScheduler:
    """`Scheduler` on the broker's clock; a failing timer callback is logged, not fatal."""

    def __init__(self, clock: Clock) -> None:
        self._clock = clock

    def call_later(self, delay_ms: int, callback: Callable[[], None]) -> Cancellable:
        def run() -> None:
            try:
                callback()
            except Exception:
                log.exception("group coordinator timer failed")

        return self._clock.call_later(delay_ms, run)


class OffsetsTopicWriter:
    """`PartitionWriter` appending coordinator records to `__consumer_offsets` as leader."""

    def __init__(self, service: GroupService) -> None:
        self._service = service

    def append(self, partition: int, records: Sequence[tuple[bytes, bytes | None]]) -> None:
        service = self._service
        service.ensure_offsets_topic()
        now = service.clock.time_ms()
        batch = build_batch([(key, value, (), now) for key, value in records])
        rm = service.replica_manager
        try:
            part = rm.leader_partition(OFFSETS_TOPIC, partition)
            info = rm.append_as_leader(part, batch)
        except KafkaError as exc:
            if exc.code is ErrorCode.NOT_LEADER_OR_FOLLOWER:
                raise KafkaError(ErrorCode.NOT_COORDINATOR, exc.message) from exc
            raise
        except OSError as exc:
            raise KafkaError(ErrorCode.KAFKA_STORAGE_ERROR, str(exc)) from exc
        service.appended_end[partition] = info.last_offset + 1


def group_config(config: BrokerConfig) -> GroupConfig:
    get = config.get
    return GroupConfig(
        initial_rebalance_delay_ms=int(get("group.initial.rebalance.delay.ms")),
        min_session_timeout_ms=int(get("group.min.session.timeout.ms")),
        max_session_timeout_ms=int(get("group.max.session.timeout.ms")),
        offsets_retention_ms=int(get("offsets.retention.minutes")) * 60_000,
    )


class GroupService:
    def __init__(
        self,
        config: BrokerConfig,
        clock: Clock,
        replica_manager: ReplicaManager,
        metadata: ClusterMetadataStore,
        topics: TopicAdmin,
    ) -> None:
        self.clock = clock
        self.replica_manager = replica_manager
        self._metadata = metadata
        self._topics = topics
        self.num_partitions = int(config.get("offsets.topic.num.partitions"))
        self._replication_factor = int(config.get("offsets.topic.replication.factor"))
        self.coordinator = GroupCoordinator(
            group_config(config),
            clock,
            ClockScheduler(clock),
            OffsetsTopicWriter(self),
            self.num_partitions,
        )
        self._expiry_task: asyncio.Task[None] | None = None
        self.commit_timeout_ms = int(config.get("offsets.commit.timeout.ms"))
        # Partition -> end offset of the latest coordinator append (what a reply waits for).
        self.appended_end: dict[int, int] = {}
        replica_manager.on_leadership_change.append(self._on_leadership_change)

    # --- life cycle ----------------------------------------------------------------------------
    def start(self) -> None:
        """Start offset expiry (groups load as this broker becomes leader of their partitions)."""
        self._expiry_task = asyncio.create_task(self._expire_periodically())

    async def stop(self) -> None:
        self.coordinator.shutdown()
        if self._expiry_task is not None:
            self._expiry_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._expiry_task
            self._expiry_task = None

    async def _expire_periodically(self) -> None:
        while True:
            await sleep_ms(self.clock, OFFSETS_RETENTION_CHECK_INTERVAL_MS)
            try:
                removed = self.coordinator.expire_offsets()
            except Exception:
                log.exception("offset expiry failed")
                continue
            if removed:
                log.info("expired %d committed offset(s)", removed)

    def _on_leadership_change(self, partition: Partition, is_leader: bool) -> None:
        if partition.topic != OFFSETS_TOPIC:
            return
        self.appended_end.pop(partition.index, None)
        if not is_leader:
            self.coordinator.unload_partition(partition.index)
            return
        plog = partition.log
        info = self._metadata.topics.get(OFFSETS_TOPIC)
        if info is not None:
            self.num_partitions = info.partitions
            self.coordinator.store.num_partitions = info.partitions
        self.coordinator.load_partition(
            partition.index,
            _read_partition(plog.read, plog.log_start_offset, plog.log_end_offset, partition.index),
        )

    async def wait_for_replication(self, group_id: str) -> ErrorCode:
        """Until the ISR has every coordinator record appended so far to the group's partition (acks=-1,
        as Kafka's coordinator writes; immediate when the ISR is this broker alone)."""
        rm = self.replica_manager
        index = self.coordinator.partition_for(group_id)
        required = self.appended_end.get(index)
        if required is None:
            return ErrorCode.NONE
        part = rm.partitions.get((OFFSETS_TOPIC, index))
        if part is None:
            return ErrorCode.NOT_COORDINATOR
        code = await rm.wait_for_replication(part, required, self.commit_timeout_ms)
        if code is not ErrorCode.NONE:
            log.warning(
                "%s-%d: coordinator records up to offset %d not replicated: %s",
                OFFSETS_TOPIC,
                index,
                required,
                code.name,
            )
        return _COORDINATOR_ERRORS.get(code, code)

    def coordinator_endpoint(self, group_id: str) -> tuple[int, str, int] | None:
        """(node id, host, port) of the leader of the group's partition, if known."""
        cache = self._metadata
        info = cache.topics.get(OFFSETS_TOPIC)
        if info is None:
            return None
        meta = cache.partitions.get((OFFSETS_TOPIC, partition_for(group_id, info.partitions)))
        if meta is None or meta.leader not in cache.brokers:
            return None
        leader = cache.brokers[meta.leader]
        return leader.node_id, leader.host, leader.port

    def ensure_topic(self) -> None:
        """Create `__consumer_offsets` if it does not exist yet (first use)."""
        self.ensure_offsets_topic()

    def ensure_offsets_topic(self) -> None:
        """Create `__consumer_offsets` if it does not exist yet (first use)."""
        if OFFSETS_TOPIC in self._metadata.topics:
            return
        configs = {"cleanup.policy": "compact", "segment.bytes": str(OFFSETS_TOPIC_SEGMENT_BYTES)}
        try:
            rf = max(1, min(self._replication_factor, len(self._metadata.brokers)))
            self._topics.create_topic(OFFSETS_TOPIC, self.num_partitions, rf, configs)
        except KafkaError as exc:
            if exc.code is not ErrorCode.TOPIC_ALREADY_EXISTS:
                raise
        log.info("created %s with %d partitions", OFFSETS_TOPIC, self.num_partitions)

    # --- requests ------------------------------------------------------------------------------
    def is_coordinator(self, group_id: str) -> bool:
        """Whether this broker leads the group's `__consumer_offsets` partition (before that topic
        exists, any broker may answer: the first group request creates it)."""
        rm = self.replica_manager
        info = self._metadata.topics.get(OFFSETS_TOPIC)
        if info is None:
            return True
        part = rm.partitions.get((OFFSETS_TOPIC, partition_for(group_id, info.partitions)))
        return part is not None and part.leader_id == rm.node_id

    async def join_group(self, req: JoinGroupRequest) -> JoinResult:
        fut: asyncio.Future[JoinResult] = asyncio.get_running_loop().create_future()
        self.coordinator.join_group(req, _resolver(fut))
        return await fut

    async def sync_group(self, req: SyncGroupRequest) -> SyncResult:
        fut: asyncio.Future[SyncResult] = asyncio.get_running_loop().create_future()
        self.coordinator.sync_group(req, _resolver(fut))
        return await fut


def _resolver(fut: asyncio.Future[T]) -> Callable[[T], None]:
    def resolve(result: T) -> None:
        # The waiting handler may be gone (connection closed, broker stopping): nothing to answer.
        if not fut.done():
            fut.set_result(result)

    return resolve


def _read_partition(
    read: Callable[..., bytes], start: int, end: int, partition: int
) -> Iterator[tuple[bytes | None, bytes | None]]:
    offset = start
    while offset < end:
        data = read(offset, _READ_CHUNK_BYTES, end, True)
        if not data:
            return
        try:
            batches = decode_batches(data)
        except RecordValidationError as exc:
            log.error(
                "%s-%d: unreadable batch at offset %d (%s); stopping its replay there",
                OFFSETS_TOPIC,
                partition,
                offset,
                exc,
            )
            return
        if not batches:
            return
        for batch in batches:
            for record in batch.records:
                if record.offset >= offset:
                    yield record.key, record.value
        offset = batches[-1].next_offset
