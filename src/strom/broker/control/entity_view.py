"""`EntityView`: a broker's copy of some metadata-store entities (client quotas, dynamic broker configs,
client-metrics subscriptions), refreshed in two steps: ``read`` makes the metadata-store calls (each a
ZooKeeper round trip in a cluster, so a worker thread's job), ``apply`` swaps the result into the
broker's state on the event loop. A change notification refreshes it with `refresh` (the read off the
loop); a broker starting, before it serves anyone, with `load`."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

T = TypeVar("T")


@dataclass(frozen=True)
class EntityView(Generic[T]):
    read: Callable[[], T]  # metadata-store reads only: run in a worker thread
    apply: Callable[[T], None]  # the broker's state: on the event loop
    # One refresh at a time, so that an older read is never applied over a newer one.
    _refreshing: asyncio.Lock = field(default_factory=asyncio.Lock, compare=False, repr=False)

    def load(self) -> None:
        """Read and apply here and now (a starting broker, not serving yet)."""
        self.apply(self.read())

    async def refresh(self) -> None:
        """Read in a worker thread, then apply on the loop."""
        async with self._refreshing:
            self.apply(await asyncio.to_thread(self.read))
