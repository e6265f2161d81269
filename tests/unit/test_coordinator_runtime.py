"""The coordinator runtime without sockets: loading, writes waiting for the high watermark, timers on a
manual clock, leadership loss, refused appends, and the shard state table.

The ports are an in-memory partition log (`MemoryPartitions`): real record batches, offsets assigned at
append, a high watermark the test moves (or that follows every append), waits that park until it does.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

import pytest

from strom._util.clock import ManualClock
from strom.coordinator_runtime import (
    NO_PRODUCER_ID,
    CoordinatorError,
    CoordinatorResult,
    CoordinatorRuntime,
    ShardContext,
    ShardState,
    TransactionalProducer,
)
from strom.coordinator_runtime import runtime as runtime_module
from strom.coordinator_runtime.shard import coordinator_batch, refusal, transition
from strom.protocol.errors import ErrorCode, KafkaError
from strom.protocol.records.batch import iter_headers, patch_base_offset
from strom.protocol.records.builder import build_batch
from strom.protocol.records.control import ControlType, EndTxnMarker, build_marker_batch

TOPIC = "__test_state"


class MemoryLog:
    def __init__(self) -> None:
        self.data = bytearray()
        self.end = 0
        self.high_watermark = 0


class MemoryPartitions:
    """`PartitionWriter` + `PartitionReader` over in-memory logs of one topic."""

    def __init__(self, auto_commit: bool = True) -> None:
        self.logs: dict[int, MemoryLog] = {}
        self.auto_commit = auto_commit
        self.refuse: ErrorCode | None = None
        self._waiters: list[tuple[int, int, asyncio.Future[ErrorCode]]] = []

    def log(self, partition: int) -> MemoryLog:
        return self.logs.setdefault(partition, MemoryLog())

    # PartitionWriter
    def append(self, topic: str, partition: int, batch: bytes, transactional: bool) -> int:
        assert topic == TOPIC
        if self.refuse is not None:
            raise KafkaError(self.refuse, "refused by the test")
        plog = self.log(partition)
        buf = bytearray(batch)
        patch_base_offset(buf, 0, plog.end)
        (_, header), *_ = iter_headers(buf)
        plog.data += buf
        plog.end += header.last_offset_delta + 1
        if self.auto_commit:
            self.commit(partition)
        return plog.end

    async def wait_committed(self, topic: str, partition: int, end_offset: int, timeout_ms: int) -> ErrorCode:
        if self.log(partition).high_watermark >= end_offset:
            return ErrorCode.NONE
        fut: asyncio.Future[ErrorCode] = asyncio.get_running_loop().create_future()
        self._waiters.append((partition, end_offset, fut))
        return await fut

    def commit(self, partition: int) -> None:
        plog = self.log(partition)
        plog.high_watermark = plog.end
        self._resolve(partition, lambda end: ErrorCode.NONE if end <= plog.high_watermark else None)

    def fail_waits(self, partition: int, code: ErrorCode) -> None:
        self._resolve(partition, lambda _end: code)

    def _resolve(self, partition: int, outcome: Callable[[int], ErrorCode | None]) -> None:
        keep = []
        for p, end, fut in self._waiters:
            code = outcome(end) if p == partition else None
            if code is None:
                keep.append((p, end, fut))
            elif not fut.done():
                fut.set_result(code)
        self._waiters = keep

    # PartitionReader
    def log_start_offset(self, topic: str, partition: int) -> int:
        return 0

    def log_end_offset(self, topic: str, partition: int) -> int:
        return self.log(partition).end

    def high_watermark(self, topic: str, partition: int) -> int:
        return self.log(partition).high_watermark

    def read(self, topic: str, partition: int, offset: int, max_bytes: int, end_offset: int) -> bytes:
        plog = self.log(partition)
        out = bytearray()
        for pos, header in iter_headers(plog.data):
            last = header.base_offset + header.last_offset_delta
            if last < offset or header.base_offset >= end_offset:
                continue
            size = header.batch_length + 12
            if out and len(out) + size > max_bytes:
                break
            out += plog.data[pos : pos + size]
        return bytes(out)


class RecordingShard:
    """A shard whose state is the list of records it replayed (keys and values as text)."""

    def __init__(
        self, context: ShardContext, on_loaded: Callable[[RecordingShard], None] | None = None
    ) -> None:
        self.context = context
        self.records: list[tuple[int, int, str, str | None]] = []
        self.markers: list[tuple[int, bool]] = []
        self.loaded = self.unloaded = False
        self.poison: str | None = None  # a key whose replay raises once
        self._on_loaded = on_loaded

    def replay(
        self, offset: int, producer_id: int, producer_epoch: int, key: bytes | None, value: bytes | None
    ) -> None:
        assert key is not None
        if key.decode() == self.poison:
            self.poison = None
            raise ValueError("poison record")
        self.records.append((offset, producer_id, key.decode(), None if value is None else value.decode()))

    def replay_end_transaction(self, producer_id: int, producer_epoch: int, commit: bool) -> None:
        self.markers.append((producer_id, commit))

    def on_loaded(self) -> None:
        self.loaded = True
        if self._on_loaded is not None:
            self._on_loaded(self)

    def on_unloaded(self) -> None:
        self.unloaded = True

    def keys(self) -> list[str]:
        return [key for _, _, key, _ in self.records]


def put(*pairs: tuple[str, str | None]) -> Callable[[RecordingShard], CoordinatorResult[str]]:
    def operation(shard: RecordingShard) -> CoordinatorResult[str]:
        records = [(k.encode(), None if v is None else v.encode()) for k, v in pairs]
        return CoordinatorResult(records, f"wrote {len(records)} after {len(shard.records)}")

    return operation


def make_runtime(
    ports: MemoryPartitions,
    clock: ManualClock | None = None,
    on_loaded: Callable[[RecordingShard], None] | None = None,
) -> tuple[CoordinatorRuntime[RecordingShard], list[RecordingShard]]:
    built: list[RecordingShard] = []

    def build(context: ShardContext) -> RecordingShard:
        shard = RecordingShard(context, on_loaded)
        built.append(shard)
        return shard

    runtime = CoordinatorRuntime(TOPIC, clock or ManualClock(), ports, ports, build)
    return runtime, built


def run(scenario: Callable[[], Coroutine[Any, Any, None]]) -> None:
    asyncio.run(scenario())


async def settle(rounds: int = 20) -> None:
    for _ in range(rounds):
        await asyncio.sleep(0)


def stored(ports: MemoryPartitions, partition: int, *keys: str) -> None:
    for key in keys:
        ports.append(TOPIC, partition, coordinator_batch([(key.encode(), b"v")], 0), False)


# --- the shard state table -----------------------------------------------------------------------


def test_shard_states_move_only_from_their_valid_previous_states() -> None:
    S = ShardState
    assert transition(S.INITIAL, S.LOADING) is S.LOADING
    assert transition(S.LOADING, S.ACTIVE) is S.ACTIVE
    assert transition(S.ACTIVE, S.FAILED) is S.FAILED
    assert transition(S.FAILED, S.LOADING) is S.LOADING
    for state in (S.INITIAL, S.LOADING, S.ACTIVE, S.FAILED):
        assert transition(state, S.CLOSED) is S.CLOSED
    illegal = [(S.INITIAL, S.ACTIVE), (S.CLOSED, S.LOADING), (S.ACTIVE, S.LOADING), (S.CLOSED, S.CLOSED)]
    for current, target in illegal:
        with pytest.raises(RuntimeError):
            transition(current, target)
    assert refusal(S.ACTIVE) is None
    assert refusal(S.LOADING) is ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
    assert {refusal(s) for s in (S.INITIAL, S.FAILED, S.CLOSED, None)} == {ErrorCode.NOT_COORDINATOR}


# --- loading -------------------------------------------------------------------------------------


def test_a_new_leader_loads_the_partition_in_chunks_while_other_tasks_run(monkeypatch: Any) -> None:
    monkeypatch.setattr(runtime_module, "READ_CHUNK_BYTES", 1)  # one batch per read
    ports = MemoryPartitions()
    stored(ports, 3, *(f"k{i}" for i in range(10)))

    async def scenario() -> None:
        runtime, built = make_runtime(ports)
        ticks = 0

        async def ticker() -> None:
            nonlocal ticks
            while True:
                ticks += 1
                await asyncio.sleep(0)

        ticking = asyncio.create_task(ticker())
        runtime.on_leadership_change(3, 7, True)
        assert runtime.refusal(3) is ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        with pytest.raises(CoordinatorError) as refused:
            await runtime.write(3, put(("x", "y")), 1_000)
        assert refused.value.code is ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        await settle(40)
        ticking.cancel()
        shard = built[0]
        assert runtime.refusal(3) is None and shard.loaded and runtime.shard(3) is shard
        assert shard.keys() == [f"k{i}" for i in range(10)]
        assert [offset for offset, *_ in shard.records] == list(range(10))
        assert ticks >= 9  # the loop ran other work between the ten chunks
        assert shard.context.leader_epoch == 7 and runtime.leader_epoch(3) == 7
        assert runtime.refusal(4) is ErrorCode.NOT_COORDINATOR  # not led here
        await runtime.close()

    run(scenario)


def test_loading_applies_transactional_records_and_their_markers() -> None:
    ports = MemoryPartitions()
    stored(ports, 0, "plain")
    producer = TransactionalProducer(42, 3)
    ports.append(TOPIC, 0, coordinator_batch([(b"txn", b"v")], 0, producer), True)
    ports.append(TOPIC, 0, build_marker_batch(42, 3, EndTxnMarker(ControlType.COMMIT, 5), 0), True)

    async def scenario() -> None:
        runtime, built = make_runtime(ports)
        runtime.on_leadership_change(0, 1, True)
        await settle()
        shard = built[0]
        assert [(key, pid) for _, pid, key, _ in shard.records] == [("plain", NO_PRODUCER_ID), ("txn", 42)]
        assert shard.markers == [(42, True)]
        await runtime.close()

    run(scenario)


def test_an_empty_partition_is_active_at_once() -> None:
    async def scenario() -> None:
        runtime, built = make_runtime(MemoryPartitions())
        runtime.on_leadership_change(0, 1, True)
        assert runtime.refusal(0) is None and built[0].loaded
        await runtime.close()
        assert built[0].unloaded and runtime.refusal(0) is ErrorCode.NOT_COORDINATOR

    run(scenario)


# --- writes --------------------------------------------------------------------------------------


def test_a_write_is_applied_at_its_append_and_answered_once_the_high_watermark_passes_it() -> None:
    ports = MemoryPartitions(auto_commit=False)

    async def scenario() -> None:
        runtime, built = make_runtime(ports)
        runtime.on_leadership_change(0, 1, True)
        outcomes: list[ErrorCode] = []

        def operation(shard: RecordingShard) -> CoordinatorResult[str]:
            return CoordinatorResult([(b"a", b"1"), (b"b", None)], "done", on_complete=outcomes.append)

        writing = asyncio.create_task(runtime.write(0, operation, 5_000))
        await settle()
        assert not writing.done() and outcomes == []
        assert built[0].records == [(0, NO_PRODUCER_ID, "a", "1"), (1, NO_PRODUCER_ID, "b", None)]
        assert ports.log(0).end == 2  # one batch of two records
        # A result without records waits for the write before it.
        reading = asyncio.create_task(
            runtime.write(0, lambda s: CoordinatorResult([], len(s.records)), 5_000)
        )
        await settle()
        assert not reading.done()
        ports.commit(0)
        assert await writing == "done" and await reading == 2
        assert outcomes == [ErrorCode.NONE]
        # Everything is committed now: a read answers at once.
        assert await runtime.write(0, lambda s: CoordinatorResult([], "now"), 5_000) == "now"
        await runtime.close()

    run(scenario)


def test_a_result_that_does_not_replay_leaves_the_state_to_its_completion() -> None:
    ports = MemoryPartitions()

    async def scenario() -> None:
        runtime, built = make_runtime(ports)
        runtime.on_leadership_change(0, 1, True)
        seen: list[ErrorCode] = []
        result = CoordinatorResult([(b"k", b"v")], "ok", replay_records=False, on_complete=seen.append)
        assert await runtime.write(0, lambda _s: result, 1_000) == "ok"
        assert built[0].records == [] and seen == [ErrorCode.NONE] and ports.log(0).end == 1
        await runtime.close()

    run(scenario)


def test_leadership_lost_mid_write_answers_not_coordinator_and_unloads_the_shard() -> None:
    ports = MemoryPartitions(auto_commit=False)

    async def scenario() -> None:
        runtime, built = make_runtime(ports)
        runtime.on_leadership_change(0, 1, True)
        writing = asyncio.create_task(runtime.write(0, put(("a", "1")), 5_000))
        await settle()
        runtime.on_leadership_change(0, 2, False)
        with pytest.raises(CoordinatorError) as lost:
            await writing
        assert lost.value.code is ErrorCode.NOT_COORDINATOR
        assert built[0].unloaded and runtime.refusal(0) is ErrorCode.NOT_COORDINATOR
        with pytest.raises(CoordinatorError):
            runtime.shard(0)
        await runtime.close()

    run(scenario)


def test_a_failed_replication_wait_reaches_the_caller_with_its_code() -> None:
    ports = MemoryPartitions(auto_commit=False)

    async def scenario() -> None:
        runtime, _ = make_runtime(ports)
        runtime.on_leadership_change(0, 1, True)
        writing = asyncio.create_task(runtime.write(0, put(("a", "1")), 5_000))
        await settle()
        ports.fail_waits(0, ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND)
        with pytest.raises(CoordinatorError) as failed:
            await writing
        assert failed.value.code is ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND
        await runtime.close()

    run(scenario)


def test_a_refused_append_changes_nothing_and_not_leader_becomes_not_coordinator() -> None:
    ports = MemoryPartitions()

    async def scenario() -> None:
        runtime, built = make_runtime(ports)
        runtime.on_leadership_change(0, 1, True)
        seen: list[ErrorCode] = []
        ports.refuse = ErrorCode.KAFKA_STORAGE_ERROR

        def operation(_shard: RecordingShard) -> CoordinatorResult[str]:
            return CoordinatorResult([(b"a", b"1")], "never", on_complete=seen.append)

        with pytest.raises(CoordinatorError) as refused:
            await runtime.write(0, operation, 1_000)
        assert refused.value.code is ErrorCode.KAFKA_STORAGE_ERROR and seen == [ErrorCode.KAFKA_STORAGE_ERROR]
        ports.refuse = ErrorCode.NOT_LEADER_OR_FOLLOWER
        with pytest.raises(CoordinatorError) as moved:
            runtime.append(0, [(b"a", b"1")])
        assert moved.value.code is ErrorCode.NOT_COORDINATOR
        assert moved.value.cause is ErrorCode.NOT_LEADER_OR_FOLLOWER
        assert built[0].records == [] and ports.log(0).end == 0 and runtime.refusal(0) is None
        await runtime.close()

    run(scenario)


def test_a_replay_that_raises_fails_the_shard_and_reloads_it_from_the_log() -> None:
    ports = MemoryPartitions()
    stored(ports, 0, "before")

    async def scenario() -> None:
        runtime, built = make_runtime(ports)
        runtime.on_leadership_change(0, 1, True)
        await settle()
        built[0].poison = "bad"
        with pytest.raises(CoordinatorError) as failed:
            await runtime.write(0, put(("bad", "1")), 1_000)
        assert failed.value.code is ErrorCode.NOT_COORDINATOR
        assert built[0].unloaded
        await settle()
        assert len(built) == 2 and runtime.shard(0) is built[1]
        assert built[1].keys() == ["before", "bad"]  # the log is the truth
        await runtime.close()

    run(scenario)


def test_inline_appends_and_waits() -> None:
    ports = MemoryPartitions(auto_commit=False)

    async def scenario() -> None:
        runtime, built = make_runtime(ports)
        runtime.on_leadership_change(0, 1, True)
        end = runtime.append(0, [(b"g", b"1")], TransactionalProducer(9, 0))
        assert end == 1 and built[0].records == []  # an inline writer applies its own changes
        waiting = asyncio.create_task(runtime.wait_committed(0, None, 1_000))
        await settle()
        assert not waiting.done()
        ports.commit(0)
        await waiting
        await runtime.close()

    run(scenario)


# --- timers --------------------------------------------------------------------------------------


def test_timers_run_on_the_clock_as_writes_and_die_with_their_shard() -> None:
    clock = ManualClock()
    ports = MemoryPartitions()

    def arm(shard: RecordingShard) -> None:
        def tick() -> CoordinatorResult[object]:
            shard.context.timer.schedule("tick", 1_000, tick)  # periodic: re-arms itself
            return CoordinatorResult([(b"tick", str(clock.monotonic_ms()).encode())], None)

        shard.context.timer.schedule("tick", 1_000, tick)

    async def scenario() -> None:
        runtime, built = make_runtime(ports, clock, on_loaded=arm)
        runtime.on_leadership_change(0, 1, True)
        clock.advance(999)
        await settle()
        assert built[0].records == []
        clock.advance(1)
        await settle()
        assert built[0].records == [(0, NO_PRODUCER_ID, "tick", "1000")]
        clock.advance(1_000)
        await settle()
        assert built[0].keys() == ["tick", "tick"]
        runtime.on_leadership_change(0, 1, False)
        assert clock.pending_timers() == 0
        clock.advance(5_000)
        await settle()
        assert ports.log(0).end == 2  # no timer wrote after the shard closed
        await runtime.close()

    run(scenario)


def test_the_batch_of_a_transactional_write_carries_its_producer() -> None:
    batch = coordinator_batch([(b"k", b"v")], 5, TransactionalProducer(7, 2))
    (_, header), *_ = iter_headers(batch)
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (7, 2, 0)
    assert batch == build_batch(
        [(b"k", b"v", (), 5)], producer_id=7, producer_epoch=2, base_sequence=0, is_transactional=True
    )


def test_a_shard_that_fails_to_activate_refuses_requests_until_leadership_changes() -> None:
    ports = MemoryPartitions()

    def explode(_shard: RecordingShard) -> None:
        raise RuntimeError("on_loaded failed")

    async def scenario() -> None:
        runtime, built = make_runtime(ports, on_loaded=explode)
        runtime.on_leadership_change(0, 1, True)  # the hook itself does not raise
        assert runtime.refusal(0) is ErrorCode.NOT_COORDINATOR and runtime.active_shards() == {}
        with pytest.raises(CoordinatorError) as refused:
            await runtime.write(0, put(("a", "1")), 1_000)
        assert refused.value.code is ErrorCode.NOT_COORDINATOR and ports.log(0).end == 0
        runtime.on_leadership_change(0, 1, False)
        assert built[0].unloaded
        await runtime.close()

    run(scenario)
