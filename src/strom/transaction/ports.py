"""What the transaction coordinator needs from its host (narrow, so tests can fake it)."""

from __future__ import annotations

from typing import Protocol


class ProducerIdSource(Protocol):
    def next_producer_id(self) -> int:
        """A producer id never handed out before (the broker's InitProducerId allocator)."""
