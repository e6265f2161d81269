"""`CoordinatorRuntime`: hosts one coordinator's shards, one per internal-topic partition this broker leads.

Theory of operation (Kafka's ``CoordinatorRuntime`` in ``coordinator-common``, on one asyncio loop):

* **Leadership.** The host calls `on_leadership_change(partition, leader_epoch, is_leader)` from one
  hook (the broker's adapter dispatches the replica manager's leadership changes by topic). Becoming
  leader builds a fresh shard (`ShardBuilder`) in LOADING and loads it; losing leadership (or a new
  epoch) closes the old one first: its timers stop, writes still waiting for the high watermark fail
  with NOT_COORDINATOR, and the shard's `on_unloaded` forgets its state.
* **Loading.** The partition's records from the log start offset to the log end offset, read through
  the `PartitionReader` in chunks (`loader.py`), yielding to the event loop between chunks so a large
  log does not starve other work. An empty log loads at once, inside the hook. Then ACTIVE and
  `on_loaded`. The last written offset is the log end offset and the last committed one the high
  watermark, as Kafka's loader sets them.
* **Requests.** `shard(partition)` is the ACTIVE shard, or a `CoordinatorError`: NOT_COORDINATOR
  (no shard here: not the leader, closed or failed) or COORDINATOR_LOAD_IN_PROGRESS (loading);
  `refusal(partition)` says the same without raising. Reads use the shard directly.
* **Writes.** `write(partition, operation, timeout_ms)` runs ``operation(shard)`` (synchronous, so
  writes to one shard are serialized by the loop); it returns a `CoordinatorResult`. Its records go
  through the `PartitionWriter` as one batch; on success the runtime replays them into the shard
  (unless the result says not to), then waits until the high watermark passes them and only then
  returns the response (acks=all, Kafka's coordinator writes). A result without records still waits
  for the last write before it to commit, so nobody is answered from state the log may lose. Errors:
  the append's refusal or the wait's failure as a `CoordinatorError` (NOT_LEADER_OR_FOLLOWER becomes
  NOT_COORDINATOR; the host maps the rest to what its clients expect), the result's ``on_complete``
  told first. Nothing is replayed before the append succeeded, so a refused append has nothing to
  revert; a replay that raises (a bug or a corrupt record) fails the shard, which reloads from the log.
* **Inline writers.** A state machine that applies its own changes as it writes them (the classic
  group coordinator, called back from parked joins and its own timers) uses `append(partition,
  records)` (one batch now, no replay) and `wait_committed(partition, end_offset, timeout_ms)`.
* **Timers.** Each shard's `CoordinatorTimer` schedules operations on the injected `Clock`; when one
  falls due it runs as a write of that shard (errors logged). Timers die with their shard.

The API new coordinators plug into: a shard class (`CoordinatorShard`: replay, replay_end_transaction,
on_loaded, on_unloaded), a builder taking a `ShardContext`, operations returning `CoordinatorResult`,
and one `CoordinatorRuntime(topic, ...)` per internal topic registered with the broker's leadership
hook.

Call only from the event loop; not thread-safe.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine, Sequence
from typing import Any, Generic, TypeVar

from strom._util.clock import Cancellable, Clock, yield_to_loop
from strom._util.tasks import cancel_and_wait
from strom.coordinator_runtime.loader import READ_CHUNK_BYTES, replay_chunk
from strom.coordinator_runtime.ports import PartitionReader, PartitionWriter
from strom.coordinator_runtime.shard import (
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    CoordinatorError,
    CoordinatorResult,
    CoordinatorShard,
    Record,
    ShardBuilder,
    ShardContext,
    ShardState,
    TimerOperation,
    TransactionalProducer,
    coordinator_batch,
    refusal,
    transition,
)
from strom.protocol.errors import ErrorCode, KafkaError

log = logging.getLogger(__name__)

S = TypeVar("S", bound=CoordinatorShard)
T = TypeVar("T")


class _ShardTimer:
    """One shard's timers on the clock; a due timer runs its operation as a write of the shard."""

    def __init__(self, fire: Callable[[str, TimerOperation], None], clock: Clock) -> None:
        self._fire = fire
        self._clock = clock
        self._handles: dict[str, Cancellable] = {}

    def schedule(self, key: str, delay_ms: int, operation: TimerOperation) -> None:
        self.cancel(key)

        def due() -> None:
            self._handles.pop(key, None)
            self._fire(key, operation)

        self._handles[key] = self._clock.call_later(delay_ms, due)

    def cancel(self, key: str) -> None:
        handle = self._handles.pop(key, None)
        if handle is not None:
            handle.cancel()

    def cancel_all(self) -> None:
        for handle in self._handles.values():
            handle.cancel()
        self._handles.clear()


class _Context(Generic[S]):
    """One partition's shard and its bookkeeping."""

    def __init__(self, partition: int, leader_epoch: int, gone: asyncio.Future[None]) -> None:
        self.partition = partition
        self.leader_epoch = leader_epoch
        self.state = ShardState.INITIAL
        self.shard: S | None = None
        self.timer: _ShardTimer | None = None
        self.load_task: asyncio.Task[None] | None = None
        self.gone = gone  # done once the shard is closed: waiting writes fail
        self.last_written_end = 0
        self.last_committed_end = 0

    def move(self, target: ShardState) -> None:
        self.state = transition(self.state, target)


class CoordinatorRuntime(Generic[S]):
    def __init__(
        self,
        topic: str,
        clock: Clock,
        writer: PartitionWriter,
        reader: PartitionReader,
        build: ShardBuilder[S],
        timer_write_timeout_ms: int = 5_000,
    ) -> None:
        self.topic = topic
        self._clock = clock
        self._writer = writer
        self._reader = reader
        self._build = build
        self._timer_write_timeout_ms = timer_write_timeout_ms
        self._contexts: dict[int, _Context[S]] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    # --- leadership ----------------------------------------------------------------------------
    def on_leadership_change(self, partition: int, leader_epoch: int, is_leader: bool) -> None:
        """The one hook: this broker became (``is_leader``) or stopped being the partition's leader."""
        old = self._contexts.pop(partition, None)
        if old is not None:
            self._close(old)
        if is_leader:
            self._start_load(partition, leader_epoch)

    def _start_load(self, partition: int, leader_epoch: int) -> None:
        ctx: _Context[S] = _Context(partition, leader_epoch, asyncio.get_running_loop().create_future())
        self._contexts[partition] = ctx
        timer = ctx.timer = _ShardTimer(lambda key, op: self._fire_timer(ctx, key, op), self._clock)
        ctx.shard = self._build(ShardContext(self.topic, partition, leader_epoch, self._clock, timer))
        ctx.move(ShardState.LOADING)
        try:
            start = self._reader.log_start_offset(self.topic, partition)
            empty = start >= self._reader.log_end_offset(self.topic, partition)
        except KafkaError:
            log.exception("%s-%d: cannot load the coordinator state", self.topic, partition)
            ctx.move(ShardState.FAILED)
            return
        if empty:
            self._activate(ctx, start)  # nothing to read: no reason to answer LOAD_IN_PROGRESS
            return
        ctx.load_task = self._spawn(self._load(ctx, start))

    async def _load(self, ctx: _Context[S], offset: int) -> None:
        shard = ctx.shard
        assert shard is not None
        name = f"{self.topic}-{ctx.partition}"
        try:
            while True:
                end = self._reader.log_end_offset(self.topic, ctx.partition)
                if offset >= end:
                    break
                data = self._reader.read(self.topic, ctx.partition, offset, READ_CHUNK_BYTES, end)
                replayed = replay_chunk(shard, data, offset, name)
                offset = replayed.next_offset
                if replayed.stop:
                    break
                await yield_to_loop()  # one chunk at a time: other requests run between chunks
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("%s: loading the coordinator state failed", name)
            ctx.move(ShardState.FAILED)
            return
        ctx.load_task = None
        self._activate(ctx, offset)

    def _activate(self, ctx: _Context[S], end: int) -> None:
        shard = ctx.shard
        assert shard is not None
        try:
            ctx.last_written_end = self._reader.log_end_offset(self.topic, ctx.partition)
            ctx.last_committed_end = self._reader.high_watermark(self.topic, ctx.partition)
            ctx.move(ShardState.ACTIVE)
            shard.on_loaded()
        except Exception:
            # The shard never serves: requests get NOT_COORDINATOR until leadership changes again.
            log.exception("%s-%d: activating the coordinator state failed", self.topic, ctx.partition)
            ctx.move(ShardState.FAILED)
            return
        log.info("%s-%d: coordinator state loaded to offset %d", self.topic, ctx.partition, end)

    def _close(self, ctx: _Context[S]) -> None:
        if ctx.load_task is not None:
            ctx.load_task.cancel()
            ctx.load_task = None
        if ctx.timer is not None:
            ctx.timer.cancel_all()
        was = ctx.state
        ctx.move(ShardState.CLOSED)
        if not ctx.gone.done():
            ctx.gone.set_result(None)
        if ctx.shard is not None and was is not ShardState.INITIAL:
            try:
                ctx.shard.on_unloaded()
            except Exception:
                log.exception("%s-%d: unloading the coordinator state failed", self.topic, ctx.partition)

    def _fail_and_reload(self, ctx: _Context[S]) -> None:
        """A replay into the shard raised: its state is suspect, so rebuild it from the log."""
        if self._contexts.get(ctx.partition) is not ctx:
            return
        log.error("%s-%d: coordinator state failed; reloading it from the log", self.topic, ctx.partition)
        ctx.move(ShardState.FAILED)
        del self._contexts[ctx.partition]
        self._close(ctx)
        self._start_load(ctx.partition, ctx.leader_epoch)

    # --- lookups -------------------------------------------------------------------------------
    def refusal(self, partition: int) -> ErrorCode | None:
        """None if the partition's shard is ACTIVE here, else what a request for it gets."""
        ctx = self._contexts.get(partition)
        return refusal(None if ctx is None else ctx.state)

    def shard(self, partition: int) -> S:
        """The partition's ACTIVE shard.

        Raises:
            CoordinatorError: NOT_COORDINATOR or COORDINATOR_LOAD_IN_PROGRESS.
        """
        shard = self._active(partition).shard
        assert shard is not None
        return shard

    def active_shards(self) -> dict[int, S]:
        return {
            p: ctx.shard
            for p, ctx in self._contexts.items()
            if ctx.state is ShardState.ACTIVE and ctx.shard is not None
        }

    def loading(self) -> bool:
        """Whether a partition this broker leads is still loading."""
        return any(ctx.state is ShardState.LOADING for ctx in self._contexts.values())

    def leader_epoch(self, partition: int) -> int | None:
        """The leader epoch the partition's ACTIVE shard was loaded at (Kafka's coordinator epoch)."""
        ctx = self._contexts.get(partition)
        return ctx.leader_epoch if ctx is not None and ctx.state is ShardState.ACTIVE else None

    def _active(self, partition: int) -> _Context[S]:
        ctx = self._contexts.get(partition)
        if ctx is None or ctx.state is not ShardState.ACTIVE:
            code = refusal(None if ctx is None else ctx.state) or ErrorCode.NOT_COORDINATOR
            raise CoordinatorError(code, f"{self.topic}-{partition}: {code.name}")
        return ctx

    # --- writes --------------------------------------------------------------------------------
    async def write(
        self, partition: int, operation: Callable[[S], CoordinatorResult[T]], timeout_ms: int
    ) -> T:
        """Run ``operation`` on the partition's shard, make its records durable, answer.

        Raises:
            CoordinatorError: the shard is not active, the append was refused, or the records did not
                commit (the result's ``on_complete`` has been told the code).
        """
        ctx = self._active(partition)
        assert ctx.shard is not None
        result = operation(ctx.shard)
        try:
            if result.records:
                end = self._append(ctx, result.records, result.producer)
                if result.replay_records:
                    self._replay(ctx, result, end)
            else:
                end = ctx.last_written_end
            if end > ctx.last_committed_end:
                await self._wait(ctx, end, timeout_ms)
        except CoordinatorError as exc:
            if result.on_complete is not None:
                result.on_complete(exc.code)
            raise
        if result.on_complete is not None:
            result.on_complete(ErrorCode.NONE)
        return result.response

    def append(
        self, partition: int, records: Sequence[Record], producer: TransactionalProducer | None = None
    ) -> int:
        """An inline writer's records as one batch now (not replayed); returns the offset after them.

        Raises:
            CoordinatorError: the shard is not active or the append was refused.
        """
        return self._append(self._active(partition), records, producer)

    async def wait_committed(self, partition: int, end_offset: int | None, timeout_ms: int) -> None:
        """Wait until the high watermark passes ``end_offset`` (None: the last write to the partition).

        Raises:
            CoordinatorError: leadership moved, or the wait failed (timeout, ISR below its minimum).
        """
        ctx = self._active(partition)
        end = ctx.last_written_end if end_offset is None else end_offset
        if end > ctx.last_committed_end:
            await self._wait(ctx, end, timeout_ms)

    def _append(
        self, ctx: _Context[S], records: Sequence[Record], producer: TransactionalProducer | None
    ) -> int:
        batch = coordinator_batch(records, self._clock.time_ms(), producer)
        try:
            end = self._writer.append(self.topic, ctx.partition, batch, producer is not None)
        except KafkaError as exc:
            code = exc.code
            if code is ErrorCode.NOT_LEADER_OR_FOLLOWER:
                code = ErrorCode.NOT_COORDINATOR
            raise CoordinatorError(code, str(exc), exc.code) from exc
        ctx.last_written_end = max(ctx.last_written_end, end)
        return end

    def _replay(self, ctx: _Context[S], result: CoordinatorResult[T], end: int) -> None:
        shard = ctx.shard
        assert shard is not None
        producer = result.producer
        pid = NO_PRODUCER_ID if producer is None else producer.producer_id
        epoch = NO_PRODUCER_EPOCH if producer is None else producer.producer_epoch
        offset = end - len(result.records)
        try:
            for key, value in result.records:
                shard.replay(offset, pid, epoch, key, value)
                offset += 1
        except Exception as exc:
            log.exception("%s-%d: replaying a write failed", self.topic, ctx.partition)
            self._fail_and_reload(ctx)
            raise CoordinatorError(ErrorCode.NOT_COORDINATOR, f"replay failed: {exc}") from exc

    async def _wait(self, ctx: _Context[S], end: int, timeout_ms: int) -> None:
        try:
            committed = self._reader.high_watermark(self.topic, ctx.partition)
        except KafkaError as exc:  # the replica is gone
            raise CoordinatorError(ErrorCode.NOT_COORDINATOR, str(exc), exc.code) from exc
        if committed >= end:
            ctx.last_committed_end = max(ctx.last_committed_end, end)  # e.g. the ISR is this broker
            return
        waiter = asyncio.ensure_future(
            self._writer.wait_committed(self.topic, ctx.partition, end, timeout_ms)
        )
        try:
            waits: list[asyncio.Future[Any]] = [waiter, ctx.gone]
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            if not waiter.done():
                waiter.cancel()
        if ctx.gone.done() or not waiter.done() or waiter.cancelled():
            raise CoordinatorError(
                ErrorCode.NOT_COORDINATOR,
                f"{self.topic}-{ctx.partition}: leadership moved before offset {end} committed",
                ErrorCode.NOT_LEADER_OR_FOLLOWER,
            )
        code = waiter.result()
        if code is ErrorCode.NONE:
            ctx.last_committed_end = max(ctx.last_committed_end, end)
            return
        mapped = ErrorCode.NOT_COORDINATOR if code is ErrorCode.NOT_LEADER_OR_FOLLOWER else code
        raise CoordinatorError(mapped, f"{self.topic}-{ctx.partition}: records to {end} not committed", code)

    # --- timers --------------------------------------------------------------------------------
    def _fire_timer(self, ctx: _Context[S], key: str, operation: TimerOperation) -> None:
        if self._contexts.get(ctx.partition) is not ctx or ctx.state is not ShardState.ACTIVE:
            return
        self._spawn(self._run_timer(ctx.partition, key, operation))

    async def _run_timer(self, partition: int, key: str, operation: TimerOperation) -> None:
        try:
            await self.write(partition, lambda _shard: operation(), self._timer_write_timeout_ms)
        except CoordinatorError as exc:
            log.warning("%s-%d: timer %s: %s", self.topic, partition, key, exc.cause.name)
        except Exception:
            log.exception("%s-%d: timer %s failed", self.topic, partition, key)

    # --- life cycle ----------------------------------------------------------------------------
    def _spawn(self, coro: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def close(self) -> None:
        """Close every shard (the broker stops) and wait for the runtime's tasks to end."""
        for ctx in list(self._contexts.values()):
            self._close(ctx)
        self._contexts.clear()
        await cancel_and_wait(self._tasks)
