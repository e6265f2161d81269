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

Transactional offsets (TxnOffsetCommit, KIP-98): `commit_txn_offsets` appends them as a transactional
batch of the producer (sequence numbers unchecked, as for Kafka's coordinator appends) and holds them
pending per producer id; the transaction coordinator's marker on that partition (`on_txn_marker`)
commits them into the group's offsets or drops them. Loading a partition applies a transaction's
records at its COMMIT marker, never those of an aborted one, and keeps those of open ones pending.

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
from strom.broker.log_replay import LogRead, replay_batches
from strom.broker.metadata_cache import ClusterMetadataStore
from strom.broker.partition import Partition
from strom.broker.replica_manager import ReplicaManager
from strom.broker.topic_admin import TopicAdmin
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
from strom.coordinator.ports import Cancellable
from strom.coordinator.records import (
    OffsetCommitKey,
    OffsetCommitValue,
    RecordFormatError,
    decode_key,
    encode_key,
    encode_value,
)
from strom.protocol.errors import ErrorCode, KafkaError
from strom.protocol.records.batch import CONTROL_BIT, TRANSACTIONAL_BIT
from strom.protocol.records.builder import build_batch
from strom.protocol.records.control import parse_marker
from strom.protocol.records.record import RecordDecodeError

log = logging.getLogger(__name__)

T = TypeVar("T")
Record = tuple[bytes | None, bytes | None]

OFFSETS_TOPIC = "__consumer_offsets"
OFFSETS_TOPIC_SEGMENT_BYTES = 100 * 1024 * 1024  # Kafka's offsets.topic.segment.bytes
OFFSETS_RETENTION_CHECK_INTERVAL_MS = 600_000  # Kafka's offsets.retention.check.interval.ms
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
        # Partition -> producer id -> offset records of that producer's open transaction (TxnOffsetCommit).
        self.pending_txn_offsets: dict[int, dict[int, list[Record]]] = {}
        self._metadata_max_bytes = group_config(config).offset_metadata_max_bytes
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
        self.pending_txn_offsets.pop(partition.index, None)
        if not is_leader:
            self.coordinator.unload_partition(partition.index)
            return
        plog = partition.log
        info = self._metadata.topics.get(OFFSETS_TOPIC)
        if info is not None:
            self.num_partitions = info.partitions
            self.coordinator.store.num_partitions = info.partitions
        pending: dict[int, list[Record]] = {}
        self.coordinator.load_partition(
            partition.index,
            _read_partition(plog.read, plog.log_start_offset, plog.log_end_offset, partition.index, pending),
        )
        if pending:
            self.pending_txn_offsets[partition.index] = pending

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
    def is_coordinator(self, group_id: str) -> bool:
        """Whether this broker leads the group's `__consumer_offsets` partition (before that topic
        exists, any broker may answer: the first group request creates it)."""
        rm = self.replica_manager
        info = self._metadata.topics.get(OFFSETS_TOPIC)
        if info is None:
            return True
        part = rm.partitions.get((OFFSETS_TOPIC, partition_for(group_id, info.partitions)))
        return part is not None and part.leader_id == rm.node_id

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
        batch = build_batch(
            [(key, value, (), now) for key, value in records],
            producer_id=producer_id,
            producer_epoch=producer_epoch,
            base_sequence=0,  # batch checks want a sequence with a producer id; coordinator appends skip it
            is_transactional=True,
        )
        index = self.coordinator.partition_for(group_id)
        rm = self.replica_manager
        try:
            part = rm.leader_partition(OFFSETS_TOPIC, index)
            info = rm.append_as_leader(part, batch, from_coordinator=True)
            code = await rm.wait_for_replication(part, info.last_offset + 1, self.commit_timeout_ms)
        except KafkaError as exc:
            code = exc.code
        except OSError:
            code = ErrorCode.KAFKA_STORAGE_ERROR
        if code is ErrorCode.NONE or code is ErrorCode.REQUEST_TIMED_OUT:
            # Appended: the marker decides its fate whether or not the ISR had it in time.
            self.pending_txn_offsets.setdefault(index, {}).setdefault(producer_id, []).extend(records)
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
        pending = self.pending_txn_offsets.get(self.coordinator.partition_for(group_id), {})
        out: set[TopicPartition] = set()
        for records in pending.values():
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
        records = self.pending_txn_offsets.get(partition, {}).pop(producer_id, [])
        if commit:
            now = self.clock.time_ms()
            for key, value in records:
                self.coordinator.store.replay(key, value, now)

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
    read: LogRead, start: int, end: int, partition: int, pending: dict[int, list[Record]]
) -> Iterator[tuple[bytes | None, bytes | None]]:
    """The partition's records in offset order, those of transactions only once their COMMIT marker
    comes (aborted ones never); ``pending`` is left with the records of transactions still open."""
    name = f"{OFFSETS_TOPIC}-{partition}"
    for batch, stored in replay_batches(read, start, end, name):
        records = [(r.key, r.value) for r in stored]
        if batch.attributes & CONTROL_BIT:
            held = pending.pop(batch.producer_id, [])
            if any(_is_commit(key, value) for key, value in records):
                yield from held
        elif batch.attributes & TRANSACTIONAL_BIT:
            pending.setdefault(batch.producer_id, []).extend(records)
        else:
            yield from records


def _is_commit(key: bytes | None, value: bytes | None) -> bool:
    try:
        marker = parse_marker(key, value)
    except RecordDecodeError:
        return False
    return marker is not None and marker.is_commit
