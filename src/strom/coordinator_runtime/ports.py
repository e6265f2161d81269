"""The runtime's two narrow ports to the partition logs (Kafka's ``PartitionWriter`` and the loader's
reads), implemented by the broker over its replica manager and by an in-memory log in unit tests.

Both name a partition by ``(topic, partition)``. The runtime calls them only from the event loop.
"""

from __future__ import annotations

from typing import Protocol

from strom.protocol.errors import ErrorCode


class PartitionWriter(Protocol):
    def append(self, topic: str, partition: int, batch: bytes, transactional: bool) -> int:
        """Append one batch as the partition's leader; return the offset after its last record.

        Raises:
            KafkaError: the append was refused (NOT_LEADER_OR_FOLLOWER, KAFKA_STORAGE_ERROR, ...).
        """

    async def wait_committed(self, topic: str, partition: int, end_offset: int, timeout_ms: int) -> ErrorCode:
        """Wait until the high watermark reaches ``end_offset`` (acks=all): NONE, or why not
        (NOT_LEADER_OR_FOLLOWER, NOT_ENOUGH_REPLICAS_AFTER_APPEND, REQUEST_TIMED_OUT)."""


class PartitionReader(Protocol):
    def log_start_offset(self, topic: str, partition: int) -> int: ...

    def log_end_offset(self, topic: str, partition: int) -> int: ...

    def high_watermark(self, topic: str, partition: int) -> int: ...

    def read(self, topic: str, partition: int, offset: int, max_bytes: int, end_offset: int) -> bytes:
        """Whole batches from the one containing ``offset`` (at least one), below ``end_offset``."""
