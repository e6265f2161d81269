"""What the coordinator needs from its host: durable appends and timers (narrow, so tests can fake them).

The broker implements :class:`PartitionWriter` on top of the `__consumer_offsets` partition logs and
:class:`Scheduler` on its asyncio loop; unit tests use :class:`ManualScheduler` with a `ManualClock`, so
session timeouts and rebalance delays run deterministically without sleeping.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Sequence
from typing import Protocol

from strom._util.clock import ManualClock


class PartitionWriter(Protocol):
    def append(self, partition: int, records: Sequence[tuple[bytes, bytes | None]]) -> None:
        """Append ``(key, value)`` records (value None = tombstone) to one `__consumer_offsets` partition.

        Returns only once the records are as durable as any acknowledged produce (on one node: in the
        log); the coordinator acknowledges commits after it returns.

        Raises:
            KafkaError: the append failed; its code is what the waiting clients should see.
        """


class Cancellable(Protocol):
    def cancel(self) -> None: ...


class Scheduler(Protocol):
    def call_later(self, delay_ms: int, callback: Callable[[], None]) -> Cancellable:
        """Run ``callback`` once after ``delay_ms`` (never synchronously inside this call)."""


class _ManualTimer:
    __slots__ = ("callback", "cancelled")

    def __init__(self, callback: Callable[[], None]) -> None:
        self.callback = callback
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class ManualScheduler:
    """A scheduler driven by a `ManualClock`: `advance(ms)` moves time and runs what fell due, in order."""

    def __init__(self, clock: ManualClock) -> None:
        self.clock = clock
        self._queue: list[tuple[int, int, _ManualTimer]] = []
        self._seq = itertools.count()

    def call_later(self, delay_ms: int, callback: Callable[[], None]) -> Cancellable:
        timer = _ManualTimer(callback)
        due = self.clock.monotonic_ms() + max(delay_ms, 0)
        heapq.heappush(self._queue, (due, next(self._seq), timer))
        return timer

    def advance(self, delta_ms: int = 0) -> None:
        """Advance the clock by ``delta_ms``, firing every timer due by then (including ones they add)."""
        target = self.clock.monotonic_ms() + delta_ms
        while self._queue and self._queue[0][0] <= target:
            due, _, timer = heapq.heappop(self._queue)
            now = self.clock.monotonic_ms()
            if due > now:
                self.clock.advance(due - now)
            if not timer.cancelled:
                timer.callback()
        now = self.clock.monotonic_ms()
        if target > now:
            self.clock.advance(target - now)

    def pending(self) -> int:
        return sum(1 for _, _, t in self._queue if not t.cancelled)
