"""Purgatory: requests parked until something they wait for happens, or their timeout.

Kafka's purgatory holds delayed fetches (long-poll until `min_bytes` or `max_wait_ms`) and delayed
produces (acks=all until the ISR has the batch). Both kinds park one future with a deadline on the
injected `Clock` (`call_later`, never the event loop's own time, so the broker core runs under a
manual clock in tests: a parked request expires exactly when the test advances time past its
deadline). A future completes with True when woken and False at its deadline; the waiter then
re-checks its own condition, so a wake-up is only a hint and spurious wake-ups are harmless. No
sleeping loops: an idle wait costs nothing until woken.

- `Purgatory` (fetches): a waiter parks under one or more keys (a `(topic, partition)` pair, or a
  follower's key); an append or high-watermark move calls `notify(key)`, which wakes every future
  parked under that key.
- `DelayedProduces` (acks=all produces and coordinator writes): a wait needs the partition's high
  watermark to reach the offset after its batch (``required_offset``). The waits of a partition are
  kept in a heap ordered by that offset, so a high-watermark move completes exactly the waits it
  covers and wakes no other: with many produces in flight on one partition, each move costs one heap
  pop per answered produce, not a wake-up and a re-check of every waiter. Anything else that can
  decide a wait (the ISR changed, leadership moved, the partition went away) wakes every wait of the
  partition (`wake_all`), and each re-checks its own condition (`ReplicaManager.wait_for_replication`).
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
from collections.abc import Callable, Hashable, Iterable

from strom._util.clock import Clock

# (required offset, arrival order, the waiter's future)
_Wait = tuple[int, int, asyncio.Future[bool]]


async def _park(
    clock: Clock, timeout_ms: int, fut: asyncio.Future[bool], release: Callable[[], None]
) -> bool:
    """Await ``fut`` until it is woken (True) or ``timeout_ms`` passes on ``clock`` (False); then
    ``release`` removes it from wherever it was registered (also when the waiter is cancelled)."""

    def expire() -> None:
        if not fut.done():
            fut.set_result(False)

    timer = clock.call_later(timeout_ms, expire)
    try:
        return await fut
    finally:
        timer.cancel()
        release()


def _wake(fut: asyncio.Future[bool]) -> None:
    if not fut.done():
        fut.set_result(True)


class Purgatory:
    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        # Per key, the waiters in arrival order (a dict as an ordered set): a notify wakes them first
        # come, first served, and in the same order every run (a set would iterate by memory address).
        self._watchers: dict[Hashable, dict[asyncio.Future[bool], None]] = {}

    async def wait(self, keys: Iterable[Hashable], timeout_ms: int) -> bool:
        """Park until any key is notified (True) or `timeout_ms` passes on the clock (False)."""
        if timeout_ms <= 0:
            return False
        fut: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        watched = list(keys)
        for key in watched:
            self._watchers.setdefault(key, {})[fut] = None

        def release() -> None:
            for key in watched:
                waiters = self._watchers.get(key)
                if waiters is not None:
                    waiters.pop(fut, None)
                    if not waiters:
                        del self._watchers[key]

        return await _park(self._clock, timeout_ms, fut, release)

    def notify(self, key: Hashable) -> None:
        for fut in self._watchers.pop(key, ()):
            _wake(fut)

    def watched_count(self) -> int:
        return sum(len(w) for w in self._watchers.values())


class DelayedProduces:
    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self._waits: dict[Hashable, list[_Wait]] = {}
        self._order = itertools.count()

    async def wait(self, tp: Hashable, required_offset: int, timeout_ms: int) -> bool:
        """Until a high-watermark move covers ``required_offset`` or a wake-up (True), or the deadline."""
        if timeout_ms <= 0:
            return False
        fut: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        entry = (required_offset, next(self._order), fut)
        heapq.heappush(self._waits.setdefault(tp, []), entry)

        def release() -> None:
            woken = fut.done() and not fut.cancelled() and fut.result()
            waits = self._waits.get(tp)
            if waits is None or woken:
                return  # a woken wait was popped already
            try:  # timed out or cancelled: still in the heap
                waits.remove(entry)
                heapq.heapify(waits)
            except ValueError:
                pass
            if not waits:
                del self._waits[tp]

        return await _park(self._clock, timeout_ms, fut, release)

    def complete(self, tp: Hashable, high_watermark: int) -> None:
        """The high watermark moved: answer every wait it covers."""
        waits = self._waits.get(tp)
        if not waits:
            return
        while waits and waits[0][0] <= high_watermark:
            _wake(heapq.heappop(waits)[2])
        if not waits:
            del self._waits[tp]

    def wake_all(self, tp: Hashable) -> None:
        """Something other than the high watermark changed: every wait re-checks its condition."""
        for _, _, fut in self._waits.pop(tp, ()):
            _wake(fut)

    def watched_count(self) -> int:
        return sum(len(w) for w in self._waits.values())
