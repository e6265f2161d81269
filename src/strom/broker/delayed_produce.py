"""acks=all waits, completed by high-watermark moves (the produce half of Kafka's purgatory).

A produce with acks=all, or a coordinator write, waits until the partition's high watermark reaches
the offset after its batch (``required_offset``). The waits of each partition are kept in a heap
ordered by that offset, so a high-watermark move completes exactly the waits it covers and wakes no
other: with many produces in flight on one partition, each move costs one heap pop per answered
produce, not a wake-up and a re-check of every waiter. Anything else that can decide a wait (the ISR
changed, leadership moved, the partition went away) wakes every wait of the partition, and each
re-checks its own condition (see `ReplicaManager.wait_for_replication`).

Deadlines are on the injected clock, so a manual clock drives them in tests.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools

from strom._util.clock import Clock
from strom.broker.partition import TopicPartition

# (required offset, arrival order, the waiter's future: True when woken, False at its deadline)
_Wait = tuple[int, int, asyncio.Future[bool]]


class DelayedProduces:
    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self._waits: dict[TopicPartition, list[_Wait]] = {}
        self._order = itertools.count()

    async def wait(self, tp: TopicPartition, required_offset: int, timeout_ms: int) -> bool:
        """Until a high-watermark move covers ``required_offset`` or a wake-up (True), or the deadline."""
        if timeout_ms <= 0:
            return False
        fut: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        entry = (required_offset, next(self._order), fut)
        heapq.heappush(self._waits.setdefault(tp, []), entry)

        def expire() -> None:
            if not fut.done():
                fut.set_result(False)

        timer = self._clock.call_later(timeout_ms, expire)
        try:
            return await fut
        finally:
            timer.cancel()
            woken = fut.done() and not fut.cancelled() and fut.result()
            waits = self._waits.get(tp)
            if waits is not None and not woken:
                # Timed out or cancelled: still in the heap (a woken wait was popped already).
                try:
                    waits.remove(entry)
                    heapq.heapify(waits)
                except ValueError:
                    pass
                if not waits:
                    del self._waits[tp]

    def complete(self, tp: TopicPartition, high_watermark: int) -> None:
        """The high watermark moved: answer every wait it covers."""
        waits = self._waits.get(tp)
        if not waits:
            return
        while waits and waits[0][0] <= high_watermark:
            fut = heapq.heappop(waits)[2]
            if not fut.done():
                fut.set_result(True)
        if not waits:
            del self._waits[tp]

    def wake_all(self, tp: TopicPartition) -> None:
        """Something other than the high watermark changed: every wait re-checks its condition."""
        for _, _, fut in self._waits.pop(tp, ()):
            if not fut.done():
                fut.set_result(True)

    def watched_count(self) -> int:
        return sum(len(w) for w in self._waits.values())
