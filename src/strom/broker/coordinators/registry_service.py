"""The schema registry's host in the broker: ``_schemas`` storage, one writer, every broker a reader.

Theory of operation:

* **Storage.** The registry's state is the replay of ``_schemas`` (`strom.registry.records`): one
  partition, ``cleanup.policy=compact``, ``min(offsets.topic.replication.factor, live brokers)``
  replicas, created by the first write. `RegistryState.apply` is the only way the state changes.
* **One writer, on the coordinator runtime.** The leader of ``_schemas``-0 is the writer. The runtime
  (`strom.coordinator_runtime`) loads the partition into a `RegistryShard` (the writer's own state,
  replayed to the log end offset) when this broker becomes its leader; then the writer appends a
  ``WRITER`` record naming its HTTP URL and waits until that record is committed: every record before
  it in its log is then committed too (every id any earlier writer appended, whether or not that
  writer lived to answer), so the state it allocates ids from can never miss a record an earlier
  writer acknowledged. Only then (``ready``) does it take writes. Writes run one at a time (a lock):
  the runtime decides against the shard (`SchemaRegistry`), appends the records as leader, replays
  them into the shard and answers once the high watermark passes them; a decision without records
  still waits for the writes before it to commit. A write that fails to commit is answered with an
  error (50001 / 50002); the broker that loses leadership drops the shard and reloads as a follower.
* **Readers.** Every broker answers reads from its own state, the committed records only. A broker
  hosting a replica of ``_schemas``-0 replays its local log up to the high watermark before every
  read and every 200 ms; a broker without one fetches the topic from its leader as a consumer does
  (`registry_fetch.py`, long-polling), which also gives it committed records only. Writes reaching a
  non-writer are forwarded to the URL of the last committed ``WRITER`` record (`writer_url`).
* A record that does not parse is logged and skipped; the replay goes on.

Every read of the local replica and every leadership change go through `CoordinatorPartitions`.

Call only from the broker's event loop.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from strom._util.clock import Clock, sleep_ms
from strom._util.tasks import cancel_and_wait
from strom.broker.config import BrokerConfig
from strom.broker.control.topic_admin import TopicAdmin
from strom.broker.coordinators.coordinator_partitions import CoordinatorPartitions
from strom.broker.coordinators.log_replay import replay_batches
from strom.broker.coordinators.registry_fetch import RemoteLogReader
from strom.broker.metadata_cache import ClusterMetadataStore
from strom.broker.security.client import ClientSecurity
from strom.coordinator_runtime import CoordinatorError, CoordinatorResult, CoordinatorRuntime, ShardContext
from strom.protocol.errors import ErrorCode, KafkaError
from strom.registry import errors
from strom.registry.records import SCHEMAS_TOPIC, RecordError, Writer, writer_record
from strom.registry.registry import SchemaRegistry, Write
from strom.registry.state import RegistryState

log = logging.getLogger(__name__)

APPEND_TIMEOUT_MS = 10_000
FOLLOW_INTERVAL_MS = 200
LEADER_WAIT_MS = 10_000
REPLAY_WAIT_MS = 2_000


def apply_record(registry: SchemaRegistry, offset: int, key: bytes | None, value: bytes | None) -> None:
    """Apply one ``_schemas`` record; one that does not parse is logged and skipped."""
    if key is None:
        log.warning("%s: skipping record at offset %d: no key", SCHEMAS_TOPIC, offset)
        return
    try:
        registry.state.apply(bytes(key), None if value is None else bytes(value))
    except RecordError as exc:
        log.warning("%s: skipping record at offset %d: %s", SCHEMAS_TOPIC, offset, exc)


class RegistryShard:
    """The writer's state: ``_schemas``-0 replayed to its log end offset, and each write as appended."""

    def __init__(self, service: RegistryService, context: ShardContext) -> None:
        self._service = service
        self.context = context
        self.registry = SchemaRegistry(RegistryState())

    def replay(
        self, offset: int, producer_id: int, producer_epoch: int, key: bytes | None, value: bytes | None
    ) -> None:
        apply_record(self.registry, offset, key, value)

    def replay_end_transaction(self, producer_id: int, producer_epoch: int, commit: bool) -> None:
        """``_schemas`` holds no transactions."""

    def on_loaded(self) -> None:
        self._service.announce()

    def on_unloaded(self) -> None:
        self._service.stop_writing()


class RegistryService:
    def __init__(
        self,
        config: BrokerConfig,
        clock: Clock,
        partitions: CoordinatorPartitions,
        metadata: ClusterMetadataStore,
        topics: TopicAdmin,
        security: ClientSecurity,
    ) -> None:
        self.clock = clock
        self._partitions = partitions
        self._metadata = metadata
        self._topics = topics
        self._replication_factor = int(config.get("offsets.topic.replication.factor"))
        self.registry = SchemaRegistry()  # the readers' state: committed records only
        self.url: str | None = None  # this broker's registry URL, set once the HTTP listener is bound
        self._next_offset = 0  # next ``_schemas`` offset to replay
        self._loaded_from: object | None = None  # the replica whose log the state replays
        self._ready = False  # writer: WRITER record committed, writes taken
        self._write_lock = asyncio.Lock()
        self._tasks: list[asyncio.Task[None]] = []
        self._announcing: asyncio.Task[None] | None = None
        self._remote = RemoteLogReader(
            SCHEMAS_TOPIC, metadata, f"registry-{partitions.node_id}", security, clock
        )
        self._following_remote = False
        self.runtime: CoordinatorRuntime[RegistryShard] = CoordinatorRuntime(
            SCHEMAS_TOPIC, clock, partitions, partitions, lambda context: RegistryShard(self, context)
        )
        partitions.on_leadership(SCHEMAS_TOPIC, self._on_leadership_change)

    # --- life cycle ----------------------------------------------------------------------------
    def start(self) -> None:
        self._tasks.append(asyncio.create_task(self._follow()))

    async def stop(self) -> None:
        await self.runtime.close()
        await cancel_and_wait([*self._tasks, *([self._announcing] if self._announcing else [])])
        self._tasks.clear()
        self._announcing = None
        self._remote.close()

    async def _follow(self) -> None:
        while True:
            try:
                if self._replica() is None and SCHEMAS_TOPIC in self._metadata.topics:
                    if await self._fetch_remote():
                        continue  # more may be waiting: fetch again at once
                else:
                    self.catch_up()
                    if self.runtime.refusal(0) is None and not self._ready:
                        self.announce()  # an earlier announcement failed: retry
            except Exception:
                log.exception("following %s failed", SCHEMAS_TOPIC)
            await sleep_ms(self.clock, FOLLOW_INTERVAL_MS)

    async def _fetch_remote(self) -> bool:
        """No local replica: one Fetch from the leader (`registry_fetch.py`); whether records came."""
        if not self._following_remote:
            self._reset(None)
            self._following_remote = True
        fetched = await self._remote.fetch(self._next_offset)
        if fetched is None or self._replica() is not None:
            return False
        if fetched.reset:
            log.warning(
                "%s: offset %d out of the leader's range; replaying from the start",
                SCHEMAS_TOPIC,
                self._next_offset,
            )
            self._reset(None)
            return True
        for offset, key, value in fetched.records:
            apply_record(self.registry, offset, key, value)
        self._next_offset = max(self._next_offset, fetched.next_offset)
        return bool(fetched.records)

    # --- where the state comes from ------------------------------------------------------------
    def _replica(self) -> object | None:
        return self._partitions.replica(SCHEMAS_TOPIC, 0)

    @property
    def is_leader(self) -> bool:
        return self._partitions.is_leader(SCHEMAS_TOPIC, 0)

    @property
    def is_writer(self) -> bool:
        return self.is_leader and self._ready

    def writer_url(self) -> str | None:
        """Where to forward a write: the committed writer's URL (None while there is none)."""
        writer = self.registry.state.writer
        if writer is None:
            return None
        leader_id = self._partitions.leader_id(SCHEMAS_TOPIC, 0)
        if leader_id is None:
            leader = self._metadata.partition_leader(SCHEMAS_TOPIC, 0)
            leader_id = -1 if leader is None else leader.node_id
        if leader_id >= 0 and leader_id != writer.broker_id:
            return None  # a new leader has not announced itself yet
        return writer.url

    def _on_leadership_change(self, partition: int, leader_epoch: int, is_leader: bool) -> None:
        """The one leadership hook of ``_schemas``: the readers' state is rebuilt from the local replica,
        and the runtime loads (leader) or drops (follower) the writer's shard."""
        self.stop_writing()
        self._reset(self._replica())
        self.catch_up()
        log.info(
            "%s-0: %s; state rebuilt to offset %d (%d id(s))",
            SCHEMAS_TOPIC,
            "leader: announcing as the registry writer" if is_leader else "follower",
            self._next_offset,
            len(self.registry.state.schemas),
        )
        self.runtime.on_leadership_change(partition, leader_epoch, is_leader)

    def _reset(self, replica: object | None) -> None:
        self.registry = SchemaRegistry(RegistryState())
        self._loaded_from = replica
        self._next_offset = 0 if replica is None else self._partitions.log_start_offset(SCHEMAS_TOPIC, 0)

    def catch_up(self) -> None:
        """Replay the local replica's committed records (below the high watermark) not yet applied."""
        replica = self._replica()
        if replica is None:
            return
        self._following_remote = False
        p = self._partitions
        if replica is not self._loaded_from or p.log_end_offset(SCHEMAS_TOPIC, 0) < self._next_offset:
            self._reset(replica)  # another replica object, or the log was truncated below what we applied
        end = p.high_watermark(SCHEMAS_TOPIC, 0)
        start = max(self._next_offset, p.log_start_offset(SCHEMAS_TOPIC, 0))

        def read(offset: int, max_bytes: int, end_offset: int, _min_one: bool) -> bytes:
            return p.read(SCHEMAS_TOPIC, 0, offset, max_bytes, end_offset)

        for batch, records in replay_batches(read, start, end, f"{SCHEMAS_TOPIC}-0"):
            if not batch.is_control:
                for record in records:
                    if record.offset < end:
                        apply_record(self.registry, record.offset, record.key, record.value)
            # An unreadable batch stops the replay there (logged); the next catch-up tries it again.
            self._next_offset = max(self._next_offset, min(batch.next_offset, end))

    def committed_offset(self) -> int:
        """The local replica's high watermark (0 without one)."""
        if self._replica() is None:
            return 0
        return self._partitions.high_watermark(SCHEMAS_TOPIC, 0)

    async def wait_replayed(self, offset: int) -> None:
        """Wait (at most ``REPLAY_WAIT_MS``) until the local replica has replayed up to ``offset``."""
        deadline = self.clock.monotonic_ms() + REPLAY_WAIT_MS
        while True:
            self.catch_up()  # a local replica; without one the follow task fetches meanwhile
            if self._next_offset >= offset or self.clock.monotonic_ms() >= deadline:
                return
            await sleep_ms(self.clock, 10)

    # --- the writer ----------------------------------------------------------------------------
    def announce(self) -> None:
        """The writer's shard is loaded: commit a WRITER record (unless already under way)."""
        if self._announcing is None:
            self._announcing = asyncio.create_task(self._announce())

    def stop_writing(self) -> None:
        self._ready = False
        if self._announcing is not None:
            self._announcing.cancel()
            self._announcing = None

    async def _announce(self) -> None:
        """As the new leader: commit a WRITER record, which commits everything before it."""
        task = asyncio.current_task()
        try:
            epoch = self.runtime.leader_epoch(0)
            if epoch is None:
                return
            writer = Writer(self._partitions.node_id, self.url, epoch)
            try:
                await self._commit(lambda _registry: Write([writer_record(writer)]))
            except errors.RegistryError as exc:
                log.warning("%s: announcing the writer failed (%s); retrying", SCHEMAS_TOPIC, exc.message)
                return
            if self.runtime.leader_epoch(0) == epoch and self.is_leader:
                self._ready = True
                self.catch_up()
                log.info(
                    "%s: broker %d is the registry writer at %s", SCHEMAS_TOPIC, writer.broker_id, writer.url
                )
        finally:
            if self._announcing is task:
                self._announcing = None

    async def ensure_writer_known(self) -> None:
        """Create ``_schemas`` on first use and wait (bounded) until some broker is its ready writer."""
        try:
            self._topics.ensure_internal_topic(
                SCHEMAS_TOPIC, 1, self._replication_factor, {"cleanup.policy": "compact"}
            )
        except KafkaError as exc:
            raise errors.store_error(f"cannot create {SCHEMAS_TOPIC}: {exc}") from None
        deadline = self.clock.monotonic_ms() + LEADER_WAIT_MS
        while not self.is_writer and (self.is_leader or self.writer_url() is None):
            if self.clock.monotonic_ms() > deadline:
                raise errors.operation_timeout(f"no registry writer (leader of {SCHEMAS_TOPIC}-0) is ready")
            self.catch_up()
            await sleep_ms(self.clock, 50)

    async def write(self, decide: Callable[[SchemaRegistry], Write]) -> object:
        """Decide against the writer's state, make the records durable (committed), answer."""
        async with self._write_lock:
            if not self.is_writer:
                raise errors.forwarding_error("this broker is no longer the registry writer")
            answer = await self._commit(decide)
            self.catch_up()
            return answer

    async def _commit(self, decide: Callable[[SchemaRegistry], Write]) -> object:
        def operation(shard: RegistryShard) -> CoordinatorResult[object]:
            decision = decide(shard.registry)
            return CoordinatorResult(decision.records, decision.answer)

        try:
            return await self.runtime.write(0, operation, APPEND_TIMEOUT_MS)
        except CoordinatorError as exc:
            if exc.code is ErrorCode.REQUEST_TIMED_OUT:
                raise errors.operation_timeout(f"{SCHEMAS_TOPIC} did not commit the write in time") from None
            raise errors.store_error(f"{SCHEMAS_TOPIC} refused the write: {exc.cause.name}") from None
