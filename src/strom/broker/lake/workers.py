"""`TranslationWorkers`: the broker's pool of translation worker processes (strom.lake.worker).

Theory of operation. Decoding records, building Arrow tables and writing Parquet is CPU work in
Python and C++ that, in a thread of the broker, would share the broker's GIL with its event loop:
every produce and fetch would wait behind it. So rounds run in processes of their own (``spawn``: a
fork of a broker with an event loop and threads is unsafe), up to `WORKER_PROCESSES`, each started
when a round needs one (the pool starts them on demand) and kept for the broker's life, at
`WORKER_NICENESS`: the scheduler favours produce and fetch when translation competes with them for
the CPU, and translation catches up when the broker has cores
to spare (the target lag is a bound on how long rows may wait, not a pace to keep at any price).

A worker process that dies (killed, out of memory) breaks the pool: the round in flight fails like any
failed round (retried after the translator's back-off, from the table's offsets) and the next round
starts a new pool. `wait_topic` lets a topic's deletion wait for that topic's rounds in flight before
its tables are dropped. `stop` kills the processes: a round cut short commits nothing, or everything
(exactly-once comes from the table's offsets, as for a broker killed mid-round).

Call only from the broker's event loop (the processes are started from its thread, which Linux's
parent-death signal of the workers is tied to).
"""

from __future__ import annotations

import asyncio
import logging
import multiprocessing
from collections import defaultdict
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool

from strom.lake.config_defs import CatalogSettings
from strom.lake.round import RoundResult
from strom.lake.worker import RoundRequest, init_worker, run_round_request

log = logging.getLogger(__name__)

WORKER_PROCESSES = 2
WORKER_NICENESS = 10


class TranslationWorkers:
    def __init__(self, settings: CatalogSettings) -> None:
        self._settings = settings
        self._pool: ProcessPoolExecutor | None = None
        self._in_flight: defaultdict[str, set[Future[RoundResult]]] = defaultdict(set)

    def _executor(self) -> ProcessPoolExecutor:
        if self._pool is None:
            self._pool = ProcessPoolExecutor(
                WORKER_PROCESSES,
                mp_context=multiprocessing.get_context("spawn"),
                initializer=init_worker,
                initargs=(self._settings, WORKER_NICENESS),
            )
        return self._pool

    async def run(self, request: RoundRequest) -> RoundResult:
        """Run ``request`` in a worker process.

        Raises:
            BrokenProcessPool: a worker process died (the next round starts a new pool).
            Exception: what the round raised (a catalog error, a corrupt batch).
        """
        pool = self._executor()
        try:
            future = pool.submit(run_round_request, request)
        except BrokenProcessPool:
            self._discard(pool)
            raise
        in_flight = self._in_flight[request.main.topic]
        in_flight.add(future)
        future.add_done_callback(in_flight.discard)
        try:
            return await asyncio.wrap_future(future)
        except BrokenProcessPool:
            self._discard(pool)
            raise

    async def wait_topic(self, topic: str) -> None:
        """Until the rounds of ``topic`` handed to the workers so far have ended (however they ended)."""
        # A done future leaves its set from the pool's thread: tuple() copies the set in one step.
        pending = [asyncio.wrap_future(f) for f in tuple(self._in_flight.pop(topic, ()))]
        if pending:
            await asyncio.wait(pending)

    def _discard(self, pool: ProcessPoolExecutor) -> None:
        if self._pool is pool:
            log.warning("an iceberg translation worker process died: starting new ones")
            self._pool = None
            pool.shutdown(wait=False, cancel_futures=True)

    def stop(self) -> None:
        """Kill the worker processes (their rounds in flight commit nothing, or all: the table decides)."""
        pool, self._pool = self._pool, None
        if pool is None:
            return
        processes = list(pool._processes.values())  # no public way to end a pool's workers before 3.14
        pool.shutdown(wait=False, cancel_futures=True)
        for process in processes:
            process.kill()
        for process in processes:
            process.join(10)
