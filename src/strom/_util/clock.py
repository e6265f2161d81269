"""Injectable time: components take a `Clock` so tests can drive time instead of sleeping.

A clock tells wall-clock time (`time_ms`, for timestamps and retention) and monotonic time
(`monotonic_ms`, for timeouts and lag), and schedules callbacks on its own time line (`call_later`).
Every timeout in the broker core (purgatory deadlines, fetch long-polls, acks=all waits, periodic
jobs) is built on `call_later`, so under a `ManualClock` nothing expires until the test advances it:
`advance()` runs the callbacks that fall due, in deadline order, and a test then lets the event loop
run the tasks they woke. `SystemClock` schedules on the running asyncio loop.

The broker and the controller wait only through this module: `sleep_ms` (back-offs, polls, periodic
jobs), `Deadline` (a time limit on a block: a request's round trip, a connection attempt, a controller
call; ``TimeoutError`` when the clock passes it) and `yield_to_loop` (no wait at all: lets the other
tasks run between slices of a long job). None of them reads the event loop's own time, so under a
`ManualClock` no back-off ends and no time limit expires until the test advances the clock
(tests/unit/test_architecture.py checks that the broker and the controller call nothing else).
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import time
from collections.abc import Awaitable, Callable
from types import TracebackType
from typing import Protocol


class Cancellable(Protocol):
    def cancel(self) -> None: ...


class Clock(Protocol):
    def time_ms(self) -> int: ...

    def monotonic_ms(self) -> int: ...

    def call_later(self, delay_ms: int, callback: Callable[[], None]) -> Cancellable: ...


class SystemClock:
    def time_ms(self) -> int:
        return time.time_ns() // 1_000_000

    def monotonic_ms(self) -> int:
        return time.monotonic_ns() // 1_000_000

    def call_later(self, delay_ms: int, callback: Callable[[], None]) -> Cancellable:
        return asyncio.get_running_loop().call_later(max(delay_ms, 0) / 1000, callback)


class _ManualTimer:
    __slots__ = ("cancelled",)

    def __init__(self) -> None:
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class ManualClock:
    """A clock that moves only when told to (tests of timeouts, retention and the broker core)."""

    def __init__(self, start_ms: int = 1_700_000_000_000) -> None:
        self._now_ms = start_ms
        self._mono_ms = 0
        self._timers: list[tuple[int, int, _ManualTimer, Callable[[], None]]] = []
        self._seq = itertools.count()

    def time_ms(self) -> int:
        return self._now_ms

    def monotonic_ms(self) -> int:
        return self._mono_ms

    def call_later(self, delay_ms: int, callback: Callable[[], None]) -> Cancellable:
        timer = _ManualTimer()
        heapq.heappush(self._timers, (self._mono_ms + max(delay_ms, 0), next(self._seq), timer, callback))
        return timer

    def pending_timers(self) -> int:
        return sum(1 for _, _, t, _ in self._timers if not t.cancelled)

    def advance(self, delta_ms: int) -> None:
        """Move time forward, running every callback that falls due at its own deadline."""
        target = self._mono_ms + max(delta_ms, 0)
        while self._timers and self._timers[0][0] <= target:
            due, _, timer, callback = heapq.heappop(self._timers)
            self._now_ms += due - self._mono_ms
            self._mono_ms = due
            if not timer.cancelled:
                callback()
        self._now_ms += target - self._mono_ms
        self._mono_ms = target


async def sleep_ms(clock: Clock, delay_ms: int) -> None:
    """Sleep on the clock's time line (a manual clock's sleepers wake only when it is advanced)."""
    fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def wake() -> None:
        if not fut.done():
            fut.set_result(None)

    handle = clock.call_later(delay_ms, wake)
    try:
        await fut
    finally:
        handle.cancel()


def yield_to_loop() -> Awaitable[None]:
    """Let every ready task run once before going on (a zero wait: no time passes on any clock)."""
    return asyncio.sleep(0)


class Deadline:
    """``async with Deadline(clock, timeout_ms):`` a time limit on the clock's time line for a block.

    When the clock reaches the deadline the task running the block is cancelled, and the block ends
    with ``TimeoutError`` (asyncio's own `asyncio.Timeout` does the cancelling and tells its
    cancellation from any other; only the moment comes from the clock). A block that ends first
    cancels the timer.
    """

    __slots__ = ("_clock", "_delay_ms", "_handle", "_timeout")

    def __init__(self, clock: Clock, timeout_ms: int) -> None:
        self._clock = clock
        self._delay_ms = timeout_ms
        self._timeout = asyncio.timeout(None)
        self._handle: Cancellable | None = None

    async def __aenter__(self) -> Deadline:
        await self._timeout.__aenter__()
        self._handle = self._clock.call_later(self._delay_ms, self._expire)
        return self

    def _expire(self) -> None:
        # Now on the event loop's time line: asyncio cancels the task on its next iteration.
        self._timeout.reschedule(asyncio.get_running_loop().time())

    def expired(self) -> bool:
        return self._timeout.expired()

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._handle is not None:
            self._handle.cancel()
        await self._timeout.__aexit__(exc_type, exc, tb)
