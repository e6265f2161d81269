"""Injectable time: components take a `Clock` so tests can drive time instead of sleeping."""

from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    def time_ms(self) -> int: ...

    def monotonic_ms(self) -> int: ...


class SystemClock:
    def time_ms(self) -> int:
        return time.time_ns() // 1_000_000

    def monotonic_ms(self) -> int:
        return time.monotonic_ns() // 1_000_000


class ManualClock:
    """A clock that moves only when told to (unit tests of timeouts and retention)."""

    def __init__(self, start_ms: int = 1_700_000_000_000) -> None:
        self._now_ms = start_ms
        self._mono_ms = 0

    def time_ms(self) -> int:
        return self._now_ms

    def monotonic_ms(self) -> int:
        return self._mono_ms

    def advance(self, delta_ms: int) -> None:
        self._now_ms += delta_ms
        self._mono_ms += delta_ms
