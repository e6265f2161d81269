"""Purgatory: requests parked until something they wait for happens, or their timeout.

Kafka's purgatory holds delayed fetches (long-poll until `min_bytes` or `max_wait_ms`) and delayed
produces (acks=all until the ISR has the batch). Here a waiter parks one future under one or more keys
(a `(topic, partition)` pair); an append or high-watermark move calls `notify(key)`, which completes every
future parked under that key. The waiter then re-checks its own condition, so a wake-up is only a hint
and spurious wake-ups are harmless. No sleeping loops: an idle long-poll costs nothing until woken.

Deadlines are kept on the injected `Clock` (`call_later`), never on the event loop's own time, so the
broker core runs under a manual clock in tests: a parked fetch expires exactly when the test advances
time past its deadline.
"""

from __future__ import annotations

import asyncio
from collections.abc import Hashable, Iterable

from strom._util.clock import Clock


class Purgatory:
    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self._watchers: dict[Hashable, set[asyncio.Future[bool]]] = {}

    async def wait(self, keys: Iterable[Hashable], timeout_ms: int) -> bool:
        """Park until any key is notified (True) or `timeout_ms` passes on the clock (False)."""
        if timeout_ms <= 0:
            return False
        fut: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        watched = list(keys)
        for key in watched:
            self._watchers.setdefault(key, set()).add(fut)

        def expire() -> None:
            if not fut.done():
                fut.set_result(False)

        timer = self._clock.call_later(timeout_ms, expire)
        try:
            return await fut
        finally:
            timer.cancel()
            for key in watched:
                waiters = self._watchers.get(key)
                if waiters is not None:
                    waiters.discard(fut)
                    if not waiters:
                        del self._watchers[key]

    def notify(self, key: Hashable) -> None:
        waiters = self._watchers.pop(key, None)
        if not waiters:
            return
        for fut in waiters:
            if not fut.done():
                fut.set_result(True)

    def watched_count(self) -> int:
        return sum(len(w) for w in self._watchers.values())
