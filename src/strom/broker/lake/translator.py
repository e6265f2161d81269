"""`IcebergTranslator`: each partition this broker leads, of a topic with ``strom.iceberg.mode``, gets a
task on the broker's clock that translates its committed records into the topic's Iceberg table.

Theory of operation. Every ``strom.iceberg.translation.interval.ms`` the translator looks at the
partitions this broker hosts: a leader of an Iceberg topic without a task (or whose task served an
earlier leader epoch) gets one. The task

1. reads the partition's next offset from the topic's table (strom.lake.offsets: the snapshot summary),
   or starts at the log start offset when the table has none; a new leader thus continues where the
   last one's commits stopped, and a broker killed mid-round redoes only what it had not committed;
2. waits until ``strom.iceberg.target.lag.ms`` has passed since its last commit and the last stable
   offset is past its position (a partition behind, whose last round stopped at `ROUND_MAX_BYTES` with
   more to read, does not wait: it catches up round after round, else a partition taking more than
   32 MiB per target lag would fall behind for ever), then reads whole batches from its position up to
   the last stable offset (at most `ROUND_MAX_BYTES`) with their aborted transactions, on the event
   loop (file reads only, one `READ_CHUNK_BYTES` read per turn of the loop);
3. hands them, as the stored bytes, to a worker process (workers.py, strom.lake.worker: decoding,
   schema evolution, Parquet and the catalog commit, out of the broker's interpreter, so the event loop
   neither waits on pyiceberg or pyarrow nor shares its GIL with them), in the idle or the raised pool
   as the partition's backlog controller says for its lag (backlog.py: idle while the lag is within
   ``strom.iceberg.translation.backlog.ms``), then moves its position. The
   registry schemas a round needs are looked up here, in the broker, when the worker asks for them.

The leader of each such topic's partition 0 also runs its tables' maintenance (maintainer.py:
compaction and snapshot expiry) on a thread of its own.

The task ends when the broker stops leading the partition (at that epoch) or the topic's mode turns
``disabled``; what a deposed leader still commits is harmless, since an append only adds rows past the
offset the table records (strom.lake.tables). Failures (catalog down, object store down) are logged and
the round is tried again after a back-off, from the table's offset; produce and fetch never wait for any
of it. Nothing here is built when no topic uses Iceberg: the task list stays empty.

Call only from the broker's event loop.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from functools import partial
from typing import TypeVar

from strom._util.clock import Clock, sleep_ms, yield_to_loop
from strom._util.tasks import cancel_and_wait
from strom.broker.lake.backlog import backlog_bound_ms
from strom.broker.lake.lag import PartitionLag
from strom.broker.lake.maintainer import maintain_tables, maintains
from strom.broker.lake.workers import TranslationWorkers
from strom.broker.replication.partition import Partition
from strom.lake.round import Chunk, RoundResult
from strom.lake.tables import LakeTables, TableRef
from strom.lake.translate import ProtobufLookup, SchemaLookup
from strom.lake.worker import Compiled, RoundRequest
from strom.protocol.errors import ErrorCode, KafkaError
from strom.protocol.records.batch import iter_headers
from strom.protocol.uuid_text import uuid_text
from strom.storage.config import LogConfig
from strom.storage.partition_metadata import read_topic_id

log = logging.getLogger(__name__)

T = TypeVar("T")
TopicPartition = tuple[str, int]

ROUND_MAX_BYTES = 32 * 1024 * 1024
READ_CHUNK_BYTES = 1024 * 1024
RETRY_BACKOFF_MS = 2_000
# How long a record whose schema id the registry does not know holds its partition back before it is
# sent to the dead-letter table (this broker may replay _schemas a moment after the record arrived).
SCHEMA_PATIENCE_MS = 30_000
WORKER_THREADS = 2  # the catalog reads of a task's start (the rounds run in worker processes)


@dataclass
class _Task:
    epoch: int
    task: asyncio.Task[None]


class IcebergTranslator:
    def __init__(
        self,
        partitions: Callable[[], list[Partition]],
        log_config_for: Callable[[str], LogConfig],
        schema_lookup: SchemaLookup,
        tables: LakeTables,
        clock: Clock,
        interval_ms: int,
        topic_id_of: Callable[[str], bytes | None],
        protobuf_lookup: ProtobufLookup | None = None,
        backlog_ms: int = -1,
    ) -> None:
        self._partitions = partitions
        self._log_config_for = log_config_for
        self._schema_lookup = schema_lookup
        self._protobuf_lookup = protobuf_lookup
        # What the worker processes are given, by id: the registry's schemas, Protobuf ones compiled.
        self._schema_texts: dict[int, tuple[str, str]] = {}
        self._compiled: dict[int, Compiled] = {}
        self.tables = tables
        self._workers = TranslationWorkers(tables.settings)
        self._clock = clock
        self.interval_ms = max(interval_ms, 10)
        self.backlog_ms = backlog_ms  # strom.iceberg.translation.backlog.ms (backlog.py)
        self._tasks: dict[TopicPartition, _Task] = {}
        self.lag: dict[TopicPartition, PartitionLag] = {}
        self._topic_id_of = topic_id_of  # the metadata's id of a topic, None for none
        # Iceberg topics this broker translated, as the metadata names them: id and last config.
        self._alive: dict[str, tuple[str, LogConfig]] = {}
        self._drops: set[asyncio.Task[None]] = set()
        self._maintenance: dict[str, _Task] = {}  # by topic: the leader of its partition 0 maintains it
        self._executor: ThreadPoolExecutor | None = None
        self._maintenance_executor: ThreadPoolExecutor | None = None

    async def run(self) -> None:
        """The periodic task (cancelled at shutdown)."""
        try:
            while True:
                await sleep_ms(self._clock, self.interval_ms)
                try:
                    self.run_once()
                except Exception:
                    log.exception("iceberg translator round failed")
        finally:
            await self.stop()

    def run_once(self) -> None:
        self._drop_deleted_topics()
        now_ms = self._clock.time_ms()
        for lag in self.lag.values():
            lag.observe(now_ms)  # dates the records that arrive while a round runs
        for part in self._partitions():
            config = self._log_config_for(part.topic)
            if not part.is_leader or config.strom_iceberg_mode == "disabled":
                continue
            topic_id = self._topic_id_of(part.topic)
            if topic_id is not None:
                self._alive[part.topic] = (uuid_text(topic_id), config)
            epoch = part.leader_epoch
            if not _runs(self._tasks.get(part.tp), epoch):
                self._tasks[part.tp] = _Task(epoch, asyncio.create_task(self._lead(part, epoch)))
            if part.index == 0 and maintains(config) and not _runs(self._maintenance.get(part.topic), epoch):
                task = maintain_tables(
                    part,
                    self._topic_id(part),
                    partial(self._leads, part, epoch),
                    self._log_config_for,
                    self._in_maintenance_thread,
                    self.tables,
                    self._clock,
                )
                self._maintenance[part.topic] = _Task(epoch, asyncio.create_task(task))
        for tp in [tp for tp, running in self._tasks.items() if running.task.done()]:
            del self._tasks[tp]
        for topic in [topic for topic, running in self._maintenance.items() if running.task.done()]:
            del self._maintenance[topic]

    def table_position(self, topic: str, index: int) -> tuple[int, int] | None:
        """A partition this broker translates: its next offset as its table records it, and the wall
        time (ms) since which its oldest record not in the table has waited (-1: none waits); None
        for a partition this broker does not translate (ListOffsets' Iceberg spec)."""
        lag = self.lag.get((topic, index))
        if lag is None or lag.position < 0:
            return None
        return lag.position, lag.waiting_since_ms(self._clock.time_ms())

    async def stop(self) -> None:
        tasks = [t.task for t in (*self._tasks.values(), *self._maintenance.values())] + [*self._drops]
        self._tasks.clear()
        self._maintenance.clear()
        await cancel_and_wait(tasks)
        self._workers.stop()
        for executor in (self._executor, self._maintenance_executor):
            if executor is not None:
                executor.shutdown(wait=False, cancel_futures=True)
        self._executor = self._maintenance_executor = None

    async def _in_thread(self, call: Callable[[], T]) -> T:
        if self._executor is None:
            self._executor = ThreadPoolExecutor(WORKER_THREADS, thread_name_prefix="iceberg")
        return await asyncio.get_running_loop().run_in_executor(self._executor, call)

    async def _in_maintenance_thread(self, call: Callable[[], T]) -> T:
        if self._maintenance_executor is None:
            self._maintenance_executor = ThreadPoolExecutor(1, thread_name_prefix="iceberg-maintenance")
        return await asyncio.get_running_loop().run_in_executor(self._maintenance_executor, call)

    def _topic_id(self, part: Partition) -> str:
        """The partition's topic id as its log directory records it ("" when it records none)."""
        recorded = read_topic_id(part.log.dir)
        return uuid_text(recorded) if recorded is not None else ""

    def _claim(self, main: TableRef) -> dict[int, int]:
        """The topic's tables made its own (an earlier topic's moved away); its next offsets."""
        for ref in main.topic_tables():
            self.tables.claim(ref)
        return self.tables.next_offsets(main)

    def _drop_deleted_topics(self) -> None:
        """Drop the tables of each topic translated here that the metadata no longer has (under its
        id), if its ``strom.iceberg.delete`` is true. Every broker that translated a partition of the
        topic does: dropping is idempotent, and refuses this broker's rounds still in flight. A
        partition moved to another broker is not a deletion: its topic is still in the metadata."""
        for topic, (topic_id, config) in list(self._alive.items()):
            current = self._topic_id_of(topic)
            if current is not None and uuid_text(current) == topic_id:
                continue
            del self._alive[topic]
            for tp in [tp for tp in self._tasks if tp[0] == topic]:
                self._tasks.pop(tp).task.cancel()  # their partitions are gone with the topic
            if topic in self._maintenance:
                self._maintenance.pop(topic).task.cancel()
            if not config.strom_iceberg_delete or not self.tables.forbid(topic_id):
                continue
            for ref in TableRef(topic, config.strom_iceberg_mode, topic_id=topic_id).topic_tables():
                task = asyncio.create_task(self._drop(ref))
                self._drops.add(task)
                task.add_done_callback(self._drops.discard)

    async def _drop(self, ref: TableRef) -> None:
        try:
            await self._workers.wait_topic(ref.topic)  # a round in flight must not bring a table back
            if await self._in_maintenance_thread(partial(self.tables.drop, ref)):
                log.info("iceberg table %s dropped with its topic", ref.name)
        except Exception as exc:
            log.warning("iceberg table %s: drop failed: %r", ref.name, exc)

    def _leads(self, part: Partition, epoch: int) -> bool:
        return part.is_leader and part.leader_epoch == epoch

    async def _lead(self, part: Partition, epoch: int) -> None:
        lag = self.lag[part.tp] = PartitionLag(lambda: part.last_stable_offset)
        try:
            while self._leads(part, epoch):
                config = self._log_config_for(part.topic)
                if config.strom_iceberg_mode == "disabled":
                    return
                try:
                    await self._translate(part, epoch, config, lag)
                except asyncio.CancelledError:
                    raise
                except Exception as exc:
                    log.warning("%s-%d: iceberg translation stopped: %r", part.topic, part.index, exc)
                    await sleep_ms(self._clock, RETRY_BACKOFF_MS)
        finally:
            if self.lag.get(part.tp) is lag:  # the lag of a partition this broker translates no more
                del self.lag[part.tp]

    async def _translate(self, part: Partition, epoch: int, config: LogConfig, lag: PartitionLag) -> None:
        """From the table's offset on, round after round while this broker leads at ``epoch``."""
        mode = config.strom_iceberg_mode
        main = TableRef(part.topic, mode, topic_id=self._topic_id(part))
        recorded = await self._in_thread(partial(self._claim, main))
        position = max(recorded.get(part.index, part.log_start_offset), part.log_start_offset)
        log.info("%s-%d: iceberg translation (%s) from offset %d", part.topic, part.index, mode, position)
        lag.committed(position, self._clock.time_ms())
        last_round = -1 << 62
        waiting_since: int | None = None
        while self._leads(part, epoch):
            config = self._log_config_for(part.topic)
            if config.strom_iceberg_mode != mode:
                return  # turned off or changed: the loop above starts afresh
            lso = lag.observe(self._clock.time_ms())
            now = self._clock.monotonic_ms()
            due = last_round + config.strom_iceberg_target_lag_ms
            if position >= lso:  # nothing committed to translate: look again next interval
                await sleep_ms(self._clock, self.interval_ms)
                continue
            if now < due:
                await sleep_ms(self._clock, max(min(due - now, self.interval_ms), 10))
                continue
            if position < part.log_start_offset:
                log.warning(
                    "%s-%d: offsets %d to %d left the log before translation",
                    part.topic,
                    part.index,
                    position,
                    part.log_start_offset,
                )
                position = part.log_start_offset
            chunks, end = await self._read(part, position, lso)
            behind = end < lso and sum(len(data) for data, _ in chunks) >= ROUND_MAX_BYTES
            give_up = waiting_since is not None and now - waiting_since >= SCHEMA_PATIENCE_MS
            request = RoundRequest(main, part.index, chunks, position, end, give_up)
            bound_ms = backlog_bound_ms(self.backlog_ms, config.strom_iceberg_target_lag_ms)
            result = await self._run_round(request, lag, bound_ms)
            position = result.next_offset
            lag.committed(position, self._clock.time_ms())
            lag.rows += result.rows
            lag.dead += result.dead
            if result.rows or result.dead:
                last_round = self._clock.monotonic_ms()
            if behind and result.waiting_for is None:
                last_round = -1 << 62  # the next round is due at once
            if result.waiting_for is None:
                waiting_since = None
            else:
                # Held by a schema id this broker's registry has not replayed yet: look again soon
                # (a hold is not a commit, so the target lag does not apply to it).
                waiting_since = waiting_since if waiting_since is not None else now
                await sleep_ms(self._clock, self.interval_ms)

    async def _run_round(self, request: RoundRequest, lag: PartitionLag, bound_ms: int) -> RoundResult:
        """Run ``request`` in a worker process, with the registry schemas it asks for, at the share
        the partition's backlog controller gives it (backlog.py) for its lag against ``bound_ms``."""
        unknown: frozenset[int] = frozenset()

        def raised() -> bool:
            return lag.backlog.update(1000 * lag.seconds(self._clock.time_ms()), bound_ms)

        while True:
            result, was_raised = await self._workers.run(
                replace(
                    request,
                    schemas=dict(self._schema_texts),
                    compiled=dict(self._compiled),
                    unknown=unknown,
                    dropped=self.tables.dropped(),
                ),
                raised,
                self.interval_ms / 1000,
            )
            lag.backlog.counted(was_raised)
            if not result.missing:
                return result
            # The registry's reads (and protoc, for a Protobuf schema) block: not on the event loop.
            unknown = await self._in_thread(partial(self._look_up, result.missing))

    def _look_up(self, schema_ids: frozenset[int]) -> frozenset[int]:
        """Look the ids up in the registry for the workers; the ids it does not know."""
        unknown: set[int] = set()
        for schema_id in schema_ids:
            found = self._schema_lookup(schema_id)
            if found is None:
                unknown.add(schema_id)
                continue
            if found[0].upper() == "PROTOBUF" and self._protobuf_lookup is not None:
                try:
                    self._compiled[schema_id] = self._protobuf_lookup(schema_id)
                except Exception as exc:
                    self._compiled[schema_id] = str(exc)  # the worker's reason for its dead letters
            self._schema_texts[schema_id] = found
        return frozenset(unknown)

    async def _read(self, part: Partition, position: int, lso: int) -> tuple[list[Chunk], int]:
        """Whole batches from ``position`` towards ``lso`` (at most ROUND_MAX_BYTES), with their aborted
        transactions; and the offset the read stops at. One READ_CHUNK_BYTES read at a time, letting
        the event loop run between two: produce and fetch wait for one chunk's read at most."""
        chunks: list[Chunk] = []
        total = 0
        offset = position
        while offset < lso and total < ROUND_MAX_BYTES:
            if chunks:
                await yield_to_loop()
            try:
                records, aborted = part.read_committed(offset, READ_CHUNK_BYTES, True)
            except KafkaError as exc:
                if exc.code is ErrorCode.OFFSET_OUT_OF_RANGE:
                    break
                raise
            data = records.read_bytes()
            if not data:
                break
            chunks.append((data, aborted))
            total += len(data)
            offset = _next_offset_after(data, offset)
        return chunks, min(offset, lso)


def _runs(running: _Task | None, epoch: int) -> bool:
    return running is not None and not running.task.done() and running.epoch == epoch


def _next_offset_after(data: bytes, fallback: int) -> int:
    last = fallback
    for _, header in iter_headers(memoryview(data)):
        last = header.next_offset
    return last
