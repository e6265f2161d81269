"""The group coordinator on the coordinator runtime: ``__consumer_offsets``, its shards, timers.

The coordinator (`strom.coordinator`) is sans-I/O; this module gives it

* a `CoordinatorRuntime` (`strom.coordinator_runtime`) over ``__consumer_offsets``: when this broker
  becomes leader of a partition (on a single node, at start-up: its in-process controller makes it
  leader of every partition) the runtime loads it into a `GroupShard`, so committed offsets and group
  membership survive restarts; requests for its groups get COORDINATOR_LOAD_IN_PROGRESS meanwhile.
  Losing leadership (LeaderAndIsr as follower, or StopReplica) unloads the shard: its groups are
  forgotten, so a former coordinator neither answers for nor keeps timers on groups it no longer owns;
* the coordinator's `PartitionWriter`: the classic group coordinator applies its own changes as it
  writes them (it is called back from parked joins and its session timers), so it is an *inline
  writer* of the runtime: each call becomes one uncompressed batch (keys and values laid out as
  documented in `strom.coordinator.records`) appended at once through `CoordinatorRuntime.append`;
* a `Scheduler` on the broker's clock (`Clock.call_later`) for membership timers;
* a runtime timer per shard expiring its groups' offsets after `offsets.retention.minutes` (checked
  every `offsets.retention.check.interval.ms`, Kafka's default).

Durability (Kafka's coordinator appends with acks=-1): the OffsetCommit and SyncGroup handlers
`wait_for_replication` after the coordinator wrote, which waits (`CoordinatorRuntime.wait_committed`)
until the high watermark passes the last write to the group's partition, for at most
`offsets.commit.timeout.ms`. Failures map as Kafka's `GroupMetadataManager` maps them:
NOT_LEADER_OR_FOLLOWER -> NOT_COORDINATOR; NOT_ENOUGH_REPLICAS(_AFTER_APPEND), REQUEST_TIMED_OUT ->
COORDINATOR_NOT_AVAILABLE. (Memory is updated at the append, before the ISR has it: an OffsetFetch may see
a commit whose answer is still pending; if leadership moves, the partition's groups are unloaded anyway.)

Transactional offsets (TxnOffsetCommit, KIP-98): `commit_txn_offsets` appends them as a transactional
batch of the producer (sequence numbers unchecked, as for Kafka's coordinator appends) and the shard
holds them pending per producer id; the transaction coordinator's marker on that partition
(`on_txn_marker`) commits them into the group's offsets or drops them. Loading a partition applies a
transaction's records at its COMMIT marker, never those of an aborted one, and keeps those of open
ones pending.

Consumer groups (KIP-848) live in the same shards: each `GroupShard` hands the consumer-group records of
its partition (key versions 3-8) to its `ConsumerGroupShard` (consumer_group_shard.py), which rebuilds
those groups by replay and keeps their session timers. A commit to such a group is checked by member
epoch (`GroupCoordinator.consumer_commit_check`); while it has members, the classic APIs for its id are
served by it (group_migration.py, online migration); once it is empty, a JoinGroup converts it to a
classic group (its group records get tombstones, its committed offsets stay), the offline downgrade
of KIP-848. When its members convert it back online, `after_downgrade` starts the classic rebalance.

`__consumer_offsets` is created on first use (the first group request or commit) with
`offsets.topic.num.partitions` partitions, `cleanup.policy=compact` and
``min(offsets.topic.replication.factor, live brokers)`` replicas (so 1 on a single node). A group lives in
partition ``abs(java_hash(group_id)) % partitions``; the coordinator of a group is the leader of that
partition (FindCoordinator answers with that leader from the metadata cache).

Call only from the broker's event loop.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from typing import TypeVar

from strom._util.clock import Clock
from strom.broker.config import BrokerConfig
from strom.broker.control.topic_admin import TopicAdmin
from strom.broker.coordinators.consumer_group_shard import ConsumerGroupShard, consumer_group_config
from strom.broker.coordinators.coordinator_partitions import CoordinatorPartitions
from strom.broker.coordinators.share_group_shard import ShareGroupShard, share_group_config
from strom.broker.metadata_cache import ClusterMetadataStore
from strom.coordinator import (
    GroupConfig,
    GroupCoordinator,
    JoinGroupRequest,
    JoinResult,
    OffsetAndMetadata,
    SyncGroupRequest,
    SyncResult,
    TopicPartition,
    partition_for,
)
from strom.coordinator.consumer.heartbeat import group_tombstones
from strom.coordinator.consumer.model import ConsumerGroup, commit_error
from strom.coordinator.consumer.records import CONSUMER_KEY_VERSIONS, key_version
from strom.coordinator.messages import ListedGroup
from strom.coordinator.ports import Cancellable
from strom.coordinator.records import (
    OffsetCommitKey,
    OffsetCommitValue,
    RecordFormatError,
    decode_key,
    encode_key,
    encode_value,
)
from strom.coordinator.share.records import SHARE_KEY_VERSIONS
from strom.coordinator_runtime import (
    NO_PRODUCER_ID,
    CoordinatorError,
    CoordinatorResult,
    CoordinatorRuntime,
    Record,
    ShardContext,
    TransactionalProducer,
)
from strom.protocol.errors import ErrorCode, KafkaError

log = logging.getLogger(__name__)

T = TypeVar("T")

OFFSETS_TOPIC = "__consumer_offsets"
CONSUMER_PROTOCOL_TYPE = "consumer"  # what ListGroups says of a consumer group (KIP-848), as Kafka does
CONSUMER_GROUP_TYPE = "consumer"
OFFSETS_TOPIC_SEGMENT_BYTES = 100 * 1024 * 1024  # Kafka's offsets.topic.segment.bytes
OFFSETS_RETENTION_CHECK_INTERVAL_MS = 600_000  # Kafka's offsets.retention.check.interval.ms
EXPIRE_TIMER = "expire-offsets"
# How a failed write or replication wait reaches clients (Kafka's GroupMetadataManager.storeOffsets).
_COORDINATOR_ERRORS = {
    ErrorCode.NOT_LEADER_OR_FOLLOWER: ErrorCode.NOT_COORDINATOR,
    ErrorCode.NOT_COORDINATOR: ErrorCode.NOT_COORDINATOR,
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
    """`PartitionWriter` of the group coordinator: an inline writer of the runtime."""

    def __init__(self, service: GroupService) -> None:
        self._service = service

    def append(self, partition: int, records: Sequence[tuple[bytes, bytes | None]]) -> None:
        service = self._service
        service.ensure_offsets_topic()
        try:
            service.runtime.append(partition, records)
        except CoordinatorError as exc:
            raise KafkaError(exc.code, str(exc)) from exc


class GroupShard:
    """One ``__consumer_offsets`` partition's share of the coordinator: the groups that hash to it,
    replayed into the shared `GroupCoordinator`, and the transactional offsets awaiting a marker."""

    def __init__(self, service: GroupService, context: ShardContext) -> None:
        self._service = service
        self.context = context
        self.index = context.partition
        # Producer id -> offset records of that producer's open transaction (TxnOffsetCommit).
        self.pending_txn_offsets: dict[int, list[Record]] = {}
        # The partition's consumer groups (KIP-848): their records are replayed there.
        self.consumer = ConsumerGroupShard(
            context,
            service.consumer_config,
            service.topic_partitions,
            service.after_downgrade,
            service.replica_racks,
        )
        self.consumer.session_timeout_of = service.consumer_session_timeout_of
        self.share = ShareGroupShard(
            context, service.share_config, service.topic_partitions, service.share_session_timeout_of
        )

    def replay(
        self, offset: int, producer_id: int, producer_epoch: int, key: bytes | None, value: bytes | None
    ) -> None:
        if producer_id != NO_PRODUCER_ID:
            self.pending_txn_offsets.setdefault(producer_id, []).append((key, value))
            return
        if key is not None and key_version(key) in CONSUMER_KEY_VERSIONS:
            self.consumer.replay(key, value)
            return
        if key is not None and key_version(key) in SHARE_KEY_VERSIONS:
            self.share.replay(key, value)
            return
        service = self._service
        service.coordinator.store.replay(key, value, service.clock.monotonic_ms())

    def replay_end_transaction(self, producer_id: int, producer_epoch: int, commit: bool) -> None:
        held = self.pending_txn_offsets.pop(producer_id, [])
        if commit:
            now = self._service.clock.monotonic_ms()
            for key, value in held:
                self._service.coordinator.store.replay(key, value, now)

    def on_loaded(self) -> None:
        self._service.coordinator.loaded_partition(self.index)
        self.consumer.on_loaded()
        self.share.on_loaded()
        self.context.timer.schedule(EXPIRE_TIMER, OFFSETS_RETENTION_CHECK_INTERVAL_MS, self._expire_offsets)

    def _expire_offsets(self) -> CoordinatorResult[object]:
        """Offsets past `offsets.retention.minutes` of this partition's groups get tombstones (written
        inline by the coordinator; the runtime then waits for them to commit)."""
        self.context.timer.schedule(EXPIRE_TIMER, OFFSETS_RETENTION_CHECK_INTERVAL_MS, self._expire_offsets)
        removed = self._service.coordinator.expire_offsets(self.index)
        if removed:
            log.info("%s-%d: expired %d committed offset(s)", OFFSETS_TOPIC, self.index, removed)
        return CoordinatorResult([], None)

    def on_unloaded(self) -> None:
        self._service.coordinator.unload_partition(self.index)
        self.pending_txn_offsets.clear()
        self.consumer.on_unloaded()
        self.share.on_unloaded()


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
        partitions: CoordinatorPartitions,
        metadata: ClusterMetadataStore,
        topics: TopicAdmin,
    ) -> None:
        self.clock = clock
        self._node_id = config.broker_id
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
        self.commit_timeout_ms = int(config.get("offsets.commit.timeout.ms"))
        self.consumer_config = consumer_group_config(config)
        self.share_config = share_group_config(config)
        # A group's own heartbeat interval and session timeout (the GROUP config resource; the broker
        # sets these once its group configs are up), else the broker's.
        self.consumer_heartbeat_interval_of: Callable[[str], int] = lambda _group_id: (
            self.consumer_config.heartbeat_interval_ms
        )
        self.consumer_session_timeout_of: Callable[[str], int] = lambda _group_id: (
            self.consumer_config.session_timeout_ms
        )
        self.share_heartbeat_interval_of: Callable[[str], int] = lambda _group_id: (
            self.share_config.heartbeat_interval_ms
        )
        self.share_session_timeout_of: Callable[[str], int] = lambda _group_id: (
            self.share_config.session_timeout_ms
        )
        self.coordinator.consumer_commit_check = lambda group_id, member_id, epoch: commit_error(
            self.consumer_group(group_id), member_id, epoch
        )
        self.coordinator.consumer_delete = self._delete_consumer_group
        self.coordinator.consumer_listing = lambda: (
            [
                ListedGroup(g.group_id, CONSUMER_PROTOCOL_TYPE, g.state.value, CONSUMER_GROUP_TYPE)
                for g in self.consumer_groups()
            ]
            + [g for shard in self.runtime.active_shards().values() for g in shard.share.listing()]
        )
        self._metadata_max_bytes = group_config(config).offset_metadata_max_bytes
        self.runtime: CoordinatorRuntime[GroupShard] = CoordinatorRuntime(
            OFFSETS_TOPIC, clock, partitions, partitions, self._build_shard, self.commit_timeout_ms
        )
        partitions.on_leadership(OFFSETS_TOPIC, self.runtime.on_leadership_change)

    def consumer_group(self, group_id: str) -> ConsumerGroup | None:
        """The consumer group (KIP-848) of that id, if this broker coordinates it and it exists."""
        shard = self.runtime.active_shards().get(self.coordinator.partition_for(group_id))
        return None if shard is None else shard.consumer.groups.get(group_id)

    def _delete_consumer_group(self, group_id: str) -> ErrorCode | None:
        """DeleteGroups of a consumer group: NON_EMPTY_GROUP while it has members; else its group-level
        records get tombstones (written inline, as the classic coordinator writes, and replayed into the
        shard at once). None when no consumer group has that id here."""
        index = self.coordinator.partition_for(group_id)
        shard = self.runtime.active_shards().get(index)
        group = None if shard is None else shard.consumer.groups.get(group_id)
        if shard is None or group is None:
            return None
        if group.members:
            return ErrorCode.NON_EMPTY_GROUP
        records = group_tombstones(group_id)
        try:
            self.runtime.append(index, records)
        except CoordinatorError as exc:
            return _COORDINATOR_ERRORS.get(exc.code, ErrorCode.COORDINATOR_NOT_AVAILABLE)
        for key, value in records:
            shard.consumer.replay(key, value)
        log.info("consumer group %s deleted", group_id)
        return ErrorCode.NONE

    def consumer_groups(self) -> list[ConsumerGroup]:
        """Every consumer group this broker coordinates."""
        return [g for shard in self.runtime.active_shards().values() for g in shard.consumer.groups.values()]

    def topic_partitions(self) -> dict[str, int]:
        """Every topic this broker knows of and its partition count (what consumer groups subscribe to)."""
        return {name: info.partitions for name, info in self._metadata.topics.items()}

    def replica_racks(self, topic: str, partition: int) -> frozenset[str]:
        """The racks of a partition's live replicas (what the rack-aware assignor matches members to)."""
        return self._metadata.replica_racks(topic, partition)

    # --- life cycle ----------------------------------------------------------------------------
    async def stop(self) -> None:
        self.coordinator.shutdown()
        await self.runtime.close()

    def _build_shard(self, context: ShardContext) -> GroupShard:
        info = self._metadata.topics.get(OFFSETS_TOPIC)
        if info is not None:
            self.num_partitions = info.partitions
            self.coordinator.store.num_partitions = info.partitions
        # The log is the truth: whatever memory still held for these groups is dropped first.
        self.coordinator.unload_partition(context.partition)
        return GroupShard(self, context)

    async def wait_for_replication(self, group_id: str) -> ErrorCode:
        """Until the ISR has every coordinator record appended so far to the group's partition (acks=-1,
        as Kafka's coordinator writes; immediate when the ISR is this broker alone)."""
        index = self.coordinator.partition_for(group_id)
        try:
            await self.runtime.wait_committed(index, None, self.commit_timeout_ms)
        except CoordinatorError as exc:
            log.warning("%s-%d: coordinator records not replicated: %s", OFFSETS_TOPIC, index, exc.cause.name)
            return _COORDINATOR_ERRORS.get(exc.code, exc.code)
        return ErrorCode.NONE

    def coordinator_endpoint(self, group_id: str) -> tuple[int, str, int] | None:
        """(node id, host, port) of the leader of the group's partition, if known."""
        info = self._metadata.topics.get(OFFSETS_TOPIC)
        if info is None:
            return None
        leader = self._metadata.partition_leader(OFFSETS_TOPIC, partition_for(group_id, info.partitions))
        return None if leader is None else (leader.node_id, leader.host, leader.port)

    def ensure_topic(self) -> None:
        """Create `__consumer_offsets` if it does not exist yet (first use)."""
        self.ensure_offsets_topic()

    def ensure_offsets_topic(self) -> None:
        """Create `__consumer_offsets` if it does not exist yet (first use)."""
        configs = {"cleanup.policy": "compact", "segment.bytes": str(OFFSETS_TOPIC_SEGMENT_BYTES)}
        self._topics.ensure_internal_topic(
            OFFSETS_TOPIC, self.num_partitions, self._replication_factor, configs
        )

    # --- requests ------------------------------------------------------------------------------
    def coordinator_error(self, group_id: str) -> ErrorCode | None:
        """None when this broker serves the group: it leads the group's loaded `__consumer_offsets`
        partition, or that topic does not exist yet (any broker may answer: the first group request
        creates it); else NOT_COORDINATOR or COORDINATOR_LOAD_IN_PROGRESS."""
        info = self._metadata.topics.get(OFFSETS_TOPIC)
        if info is None:  # not created yet, unless this broker was not sent the cluster's view yet
            return None if self._node_id in self._metadata.brokers else ErrorCode.NOT_COORDINATOR
        return self.runtime.refusal(partition_for(group_id, info.partitions))

    async def commit_txn_offsets(
        self,
        group_id: str,
        producer_id: int,
        producer_epoch: int,
        offsets: dict[TopicPartition, OffsetAndMetadata],
    ) -> dict[TopicPartition, ErrorCode]:
        """TxnOffsetCommit: the offsets go to the group's partition as a transactional batch of the
        producer and stay pending until its transaction's marker (`on_txn_marker`)."""
        results = {
            tp: ErrorCode.OFFSET_METADATA_TOO_LARGE
            for tp, om in offsets.items()
            if len(om.metadata.encode()) > self._metadata_max_bytes
        }
        now = self.clock.time_ms()
        records: list[Record] = [
            (
                encode_key(OffsetCommitKey(group_id, tp.topic, tp.partition)),
                encode_value(OffsetCommitValue(om.offset, om.leader_epoch, om.metadata, now)),
            )
            for tp, om in offsets.items()
            if tp not in results
        ]
        if not records:
            return results
        accepted = [tp for tp in offsets if tp not in results]
        index = self.coordinator.partition_for(group_id)
        code = ErrorCode.NONE
        appended = False
        try:
            end = self.runtime.append(index, records, TransactionalProducer(producer_id, producer_epoch))
            appended = True
            await self.runtime.wait_committed(index, end, self.commit_timeout_ms)
        except CoordinatorError as exc:
            code = exc.cause
        if appended and code in (ErrorCode.NONE, ErrorCode.REQUEST_TIMED_OUT):
            # Appended: the marker decides its fate whether or not the ISR had it in time.
            shard = self.runtime.active_shards().get(index)
            if shard is not None:
                shard.pending_txn_offsets.setdefault(producer_id, []).extend(records)
        if code is not ErrorCode.NONE:
            log.warning(
                "group %s: transactional offsets of producer %d: %s", group_id, producer_id, code.name
            )
        if code is not ErrorCode.INVALID_PRODUCER_EPOCH:
            code = _COORDINATOR_ERRORS.get(
                code, code if code is ErrorCode.NONE else ErrorCode.COORDINATOR_NOT_AVAILABLE
            )
        results.update(dict.fromkeys(accepted, code))
        return results

    def unstable_partitions(self, group_id: str) -> set[TopicPartition]:
        """The group's partitions with transactional offsets still pending a marker (OffsetFetch
        ``require_stable`` answers UNSTABLE_OFFSET_COMMIT for them, KIP-447)."""
        shard = self.runtime.active_shards().get(self.coordinator.partition_for(group_id))
        out: set[TopicPartition] = set()
        for records in ({} if shard is None else shard.pending_txn_offsets).values():
            for key, _ in records:
                if key is None:
                    continue
                try:
                    decoded = decode_key(key)
                except RecordFormatError:
                    continue
                if isinstance(decoded, OffsetCommitKey) and decoded.group == group_id:
                    out.add(TopicPartition(decoded.topic, decoded.partition))
        return out

    def on_txn_marker(self, topic: str, partition: int, producer_id: int, commit: bool) -> None:
        """A transaction marker reached a `__consumer_offsets` partition: its pending offsets of that
        producer become committed (COMMIT) or are dropped (ABORT), as Kafka's coordinator does."""
        if topic != OFFSETS_TOPIC:
            return
        shard = self.runtime.active_shards().get(partition)
        records = [] if shard is None else shard.pending_txn_offsets.pop(producer_id, [])
        if commit:
            now = self.clock.time_ms()
            for key, value in records:
                self.coordinator.store.replay(key, value, now)

    def after_downgrade(self, group_id: str) -> None:
        """A consumer group became a classic group (its records are durable): its classic members get
        their sessions and a rebalance, in which they rejoin and their leader assigns."""
        group = self.coordinator.store.get(group_id)
        if group is not None and group.members:
            self.coordinator.membership.arm_loaded_members([group])
            self.coordinator.membership.rebalance.prepare_rebalance(group, "converted from a consumer group")

    async def join_group(self, req: JoinGroupRequest) -> JoinResult:
        consumer = self.consumer_group(req.group_id)
        if consumer is not None:
            # Offline downgrade (KIP-848, as Kafka converts whatever group.consumer.migration.policy
            # says): an empty consumer group gives way to the classic group; its committed offsets,
            # kept in the classic entry of the same id, stay.
            deleted = self._delete_consumer_group(req.group_id)
            if deleted not in (None, ErrorCode.NONE):
                return JoinResult(deleted, req.member_id)
            log.info("consumer group %s converted to a classic group (it was empty)", req.group_id)
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
