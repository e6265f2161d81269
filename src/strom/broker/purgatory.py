"""Purgatory: requests parked until something they wait for happens, or their timeout.

Kafka's purgatory holds delayed fetches (long-poll until `min_bytes` or `max_wait_ms`) and delayed
produces (acks=all until the ISR has the batch). Here a waiter parks one future under one or more keys
(a `(topic, partition)` pair); an append or high-watermark move calls `notify(key)`, which completes every
future parked under that key. The waiter then re-checks its own condition, so a wake-up is only a hint
and spurious wake-ups are harmless. No sleeping loops: an idle long-poll costs nothing until woken.
"""

from __future__ import annotations

import asyncio
from collections.abc import Hashable, Iterable


class Purgatory:
    def __init__(self) -> None:
        self._watchers: dict[Hashable, set[asyncio.Future[None]]] = {}

    async def wait(self, keys: Iterable[Hashable], timeout_s: float) -> bool:
        """Park until any key is notified (True) or the timeout passes (False)."""
        if timeout_s <= 0:
            return False
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        watched = list(keys)
        for key in watched:
            self._watchers.setdefault(key, set()).add(fut)
        try:
            await asyncio.wait_for(fut, timeout_s)
            return True
        except TimeoutError:
            return False
        finally:
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
                fut.set_result(None)

    def watched_count(self) -> int:
        return sum(len(w) for w in self._watchers.values())
