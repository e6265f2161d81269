"""`IsrChangeManager`'s log-dir failure notification: written once ZooKeeper takes it again, however many
tries that needs (the controller moves the failed dir's leaderships only once it has it)."""

from __future__ import annotations

import asyncio

from strom._util.clock import ManualClock
from strom.broker.replication.isr_proposals import LOG_DIR_NOTIFICATION_RETRY_MS, IsrChangeManager
from strom.cluster.election import LeaderAndIsr
from strom.cluster.metadata_store import MetadataStoreError


class FlakyStore:
    """Refuses the first ``failures`` notifications, as a store whose ZooKeeper is away."""

    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.notified: list[tuple[int, list[tuple[str, int]]]] = []

    async def write_isr(self, topic: str, partition: int, state: LeaderAndIsr) -> LeaderAndIsr | None:
        return state

    async def notify_isr_change(self, partitions: list[tuple[str, int]]) -> None:
        return None

    async def notify_log_dir_failure(self, broker_id: int, partitions: list[tuple[str, int]]) -> None:
        if self.failures:
            self.failures -= 1
            raise MetadataStoreError("connection lost")
        self.notified.append((broker_id, partitions))


def test_a_log_dir_failure_notification_is_retried_until_written() -> None:
    async def main() -> None:
        clock, store = ManualClock(), FlakyStore(failures=2)
        manager = IsrChangeManager(store, clock)
        manager.notify_log_dir_failure(1, [("t", 0)])
        for _ in range(2):
            for _ in range(5):
                await asyncio.sleep(0)
            assert store.notified == []
            clock.advance(LOG_DIR_NOTIFICATION_RETRY_MS)
        for _ in range(5):
            await asyncio.sleep(0)
        assert store.notified == [(1, [("t", 0)])]
        assert manager.in_flight() == 0
        await manager.stop()

    asyncio.run(main())
