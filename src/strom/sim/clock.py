"""A broker's clock in a simulation: the simulated loop's time, with a wall clock that can jump.

Monotonic time is the loop's simulated time, and `call_later` is the loop's timer, so the broker core's
timeouts fire at their simulated moments. Wall-clock time (record timestamps, retention, the metadata
store's modification times) is a fixed epoch plus the loop's time plus this broker's own offset: a
nemesis moves one broker's wall clock forwards or backwards (an NTP step) without touching monotonic
time, as a real machine's clock jump does.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from strom._util.clock import Cancellable

__all__ = ["EPOCH_MS", "SimClock"]

#: The simulated wall clock's reading at simulated time zero (fixed, so traces of a seed compare equal).
EPOCH_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z


class SimClock:
    """One broker process's clock. After `stop` (the process crashed) its timers fire as no-ops, so no
    callback of a dead process runs; a restarted process gets a new clock with the same offset. (No
    bookkeeping of the live timers: every request sets one and most are cancelled.)"""

    def __init__(self, loop: asyncio.AbstractEventLoop, offset_ms: int = 0) -> None:
        self._loop = loop
        self.offset_ms = offset_ms
        self._stopped = False

    def time_ms(self) -> int:
        return EPOCH_MS + self.monotonic_ms() + self.offset_ms

    def monotonic_ms(self) -> int:
        return int(self._loop.time() * 1000)

    def call_later(self, delay_ms: int, callback: Callable[[], None]) -> Cancellable:
        loop = self._loop  # (the loop's call_later, without its frame: timers are most of a run's calls)
        return loop.call_at(loop.time() + max(delay_ms, 0) / 1000, self._fire, callback)

    def _fire(self, callback: Callable[[], None]) -> None:
        if not self._stopped:
            callback()

    def stop(self) -> None:
        self._stopped = True

    def jump(self, delta_ms: int) -> None:
        self.offset_ms += delta_ms
