"""`TranslationWorkers`: the broker's translation worker processes (strom.lake.worker), in two pools:
idle and raised (strom.broker.lake.backlog says which a round runs in).

Theory of operation. Decoding records, building Arrow tables and writing Parquet is CPU work in
Python and C++ that, in a thread of the broker, would share the broker's GIL with its event loop:
every produce and fetch would wait behind it. So rounds run in processes of their own (``spawn``: a
fork of a broker with an event loop and threads is unsafe), up to `WORKER_PROCESSES` per pool, each
started when a round needs one (a pool starts them on demand) and kept for the broker's life. The
*idle* pool's processes run in ``SCHED_IDLE`` (niceness 19 where the platform has no such class): only
on CPU that nothing else wants. The *raised* pool's run at `WORKER_NICENESS`: they take a share of the
CPU when they compete with produce and fetch, a small one beside the broker's. A process cannot raise
its own priority back without privileges, hence two pools rather than one whose priority changes.

`run` sends a round to the idle pool unless the partition's controller says raised, and while the
round waits or runs there it asks the controller again every `check_s` seconds: once raised, the
round is sent to the raised pool and its idle copy cancelled if it has not started, else left to end
(it then adds nothing to the table, whose offsets it finds past its own end).

A worker process that dies (killed, out of memory) breaks its pool: the round in flight fails like any
failed round (retried after the translator's back-off, from the table's offsets) and the next round
starts a new pool. `wait_topic` lets a topic's deletion wait for that topic's rounds in flight before
its tables are dropped (an idle copy left running is ended by killing the idle pool: the machine may
leave it no CPU for long). `stop` kills the processes: a round cut short commits nothing, or
everything (exactly-once comes from the table's offsets, as for a broker killed mid-round).

Call only from the broker's event loop (the processes are started from its thread, which Linux's
parent-death signal of the workers is tied to).
"""

from __future__ import annotations

import asyncio
import logging
import multiprocessing
from collections import defaultdict
from collections.abc import Callable
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass

from strom.lake.config_defs import CatalogSettings
from strom.lake.round import RoundResult
from strom.lake.worker import RoundRequest, init_worker, run_round_request

log = logging.getLogger(__name__)

WORKER_PROCESSES = 2  # per pool
WORKER_NICENESS = 10  # the raised pool's, above the broker's


class _Pool:
    """One pool of worker processes, started on first use and again after a worker died."""

    def __init__(self, settings: CatalogSettings, idle: bool) -> None:
        self._settings = settings
        self.idle = idle
        self._executor: ProcessPoolExecutor | None = None
        self.in_flight: defaultdict[str, set[Future[RoundResult]]] = defaultdict(set)

    def submit(self, request: RoundRequest) -> _Submitted:
        """``request`` handed to a worker process.

        Raises:
            BrokenProcessPool: a worker process died (the next round starts a new pool).
        """
        if self._executor is None:
            self._executor = ProcessPoolExecutor(
                WORKER_PROCESSES,
                mp_context=multiprocessing.get_context("spawn"),
                initializer=init_worker,
                initargs=(self._settings, WORKER_NICENESS, self.idle),
            )
        pool = self._executor
        try:
            future = pool.submit(run_round_request, request)
        except BrokenProcessPool:
            self.discard(pool)
            raise
        in_flight = self.in_flight[request.main.topic]
        in_flight.add(future)
        future.add_done_callback(in_flight.discard)
        return _Submitted(self, pool, future, asyncio.wrap_future(future))

    def discard(self, pool: ProcessPoolExecutor) -> None:
        if self._executor is pool:
            log.warning("an iceberg translation worker process died: starting new ones")
            self._executor = None
            pool.shutdown(wait=False, cancel_futures=True)

    def stop(self) -> None:
        """Kill the worker processes (their rounds in flight commit nothing, or all: the table decides)."""
        pool, self._executor = self._executor, None
        if pool is None:
            return
        processes = list(pool._processes.values())  # no public way to end a pool's workers before 3.14
        pool.shutdown(wait=False, cancel_futures=True)
        for process in processes:
            process.kill()
        for process in processes:
            process.join(10)


@dataclass
class _Submitted:
    pool: _Pool
    executor: ProcessPoolExecutor
    future: Future[RoundResult]
    waiting: asyncio.Future[RoundResult]  # the same, on the event loop

    def result(self) -> RoundResult:
        """The round's result once ``waiting`` is done.

        Raises:
            BrokenProcessPool: a worker process died (the next round starts a new pool).
            Exception: what the round raised.
        """
        if self.waiting.cancelled():  # its pool was stopped (`wait_topic`) before the round began
            raise BrokenProcessPool("the translation worker pool was stopped")
        try:
            return self.waiting.result()
        except BrokenProcessPool:
            self.pool.discard(self.executor)
            raise

    async def outcome(self) -> RoundResult:
        await asyncio.wait({self.waiting})
        return self.result()


class TranslationWorkers:
    def __init__(self, settings: CatalogSettings) -> None:
        self._idle = _Pool(settings, idle=True)
        self._raised = _Pool(settings, idle=False)

    async def run(
        self, request: RoundRequest, raised: Callable[[], bool], check_s: float
    ) -> tuple[RoundResult, bool]:
        """Run ``request`` in a worker process: in the idle pool while ``raised()`` is false (asked now
        and every ``check_s`` seconds until the round ends), else in the raised pool. Returns the
        round's result, and whether the raised pool gave it.

        Raises:
            BrokenProcessPool: a worker process died (the next round starts a new pool).
            Exception: what the round raised (a catalog error, a corrupt batch).
        """
        if raised():
            return await self._raised.submit(request).outcome(), True
        idle = self._idle.submit(request)
        while True:
            done, _ = await asyncio.wait({idle.waiting}, timeout=check_s)
            if done:
                return idle.result(), False
            if raised():
                # Not started: it never runs. Started: it runs on and adds nothing (module docstring).
                idle.future.cancel()
                idle.waiting.add_done_callback(_retrieve)
                return await self._raised.submit(request).outcome(), True

    async def wait_topic(self, topic: str) -> None:
        """Until the rounds of ``topic`` handed to the workers so far have ended (however they ended)."""
        # A done future leaves its set from the pool's thread: tuple() copies the set in one step.
        idle = tuple(self._idle.in_flight.pop(topic, ()))
        if any(not f.done() for f in idle):
            self._idle.stop()  # the idle pool may get no CPU for long: end its rounds now
        raised = tuple(self._raised.in_flight.pop(topic, ()))
        pending = [asyncio.wrap_future(f) for f in (*idle, *raised)]
        if pending:
            await asyncio.wait(pending)

    def stop(self) -> None:
        """Kill the worker processes of both pools."""
        self._idle.stop()
        self._raised.stop()


def _retrieve(future: asyncio.Future[RoundResult]) -> None:
    """An idle copy's outcome, which nobody awaits: read so that asyncio does not log it as lost."""
    if not future.cancelled():
        future.exception()
