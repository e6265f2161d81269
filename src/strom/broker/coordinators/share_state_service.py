"""The share coordinator (KIP-932) on the coordinator runtime: share-partition states, `__share_group_state`.

Each share-partition (group, topic id, partition) has its durable state (`strom.coordinator.share.state`:
start offset, state epoch, leader epoch, state batches) in one partition of `__share_group_state`
(``state_partition``); the leader of that partition is the share-partition's share coordinator. A
`ShareStateShard` per partition this broker leads holds the states replayed from its records (one
``ShareSnapshot`` per write; compaction keeps the last of each key), so a new coordinator (after a
fail-over or a restart) answers from the log.

`read` answers from the ACTIVE shard (NOT_COORDINATOR / COORDINATOR_LOAD_IN_PROGRESS otherwise);
`delete` writes a tombstone (an admin deleted the group's offsets), `delete_group` one for each
share-partition of a group this broker keeps (an admin deleted the group);
`write` is an operation of the runtime: the stored state is checked against the write (a write at an
older leader epoch is fenced, `written_state`), one record is appended, and the answer waits until the
high watermark passes it (acks=all), so what a leader was told is durable survives the coordinator's
loss. A failed write answers NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS, or COORDINATOR_NOT_AVAILABLE.
The handlers of ReadShareGroupState and WriteShareGroupState (handlers/share_state.py) and the local
side of the leaders' persister (share_persister.py) call these.

`__share_group_state` is created on first use (`request_topic`: asked for by the first request that
needs it, created in the background, the metadata store's writes in a worker thread, so neither that
request nor the broker's others wait for it) with
`share.coordinator.state.topic.num.partitions` partitions, `cleanup.policy=compact` and
``min(share.coordinator.state.topic.replication.factor, live brokers)`` replicas, Kafka's names and
defaults.

Call only from the broker's event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import replace

from strom._util.clock import Clock
from strom.broker.config import BrokerConfig
from strom.broker.control.topic_admin import CoordinatorTopic, TopicAdmin
from strom.broker.coordinators.coordinator_partitions import CoordinatorPartitions
from strom.broker.metadata_cache import ClusterMetadataStore
from strom.coordinator.records import RecordFormatError
from strom.coordinator.share.state import (
    ShareState,
    StateKey,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
    state_partition,
    written_state,
)
from strom.coordinator_runtime import CoordinatorError, CoordinatorResult, CoordinatorRuntime, ShardContext
from strom.protocol.errors import ErrorCode, KafkaError

log = logging.getLogger(__name__)

SHARE_STATE_TOPIC = "__share_group_state"
SHARE_STATE_SEGMENT_BYTES = 100 * 1024 * 1024  # Kafka's share.coordinator.state.topic.segment.bytes
WRITE_TIMEOUT_MS = 5_000  # how long a write waits for the ISR
_PASSED_ON = frozenset({ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS})


def _answer_for(exc: CoordinatorError) -> ErrorCode:
    """What a leader asking for a share state is told when the runtime refused: where to look (not the
    coordinator, still loading), else COORDINATOR_NOT_AVAILABLE."""
    return exc.code if exc.code in _PASSED_ON else ErrorCode.COORDINATOR_NOT_AVAILABLE


class ShareStateShard:
    """One `__share_group_state` partition's share-partition states, replayed from its records."""

    def __init__(self, context: ShardContext) -> None:
        self.context = context
        self.states: dict[StateKey, ShareState] = {}

    def replay(
        self, offset: int, producer_id: int, producer_epoch: int, key: bytes | None, value: bytes | None
    ) -> None:
        if key is None:
            return
        try:
            state_key = decode_key(key)
        except RecordFormatError:
            log.warning(
                "__share_group_state-%d: offset %d: unknown record skipped", self.context.partition, offset
            )
            return
        if value is None:
            self.states.pop(state_key, None)
        else:
            self.states[state_key] = decode_value(value)

    def replay_end_transaction(self, producer_id: int, producer_epoch: int, commit: bool) -> None:
        """The share coordinator writes no transactional records."""

    def on_loaded(self) -> None:
        log.info(
            "__share_group_state-%d: %d share-partition states", self.context.partition, len(self.states)
        )

    def on_unloaded(self) -> None:
        self.states.clear()


class ShareStateService:
    def __init__(
        self,
        config: BrokerConfig,
        clock: Clock,
        partitions: CoordinatorPartitions,
        metadata: ClusterMetadataStore,
        topics: TopicAdmin,
    ) -> None:
        get = config.get
        self.num_partitions = int(get("share.coordinator.state.topic.num.partitions"))
        self._replication_factor = int(get("share.coordinator.state.topic.replication.factor"))
        self._min_isr = int(get("share.coordinator.state.topic.min.isr"))
        self._metadata = metadata
        self._topics = topics
        self.node_id = partitions.node_id
        self._creating: asyncio.Task[None] | None = None  # the topic's creation under way
        self.runtime: CoordinatorRuntime[ShareStateShard] = CoordinatorRuntime(
            SHARE_STATE_TOPIC, clock, partitions, partitions, ShareStateShard, WRITE_TIMEOUT_MS
        )
        partitions.on_leadership(SHARE_STATE_TOPIC, self.runtime.on_leadership_change)

    async def stop(self) -> None:
        creating = self._creating
        if creating is not None:
            creating.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await creating
        await self.runtime.close()

    # --- the topic and the coordinator's location ----------------------------------------------
    def request_topic(self) -> None:
        """Ask for ``__share_group_state``'s creation if it does not exist yet (first use), in the
        background: the asking request does not wait for it (it answers COORDINATOR_NOT_AVAILABLE, as
        while a share coordinator loads, and its client retries), and the metadata store's writes run
        in a worker thread, so the broker's other requests do not wait for them either."""
        if SHARE_STATE_TOPIC in self._metadata.topics or self._creating is not None:
            return
        self._creating = asyncio.get_running_loop().create_task(self._create_topic())

    async def _create_topic(self) -> None:
        try:
            await self._topics.ensure_coordinator_topic_in_worker(
                CoordinatorTopic(
                    SHARE_STATE_TOPIC,
                    self.num_partitions,
                    self._replication_factor,
                    SHARE_STATE_SEGMENT_BYTES,
                    self._min_isr,
                )
            )
        except KafkaError as exc:
            log.warning("%s not created: %s", SHARE_STATE_TOPIC, exc)
        finally:
            self._creating = None

    def partition_of(self, key: StateKey) -> int | None:
        """The key's `__share_group_state` partition (None while the topic does not exist)."""
        info = self._metadata.topics.get(SHARE_STATE_TOPIC)
        return None if info is None else state_partition(key, info.partitions)

    def coordinator_of(self, key: StateKey) -> tuple[int, str, int] | None:
        """(node id, host, port) of the key's share coordinator, if known."""
        partition = self.partition_of(key)
        if partition is None:
            return None
        leader = self._metadata.partition_leader(SHARE_STATE_TOPIC, partition)
        return None if leader is None else (leader.node_id, leader.host, leader.port)

    # --- reads and writes (as the share coordinator) -------------------------------------------
    async def read(self, key: StateKey, leader_epoch: int) -> tuple[ErrorCode, ShareState | None]:
        """The stored state of ``key`` (None: none stored) for a partition leader at ``leader_epoch``, or
        why this broker cannot answer. A newer leader epoch than the stored one is stored first (Kafka's
        read that may update the leader epoch), so that from then on the deposed leader's writes are
        fenced: else one of them could land between this read and the new leader's first write, which,
        built from this read, would undo it. An older one is refused (FENCED_LEADER_EPOCH)."""
        partition = self.partition_of(key)
        if partition is None:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, None

        def operation(shard: ShareStateShard) -> CoordinatorResult[tuple[ErrorCode, ShareState | None]]:
            current = shard.states.get(key)
            if current is None or leader_epoch == current.leader_epoch:
                return CoordinatorResult([], (ErrorCode.NONE, current))
            if leader_epoch < current.leader_epoch:
                return CoordinatorResult([], (ErrorCode.FENCED_LEADER_EPOCH, None))
            fenced = replace(current, leader_epoch=leader_epoch)
            return CoordinatorResult([(encode_key(key), encode_value(fenced))], (ErrorCode.NONE, fenced))

        try:
            return await self.runtime.write(partition, operation, WRITE_TIMEOUT_MS)
        except CoordinatorError as exc:
            log.info("share state of %s not read: %s", key.coordinator_key(), exc.code.name)
            return _answer_for(exc), None

    async def write(self, key: StateKey, state: ShareState) -> ErrorCode:
        """Store ``state`` as ``key``'s; NONE once the ISR has it."""
        partition = self.partition_of(key)
        if partition is None:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE

        def operation(shard: ShareStateShard) -> CoordinatorResult[ErrorCode]:
            stored, code = written_state(shard.states.get(key), state)
            if code is not ErrorCode.NONE or stored is None:
                return CoordinatorResult([], code)
            return CoordinatorResult([(encode_key(key), encode_value(stored))], code)

        try:
            return await self.runtime.write(partition, operation, WRITE_TIMEOUT_MS)
        except CoordinatorError as exc:
            log.info("share state of %s not written: %s", key.coordinator_key(), exc.code.name)
            return _answer_for(exc)

    async def delete(self, key: StateKey) -> ErrorCode:
        """Remove ``key``'s stored state (a tombstone); NONE once the ISR has it, or at once when
        nothing is stored."""
        partition = self.partition_of(key)
        if partition is None:
            return ErrorCode.NONE  # no `__share_group_state` yet: nothing is stored anywhere

        def operation(shard: ShareStateShard) -> CoordinatorResult[None]:
            return CoordinatorResult([(encode_key(key), None)] if key in shard.states else [], None)

        try:
            await self.runtime.write(partition, operation, WRITE_TIMEOUT_MS)
        except CoordinatorError as exc:
            log.info("share state of %s not deleted: %s", key.coordinator_key(), exc.code.name)
            return _answer_for(exc)
        return ErrorCode.NONE

    async def delete_group(self, group_id: str) -> tuple[ErrorCode, list[StateKey]]:
        """Remove every share-partition state of the group this broker keeps as share coordinator
        (DeleteGroups of a share group); the keys removed, or the first refusal."""
        deleted: list[StateKey] = []
        for partition, shard in sorted(self.runtime.active_shards().items()):
            keys = [k for k in shard.states if k.group_id == group_id]
            if not keys:
                continue

            def operation(shard: ShareStateShard, keys: list[StateKey] = keys) -> CoordinatorResult[None]:
                return CoordinatorResult([(encode_key(k), None) for k in keys if k in shard.states], None)

            try:
                await self.runtime.write(partition, operation, WRITE_TIMEOUT_MS)
            except CoordinatorError as exc:
                log.info("share states of group %s not deleted: %s", group_id, exc.code.name)
                return _answer_for(exc), deleted
            deleted += keys
        return ErrorCode.NONE, deleted
