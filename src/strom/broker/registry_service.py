"""The schema registry's host in the broker: ``_schemas`` storage, one writer, every broker a reader.

Theory of operation:

* **Storage.** The registry's state is the replay of ``_schemas`` (`strom.registry.records`): one
  partition, ``cleanup.policy=compact``, ``min(offsets.topic.replication.factor, live brokers)``
  replicas, created by the first write. `RegistryState.apply` is the only way the state changes.
* **One writer.** The leader of ``_schemas``-0 is the writer. When it becomes leader it appends a
  ``WRITER`` record naming its HTTP URL and waits until that record is committed: every record before
  it in its log is then committed too, and replayed (every id any earlier writer appended, whether or
  not that writer lived to answer), so the state it allocates ids from can never miss a record an
  earlier writer acknowledged. Only then (``ready``) does it take writes. Writes run one at a
  time (a lock): decide (`SchemaRegistry`), append the records as leader through the replica manager,
  wait for the high watermark to pass them (`ReplicaManager.wait_for_replication`), replay them, answer.
  A write that fails to commit is answered with an error (50001 / 50002) and is not applied; the
  broker that loses leadership drops its state and reloads as a follower.
* **Readers.** Every broker answers reads from its own state. A broker hosting a replica of
  ``_schemas``-0 replays its local log up to the high watermark (committed records only) before every
  read and every 200 ms; a broker without one fetches the topic from its leader as a consumer does
  (`registry_fetch.py`, long-polling), which also gives it committed records only. Writes reaching a
  non-writer are forwarded to the URL of the last committed ``WRITER`` record (`writer_url`).
* A record that does not parse is logged and skipped; the replay goes on.

Call only from the broker's event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

from strom._util.clock import Clock, sleep_ms
from strom.broker.config import BrokerConfig
from strom.broker.log_replay import replay_batches
from strom.broker.metadata_cache import ClusterMetadataStore
from strom.broker.partition import Partition
from strom.broker.registry_fetch import RemoteLogReader
from strom.broker.replica_manager import ReplicaManager
from strom.broker.security.client import ClientSecurity
from strom.broker.topic_admin import TopicAdmin
from strom.protocol.errors import ErrorCode, KafkaError
from strom.protocol.records.builder import build_batch
from strom.registry import errors
from strom.registry.records import SCHEMAS_TOPIC, Record, RecordError, Writer, writer_record
from strom.registry.registry import SchemaRegistry, Write
from strom.registry.state import RegistryState

log = logging.getLogger(__name__)

APPEND_TIMEOUT_MS = 10_000
FOLLOW_INTERVAL_MS = 200
LEADER_WAIT_MS = 10_000
REPLAY_WAIT_MS = 2_000


class RegistryService:
    def __init__(
        self,
        config: BrokerConfig,
        clock: Clock,
        replica_manager: ReplicaManager,
        metadata: ClusterMetadataStore,
        topics: TopicAdmin,
        security: ClientSecurity,
    ) -> None:
        self.clock = clock
        self.replica_manager = replica_manager
        self._metadata = metadata
        self._topics = topics
        self._replication_factor = int(config.get("offsets.topic.replication.factor"))
        self.registry = SchemaRegistry()
        self.url: str | None = None  # this broker's registry URL, set once the HTTP listener is bound
        self._next_offset = 0  # next ``_schemas`` offset to replay
        self._loaded_from: Partition | None = None  # the replica whose log the state replays
        self._ready = False  # writer: WRITER record committed, writes taken
        self._write_lock = asyncio.Lock()
        self._tasks: list[asyncio.Task[None]] = []
        self._announcing: asyncio.Task[None] | None = None
        self._remote = RemoteLogReader(
            SCHEMAS_TOPIC, metadata, f"registry-{replica_manager.node_id}", security, clock
        )
        self._following_remote = False
        replica_manager.on_leadership_change.append(self._on_leadership_change)

    # --- life cycle ----------------------------------------------------------------------------
    def start(self) -> None:
        self._tasks.append(asyncio.create_task(self._follow()))

    async def stop(self) -> None:
        tasks = [*self._tasks, *([self._announcing] if self._announcing else [])]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
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
                    if self.is_leader and not self._ready and self._announcing is None:
                        self._announcing = asyncio.create_task(self._announce())
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
            self._apply(offset, key, value)
        self._next_offset = max(self._next_offset, fetched.next_offset)
        return bool(fetched.records)

    # --- where the state comes from ------------------------------------------------------------
    def _replica(self) -> Partition | None:
        return self.replica_manager.partitions.get((SCHEMAS_TOPIC, 0))

    @property
    def is_leader(self) -> bool:
        part = self._replica()
        return part is not None and part.leader_id == self.replica_manager.node_id

    @property
    def is_writer(self) -> bool:
        return self.is_leader and self._ready

    def writer_url(self) -> str | None:
        """Where to forward a write: the committed writer's URL (None while there is none)."""
        writer = self.registry.state.writer
        if writer is None:
            return None
        part = self._replica()
        if part is not None:
            leader_id = part.leader_id
        else:
            leader = self._metadata.partition_leader(SCHEMAS_TOPIC, 0)
            leader_id = -1 if leader is None else leader.node_id
        if leader_id >= 0 and leader_id != writer.broker_id:
            return None  # a new leader has not announced itself yet
        return writer.url

    def _on_leadership_change(self, partition: Partition, is_leader: bool) -> None:
        if partition.topic != SCHEMAS_TOPIC:
            return
        self._ready = False
        if self._announcing is not None:
            self._announcing.cancel()
            self._announcing = None
        self._reset(partition)
        self.catch_up()
        log.info(
            "%s-0: %s; state rebuilt to offset %d (%d id(s))",
            SCHEMAS_TOPIC,
            "leader: announcing as the registry writer" if is_leader else "follower",
            self._next_offset,
            len(self.registry.state.schemas),
        )
        if is_leader:
            self._announcing = asyncio.create_task(self._announce())

    def _reset(self, partition: Partition | None) -> None:
        self.registry = SchemaRegistry(RegistryState())
        self._loaded_from = partition
        self._next_offset = 0 if partition is None else partition.log.log_start_offset

    def catch_up(self) -> None:
        """Replay the local replica's committed records (below the high watermark) not yet applied."""
        part = self._replica()
        if part is None:
            return
        self._following_remote = False
        plog = part.log
        if part is not self._loaded_from or plog.log_end_offset < self._next_offset:
            self._reset(part)  # another replica object, or the log was truncated below what we applied
        end = plog.high_watermark
        start = max(self._next_offset, plog.log_start_offset)
        for batch, records in replay_batches(plog.read, start, end, f"{SCHEMAS_TOPIC}-0"):
            if not batch.is_control:
                for record in records:
                    if record.offset < end:
                        self._apply(record.offset, record.key, record.value)
            # An unreadable batch stops the replay there (logged); the next catch-up tries it again.
            self._next_offset = max(self._next_offset, min(batch.next_offset, end))

    def _apply(self, offset: int, key: bytes | None, value: bytes | None) -> None:
        if key is None:
            log.warning("%s: skipping record at offset %d: no key", SCHEMAS_TOPIC, offset)
            return
        try:
            self.registry.state.apply(bytes(key), None if value is None else bytes(value))
        except RecordError as exc:
            log.warning("%s: skipping record at offset %d: %s", SCHEMAS_TOPIC, offset, exc)

    def committed_offset(self) -> int:
        """The local replica's high watermark (0 without one)."""
        part = self._replica()
        return 0 if part is None else part.log.high_watermark

    async def wait_replayed(self, offset: int) -> None:
        """Wait (at most ``REPLAY_WAIT_MS``) until the local replica has replayed up to ``offset``."""
        deadline = self.clock.monotonic_ms() + REPLAY_WAIT_MS
        while True:
            self.catch_up()  # a local replica; without one the follow task fetches meanwhile
            if self._next_offset >= offset or self.clock.monotonic_ms() >= deadline:
                return
            await sleep_ms(self.clock, 10)

    # --- writes --------------------------------------------------------------------------------
    async def _announce(self) -> None:
        """As the new leader: commit a WRITER record, which commits everything before it."""
        part = self._replica()
        if part is None:
            return
        writer = Writer(self.replica_manager.node_id, self.url, part.leader_epoch)
        try:
            await self._append([writer_record(writer)])
        except errors.RegistryError as exc:
            log.warning("%s: announcing the writer failed (%s); retrying", SCHEMAS_TOPIC, exc.message)
            return
        finally:
            self._announcing = None
        if self._replica() is part and self.is_leader:
            self._ready = True
            log.info(
                "%s: broker %d is the registry writer at %s", SCHEMAS_TOPIC, writer.broker_id, writer.url
            )

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
        """Decide against the current state, make the records durable (committed), replay, answer."""
        async with self._write_lock:
            if not self.is_writer:
                raise errors.forwarding_error("this broker is no longer the registry writer")
            part = self._replica()
            if part is not None and part.log.high_watermark < part.log.log_end_offset:
                # An earlier write timed out uncommitted: it commits (and is replayed) before this one.
                await self._wait_committed(part, part.log.log_end_offset)
            self.catch_up()
            decision = decide(self.registry)
            if decision.records:
                await self._append(decision.records)
                self.catch_up()
            return decision.answer

    async def _append(self, records: list[Record]) -> None:
        rm = self.replica_manager
        now = self.clock.time_ms()
        batch = build_batch([(key, value, (), now) for key, value in records])
        try:
            part = rm.leader_partition(SCHEMAS_TOPIC, 0)
            info = rm.append_as_leader(part, batch)
        except KafkaError as exc:
            raise errors.store_error(f"{SCHEMAS_TOPIC} refused the write: {exc.code.name}") from None
        except OSError as exc:
            raise errors.store_error(str(exc)) from None
        await self._wait_committed(part, info.last_offset + 1)

    async def _wait_committed(self, part: Partition, end_offset: int) -> None:
        code = await self.replica_manager.wait_for_replication(part, end_offset, APPEND_TIMEOUT_MS)
        if code is ErrorCode.REQUEST_TIMED_OUT:
            raise errors.operation_timeout(f"{SCHEMAS_TOPIC} did not commit the write in time")
        if code is not ErrorCode.NONE:
            raise errors.store_error(f"{SCHEMAS_TOPIC} refused the write: {code.name}")
