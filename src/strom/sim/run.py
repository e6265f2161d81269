"""One simulated run: a seed in, a verdict and a trace out.

A run builds a `SimulatedLoop`, a `SimNetwork` and a `SimWorld` of three brokers, creates a topic
(3 partitions, RF 3, min.insync.replicas=2), and for ``duration_s`` of simulated time runs one
idempotent acks=all producer per partition, an observer reading what consumers would read, a consumer
group committing offsets (`strom.sim.group_workload`), a transactional consume-transform-produce loop
(`strom.sim.txn_workload`), and the nemesis's schedule of faults. Then
every fault heals (crashed brokers restart, paused ones continue, links heal, sessions resume, disks
work again), the run waits for every partition to be led again (the liveness bound), reads every
partition back, reads the group's offsets back, and hands everything to the checker.

The brokers' log dirs are on the world's simulated disks: the file-system port
(`strom._util.filesystem`) is routed to them for the run's length.

The load is what the checker needs, not more: each producer sends a batch of 10 records every 0.1
simulated seconds (300 records a second over the three partitions). The simulator's cost is per
request (each acknowledged produce sets off about four replica fetches), not per record, so fewer,
larger batches let the checker judge as many records for half the work. The faults still meet
requests in flight: a producer whose request fails retries within 0.05-0.1 s, so during a fault and
its healing each producer probes the cluster as often as before, and every leader change, truncation
and ISR change happens under a stream of appends.

Every source of choice is drawn from the seed: the fault schedule, the network's latency and jitter,
the clients' choice of broker, the module-level `random` and `uuid.uuid4` (patched for the run's
length, so topic ids and member ids come from the seed). One seed in one process gives one trace;
across processes, string hashing must be fixed too (``PYTHONHASHSEED``), which the `strom.sim` command
sees to. The trace is every fault, every client error and every warning the brokers logged, each
stamped with its simulated time.
"""

from __future__ import annotations

import asyncio
import errno
import gc
import logging
import os
import random
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from strom._util import filesystem, halt
from strom.sim.checker import Findings, check
from strom.sim.clock import SimClock
from strom.sim.group_workload import OffsetCommitter
from strom.sim.loop import SimulatedLoop
from strom.sim.nemesis import EIO_WRITEBACK, KINDS, Fault, schedule
from strom.sim.network import CURRENT_HOST, LinkSettings, SimNetwork
from strom.sim.reassign_workload import move, moves_done
from strom.sim.txn_workload import (
    OUT_TOPIC,
    TransactionalCopier,
    check_transactions,
    committed_offset,
)
from strom.sim.workload import IdempotentProducer, Observer, SequenceLost, Topology, read_partition, settle
from strom.sim.world import SimWorld, host_of

__all__ = ["RunResult", "run_seed"]

PARTITIONS = 3
LIVENESS_BOUND_S = 90.0
COMMITTER_HOST = "10.0.4.1"
COPIER_HOST = "10.0.5.1"
REASSIGNER_HOST = "10.0.6.1"
CLIENTS = [f"10.0.1.{i + 1}" for i in range(PARTITIONS)] + [
    "10.0.2.1",
    "10.0.3.1",
    COMMITTER_HOST,
    COPIER_HOST,
    REASSIGNER_HOST,
]


@dataclass
class RunResult:
    seed: int
    findings: Findings
    faults: list[Fault]
    trace: list[str]
    simulated_s: float
    wall_s: float
    errors: dict[str, int] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.findings.ok


class _TraceHandler(logging.Handler):
    """Every log line of the simulated machines, stamped with simulated time and the machine's address;
    the run's temporary directory reads ``<data>``, and the controller's timing lines (real elapsed
    time, which no simulation fixes) are left out, so traces of one seed compare equal."""

    def __init__(self, loop: SimulatedLoop, trace: list[str]) -> None:
        super().__init__(logging.INFO)
        self._loop = loop
        self._trace = trace
        self.base_dir = "<data>"

    def emit(self, record: logging.LogRecord) -> None:
        when = self._loop.time() - self._loop.start_s
        message = record.getMessage()
        if message.startswith("controller timing"):
            return
        message = message.replace(self.base_dir, "<data>")
        self._trace.append(f"{when:10.3f} {CURRENT_HOST.get():>9} {record.name}: {message}")


@contextmanager
def _seeded_process(seed: int) -> Iterator[None]:
    """Module-level randomness drawn from the seed, and no cyclic garbage collection, for the run's length.

    The collector runs when allocation counts say so, which differs between two runs of a seed, and a
    collected object's finaliser (an asyncio transport's or stream's) schedules callbacks on the loop:
    with the collector on, one seed interleaves differently from run to run. Reference counting still
    frees almost everything at once; the cycles wait for the end of the run.
    """
    rng = random.Random(seed ^ 0x5EED)
    state = random.getstate()
    real_uuid4 = uuid.uuid4
    collecting = gc.isenabled()
    gc.collect()
    gc.disable()
    random.seed(seed)
    uuid.uuid4 = lambda: uuid.UUID(int=rng.getrandbits(128), version=4)
    try:
        yield
    finally:
        uuid.uuid4 = real_uuid4
        random.setstate(state)
        if collecting:
            gc.enable()
        gc.collect()


def _memory_dir() -> str | None:
    """Where the simulated disks' files live: a memory file system when there is one. The real files
    only play the page cache (strom.sim.disk), and on a disk file system a rename or a close after a
    truncation may wait for the disk (ext4 flushes a file replaced by a rename): real waits no
    simulated disk asked for, the largest real cost of a run's checkpoint writes."""
    shm = "/dev/shm"
    return shm if os.path.isdir(shm) and os.access(shm, os.W_OK) else None


def run_seed(
    seed: int,
    duration_s: float = 120.0,
    kinds: tuple[str, ...] = KINDS,
    batch_records: int = 10,
    acks: int = -1,
    settings: dict[str, str] | None = None,
    link: LinkSettings | None = None,
) -> RunResult:
    """Run one seed: ``kinds`` of faults for ``duration_s`` simulated seconds, the producers sending
    ``batch_records`` per batch with ``acks``, the brokers configured with ``settings`` on top of the
    world's defaults, every link's delay ``link`` (default: a LAN's)."""
    trace: list[str] = []
    loop = SimulatedLoop()
    handler = _TraceHandler(loop, trace)
    root = logging.getLogger("strom")
    root.addHandler(handler)
    previous_level = root.level
    root.setLevel(logging.INFO)
    started = time.monotonic()
    try:
        with (
            _seeded_process(seed),
            tempfile.TemporaryDirectory(prefix=f"strom-sim-{seed}-", dir=_memory_dir()) as base,
        ):
            handler.base_dir = base
            rng = random.Random(seed)
            network = SimNetwork(loop, random.Random(rng.getrandbits(64)), link)
            world = SimWorld(loop, network, Path(base), settings=settings)
            faults = schedule(
                random.Random(rng.getrandbits(64)), len(world.broker_ids), 5.0, duration_s, kinds
            )
            client_rng = random.Random(rng.getrandbits(64))
            disk_rng = random.Random(rng.getrandbits(64))
            with filesystem.use(world.fs), halt.use(world.halt):
                result = loop.run(
                    _main(loop, world, faults, duration_s, client_rng, disk_rng, trace, batch_records, acks)
                )
    finally:
        root.removeHandler(handler)
        root.setLevel(previous_level)
    findings, errors, simulated = result
    return RunResult(seed, findings, faults, trace, simulated, time.monotonic() - started, errors)


async def _main(
    loop: SimulatedLoop,
    world: SimWorld,
    faults: list[Fault],
    duration_s: float,
    rng: random.Random,
    disk_rng: random.Random,
    trace: list[str],
    batch_records: int,
    acks: int,
) -> tuple[Findings, dict[str, int], float]:
    t0 = loop.time()

    def note(what: str) -> None:
        trace.append(f"{loop.time() - t0:10.3f} {'sim':>9} {what}")

    await world.start()
    note("brokers started")
    clock = SimClock(loop)
    admin = Topology(world.bootstrap, clock, rng)
    await world.as_host("10.0.3.1", admin.create_topic(PARTITIONS, 3, 2))
    out_admin = Topology(world.bootstrap, clock, rng, OUT_TOPIC)
    end_s = t0 + duration_s
    producers = [
        IdempotentProducer(
            Topology(world.bootstrap, clock, random.Random(rng.getrandbits(64))), p, batch_records, acks
        )
        for p in range(PARTITIONS)
    ]
    observer = Observer(Topology(world.bootstrap, clock, random.Random(rng.getrandbits(64))), PARTITIONS)
    work = [world.as_host(CLIENTS[p], producer.run(end_s)) for p, producer in enumerate(producers)]
    work.append(world.as_host("10.0.2.1", observer.run(end_s)))
    committer = OffsetCommitter(
        Topology(world.bootstrap, clock, random.Random(rng.getrandbits(64))), PARTITIONS
    )
    work.append(world.as_host(COMMITTER_HOST, committer.run(end_s)))
    copier = TransactionalCopier(
        Topology(world.bootstrap, clock, random.Random(rng.getrandbits(64)), OUT_TOPIC),
        random.Random(rng.getrandbits(64)),
    )
    # Its topic is created, and grown, while the faults run.
    work.append(
        world.as_host(COPIER_HOST, copier.run(t0 + rng.uniform(5.0, 8.0), t0 + duration_s / 2, end_s))
    )
    nemesis = world.as_host("nemesis", _nemesis(world, faults, t0, end_s, note, disk_rng))
    outcomes = await asyncio.gather(*work, return_exceptions=True)
    await nemesis
    for outcome in outcomes:
        if isinstance(outcome, SequenceLost):
            note(f"producer lost its sequence: {outcome}")
        elif isinstance(outcome, BaseException):
            raise outcome
    await _heal_everything(world, note)
    final: dict[int, list[tuple[int, bytes]] | None] = {}
    reader = Topology(world.bootstrap, clock, random.Random(rng.getrandbits(64)))
    deadline = loop.time() + LIVENESS_BOUND_S
    # A broker restarted before its old session expired registers only once the store expires that
    # session (as with ZooKeeper); until then the ISR may still name the dead incarnation.
    while world.registered_live() != world.broker_ids and loop.time() < deadline:
        await asyncio.sleep(0.5)
    settled = await world.as_host("10.0.3.1", settle(reader, PARTITIONS, deadline))
    # Reading at once could miss acknowledged records the new leaders' high watermarks have not yet
    # passed: records not yet visible, not lost (seed 2579).
    while settled and not world.high_watermarks_at_log_end() and loop.time() < deadline:
        await asyncio.sleep(0.1)
    note("every partition led, every replica in sync" if settled else "not settled within the bound")
    for p in range(PARTITIONS):
        final[p] = await world.as_host("10.0.3.1", read_partition(reader, p, deadline))
    note("read back: " + ", ".join(f"p{p}={len(r) if r is not None else None}" for p, r in final.items()))
    moved = await world.as_host(REASSIGNER_HOST, moves_done(reader, deadline))
    if not moved:
        note("a partition move still in flight at the bound")
    offsets_back = committer.went_back + await world.as_host(COMMITTER_HOST, committer.final_check(deadline))
    note(f"group offsets: {committer.commits} commits acknowledged")
    transactions: list[str] = []
    if copier.created:  # (else the faults kept its topic from being created until the end)
        visible = {
            p: await world.as_host(COPIER_HOST, read_partition(out_admin, p, deadline, isolation_level=1))
            for p in range(copier.partitions)
        }
        txn_offset = await world.as_host(COPIER_HOST, committed_offset(out_admin, deadline))
        fates = [copier.fates[n] for n in sorted(copier.fates)]
        note(
            f"transactions: {fates.count('committed')} committed, {fates.count('aborted')} aborted, "
            f"{fates.count('in doubt')} in doubt, over {copier.partitions} partitions; "
            f"group offset {txn_offset}"
        )
        transactions = check_transactions(copier.fates, copier.widths, visible, txn_offset)
    acked = [a for producer in producers for a in producer.acked]
    findings = check(acked, final, observer.seen, observer.leaders_by_epoch, offsets_back, transactions)
    if not moved:
        findings.unavailable.append("a partition reassignment did not complete after the faults healed")
    errors: dict[str, int] = {}
    for producer in producers:
        for what, n in producer.errors.items():
            errors[what] = errors.get(what, 0) + n
    simulated = loop.time() - t0
    clients = (admin, out_admin, reader, observer.topology, committer.topology, copier.topology)
    for t in (*clients, *(p.topology for p in producers)):
        t.close()
    await world.stop()
    return findings, errors, simulated


async def _nemesis(
    world: SimWorld, faults: list[Fault], t0: float, end_s: float, note: object, disk_rng: random.Random
) -> None:
    loop = world.loop
    assert callable(note)
    # The last machine that lost unsynced writes, until it has caught up: Kafka's promise covers one
    # machine's lost writes at a time, so the next power loss waits for it. Other faults do not: a
    # controller may fail over, or a leader crash, while that machine has restarted and not yet
    # registered again.
    recovering: asyncio.Task[bool] | None = None
    moves: list[asyncio.Task[None]] = []
    for fault in faults:
        await asyncio.sleep(max(0.0, t0 + fault.at_s - loop.time()))
        if fault.kind == "machine_crash" and recovering is not None:
            if not await recovering:
                note(f"not caught up by the end: {fault.describe()} left out")
                continue
            recovering = None
        note(fault.describe())
        host = host_of(fault.broker)
        if fault.kind in ("crash", "machine_crash"):
            if fault.broker in world.brokers:
                if fault.kind == "crash":
                    await world.crash(fault.broker)
                else:
                    lost, torn = await world.crash_machine(fault.broker, disk_rng)
                    note(f"broker {fault.broker}'s disk lost {lost} unsynced pages, tore {torn}")
                await asyncio.sleep(fault.length_s)
                await world.restart(fault.broker)
                note(f"broker {fault.broker} restarted")
                if fault.kind == "machine_crash":
                    recovering = loop.create_task(_catching_up(world, fault.broker, end_s, note))
        elif fault.kind == "outage":
            for broker_id in sorted(world.brokers):
                lost, torn = await world.crash_machine(broker_id, disk_rng)
                note(f"broker {broker_id}'s disk lost {lost} unsynced pages, tore {torn}")
            await asyncio.sleep(fault.length_s)
            for broker_id in world.broker_ids:
                await world.restart(broker_id)
            note("every broker restarted")
        elif fault.kind == "pause":
            world.pause(fault.broker)
            await asyncio.sleep(fault.length_s)
            world.unpause(fault.broker)
            note(f"broker {fault.broker} continued")
        elif fault.kind == "disk":
            if fault.error == "slow":
                world.slow_disk(fault.broker, fault.delta_ms / 1000)
            elif fault.error == EIO_WRITEBACK:
                world.disk_error(fault.broker, errno.EIO, syncs_only=True)
            else:
                world.disk_error(fault.broker, getattr(errno, fault.error))
            await asyncio.sleep(fault.length_s)
            world.disk_error(fault.broker, None)
            world.slow_disk(fault.broker, 0.0)
            note(f"broker {fault.broker}'s disk works again")
            if await world.halted(fault.broker):  # a failed sync stopped it: a restart recovers it
                await world.restart(fault.broker)
                note(f"broker {fault.broker} restarted after it halted")
        elif fault.kind == "isolate":
            others = [host_of(b) for b in world.broker_ids] + CLIENTS
            world.network.isolate(host, others)
            world.suspend_session(fault.broker)
            await asyncio.sleep(fault.length_s)
            world.network.heal()
            world.resume_session(fault.broker)
            note(f"broker {fault.broker} healed")
        elif fault.kind == "one_way":
            world.network.partition(host, host_of(fault.other), both_ways=False)
            await asyncio.sleep(fault.length_s)
            world.network.heal()
            note("links healed")
        elif fault.kind == "expire":
            world.expire_session(fault.broker)
        elif fault.kind == "reassign":
            moves.append(world.as_host(REASSIGNER_HOST, _move(world, fault, end_s, note)))
        elif fault.kind == "clock_jump":
            world.jump_clock(fault.broker, fault.delta_ms)
    if recovering is not None:
        recovering.cancel()
    await asyncio.gather(*moves)


async def _move(world: SimWorld, fault: Fault, end_s: float, note: object) -> None:
    """One partition move, its choices drawn from the fault's own seed."""
    assert callable(note)
    rng = random.Random(fault.delta_ms)
    topology = Topology(world.bootstrap, SimClock(world.loop), rng)
    try:
        note(await move(topology, fault.broker % PARTITIONS, world.broker_ids, rng, end_s))
    finally:
        topology.close()


async def _catching_up(world: SimWorld, broker_id: int, end_s: float, note: object) -> bool:
    """Until a restarted machine has caught up (False if not by ``end_s``): registered by its new
    process, taken out of an ISR by the controller (or 5 s passed: it may have lost nothing), then
    in the ISR of every partition it replicates."""
    assert callable(note)
    loop = world.loop
    while broker_id not in world.registered_live():
        if loop.time() >= end_s:
            return False
        await asyncio.sleep(0.1)
    out_by = loop.time() + 5.0
    while world.in_every_isr(broker_id) and loop.time() < out_by:
        await asyncio.sleep(0.1)
    while not world.in_every_isr(broker_id):
        if loop.time() >= end_s:
            return False
        await asyncio.sleep(0.1)
    note(f"broker {broker_id} caught up")
    return True


async def _heal_everything(world: SimWorld, note: object) -> None:
    assert callable(note)
    world.network.heal()
    for broker_id in world.broker_ids:
        await world.halted(broker_id)
        world.unpause(broker_id)
        world.disk_error(broker_id, None)
        world.slow_disk(broker_id, 0.0)
        world.resume_session(broker_id)
        if broker_id not in world.brokers:
            await world.restart(broker_id)
    note("every fault healed")
