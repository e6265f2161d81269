"""`IcebergTranslator`: each partition this broker leads, of a topic with ``strom.iceberg.mode``, gets a
task on the broker's clock that translates its committed records into the topic's Iceberg table.

Theory of operation. Every ``strom.iceberg.translation.interval.ms`` the translator looks at the
partitions this broker hosts: a leader of an Iceberg topic without a task (or whose task served an
earlier leader epoch) gets one. The task

1. reads the partition's next offset from the topic's table (strom.lake.offsets: the snapshot summary),
   or starts at the log start offset when the table has none; a new leader thus continues where the
   last one's commits stopped, and a broker killed mid-round redoes only what it had not committed;
2. waits until ``strom.iceberg.target.lag.ms`` has passed since its last commit and the last stable
   offset is past its position, then reads whole batches from its position up to the last stable offset
   (at most `ROUND_MAX_BYTES`) with their aborted transactions, on the event loop (file reads only);
3. hands them to a worker thread (strom.lake.round: decoding, schema evolution, Parquet and the catalog
   commit; the event loop never waits on pyiceberg or pyarrow), then moves its position.

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
from dataclasses import dataclass
from functools import partial
from typing import TypeVar

from strom._util.clock import Clock, sleep_ms
from strom._util.tasks import cancel_and_wait
from strom.broker.replication.partition import Partition
from strom.lake.round import Chunk, RoundResult, run_round
from strom.lake.tables import LakeTables, TableRef
from strom.lake.translate import KEY_VALUE, SchemaCache, SchemaLookup
from strom.protocol.errors import ErrorCode, KafkaError
from strom.protocol.records.batch import iter_headers
from strom.storage.config import LogConfig

log = logging.getLogger(__name__)

T = TypeVar("T")
TopicPartition = tuple[str, int]

ROUND_MAX_BYTES = 32 * 1024 * 1024
READ_CHUNK_BYTES = 1024 * 1024
RETRY_BACKOFF_MS = 2_000
# How long a record whose schema id the registry does not know holds its partition back before it is
# sent to the dead-letter table (this broker may replay _schemas a moment after the record arrived).
SCHEMA_PATIENCE_MS = 30_000
WORKER_THREADS = 2


@dataclass
class PartitionLag:
    """One partition's translation state, for /metrics and ``strom topics describe``."""

    position: int = -1  # next offset to translate
    last_stable_offset: int = -1
    last_commit_ms: int = -1  # wall time of the last commit (or of the task's start)
    rows: int = 0  # rows appended since the task started
    dead: int = 0  # dead letters appended since the task started

    @property
    def records(self) -> int:
        return max(self.last_stable_offset - self.position, 0)


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
    ) -> None:
        self._partitions = partitions
        self._log_config_for = log_config_for
        self._schemas = SchemaCache(schema_lookup)
        self.tables = tables
        self._clock = clock
        self.interval_ms = max(interval_ms, 10)
        self._tasks: dict[TopicPartition, _Task] = {}
        self.lag: dict[TopicPartition, PartitionLag] = {}
        self._executor: ThreadPoolExecutor | None = None

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
        for part in self._partitions():
            if not part.is_leader or self._log_config_for(part.topic).strom_iceberg_mode == "disabled":
                continue
            running = self._tasks.get(part.tp)
            if running is not None and not running.task.done() and running.epoch == part.leader_epoch:
                continue
            epoch = part.leader_epoch
            self._tasks[part.tp] = _Task(epoch, asyncio.create_task(self._lead(part, epoch)))
        for tp, running in list(self._tasks.items()):
            if running.task.done():
                del self._tasks[tp]

    async def stop(self) -> None:
        tasks = [t.task for t in self._tasks.values()]
        self._tasks.clear()
        await cancel_and_wait(tasks)
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)
            self._executor = None

    async def _in_thread(self, call: Callable[[], T]) -> T:
        if self._executor is None:
            self._executor = ThreadPoolExecutor(WORKER_THREADS, thread_name_prefix="iceberg")
        return await asyncio.get_running_loop().run_in_executor(self._executor, call)

    def _leads(self, part: Partition, epoch: int) -> bool:
        return part.is_leader and part.leader_epoch == epoch

    async def _lead(self, part: Partition, epoch: int) -> None:
        lag = self.lag.setdefault(part.tp, PartitionLag())
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

    async def _translate(self, part: Partition, epoch: int, config: LogConfig, lag: PartitionLag) -> None:
        """From the table's offset on, round after round while this broker leads at ``epoch``."""
        mode = config.strom_iceberg_mode
        recorded = await self._in_thread(partial(self.tables.next_offsets, TableRef(part.topic, mode)))
        position = max(recorded.get(part.index, part.log_start_offset), part.log_start_offset)
        log.info("%s-%d: iceberg translation (%s) from offset %d", part.topic, part.index, mode, position)
        lag.position = position
        lag.last_commit_ms = self._clock.time_ms()
        last_round = -1 << 62
        waiting_since: int | None = None
        while self._leads(part, epoch):
            config = self._log_config_for(part.topic)
            if config.strom_iceberg_mode != mode:
                return  # turned off or changed: the loop above starts afresh
            lso = lag.last_stable_offset = part.last_stable_offset
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
            chunks, end = self._read(part, position, lso)
            give_up = waiting_since is not None and now - waiting_since >= SCHEMA_PATIENCE_MS
            result: RoundResult = await self._in_thread(
                partial(
                    run_round,
                    self.tables,
                    part.topic,
                    mode,
                    part.index,
                    chunks,
                    position,
                    end,
                    None if mode == KEY_VALUE else self._schemas,
                    give_up,
                )
            )
            position = lag.position = result.next_offset
            lag.rows += result.rows
            lag.dead += result.dead
            if result.rows or result.dead:
                lag.last_commit_ms = self._clock.time_ms()
                last_round = self._clock.monotonic_ms()
            if result.waiting_for is None:
                waiting_since = None
            else:
                # Held by a schema id this broker's registry has not replayed yet: look again soon
                # (a hold is not a commit, so the target lag does not apply to it).
                waiting_since = waiting_since if waiting_since is not None else now
                await sleep_ms(self._clock, self.interval_ms)

    def _read(self, part: Partition, position: int, lso: int) -> tuple[list[Chunk], int]:
        """Whole batches from ``position`` towards ``lso`` (at most ROUND_MAX_BYTES), with their aborted
        transactions; and the offset the read stops at."""
        chunks: list[Chunk] = []
        total = 0
        offset = position
        while offset < lso and total < ROUND_MAX_BYTES:
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


def _next_offset_after(data: bytes, fallback: int) -> int:
    last = fallback
    for _, header in iter_headers(memoryview(data)):
        last = header.next_offset
    return last
