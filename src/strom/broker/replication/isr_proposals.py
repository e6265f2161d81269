"""ISR changes written off the event loop (Kafka's AlterPartitionManager, for the `IsrStore` port).

A leader's partition proposes an ISR change (partition.py) and hands it here; `IsrChangeManager` awaits
the store's conditional write in a task of its own (the ZooKeeper store runs the kazoo call in a worker
thread, the local one answers at once), then gives the answer back to the partition, which applies it
if it still holds. Only then, if the ISR changed, is the controller told (the ISR-change notification).
The partition keeps at most one proposal in flight, so writes of one partition never race each other.
A write that raises is logged and counts as not stored: the partition proposes again at its next
follower fetch or expiry check.
"""

from __future__ import annotations

import asyncio
import logging

from strom._util.clock import Clock, SystemClock, sleep_ms
from strom._util.tasks import cancel_and_wait
from strom.broker.ports import IsrStore, TopicPartition
from strom.broker.replication.partition import Partition
from strom.cluster.election import LeaderAndIsr

log = logging.getLogger(__name__)

# A log-dir failure notification that could not be written is tried again after this long, until it is:
# without it the controller keeps the failed dir's replicas as leaders.
LOG_DIR_NOTIFICATION_RETRY_MS = 1000


class IsrChangeManager:
    def __init__(self, store: IsrStore, clock: Clock | None = None) -> None:
        self._store = store
        self._clock = clock if clock is not None else SystemClock()
        self._tasks: set[asyncio.Task[None]] = set()
        self.isr_shrinks = 0  # metrics: kafka.server ReplicaManager IsrShrinksPerSec / IsrExpandsPerSec
        self.isr_expands = 0

    def submit(self, partition: Partition, proposal: LeaderAndIsr, reason: str) -> None:
        task = asyncio.get_running_loop().create_task(self._write(partition, proposal, reason))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def in_flight(self) -> int:
        return len(self._tasks)

    async def _write(self, partition: Partition, proposal: LeaderAndIsr, reason: str) -> None:
        stored: LeaderAndIsr | None = None
        try:
            stored = await self._store.write_isr(partition.topic, partition.index, proposal)
        except Exception as exc:
            log.warning("%s-%d: ISR change failed (%s)", partition.topic, partition.index, exc)
        else:
            if stored is None:
                log.info(
                    "%s-%d: ISR change lost a race (znode version moved); waiting for the controller",
                    partition.topic,
                    partition.index,
                )
        delta = partition.complete_isr_change(proposal, stored, reason)
        if delta == 0:
            return
        if delta < 0:
            self.isr_shrinks += 1
        else:
            self.isr_expands += 1
        try:
            await self._store.notify_isr_change([partition.tp])
        except Exception as exc:  # the controller still learns it from the next LeaderAndIsr round
            log.warning("%s-%d: ISR change notification failed (%s)", partition.topic, partition.index, exc)

    def notify_log_dir_failure(self, broker_id: int, partitions: list[TopicPartition]) -> None:
        """Tell the controller, off the loop, which replicas a failed log dir of this broker held."""
        task = asyncio.get_running_loop().create_task(self._notify_log_dir_failure(broker_id, partitions))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _notify_log_dir_failure(self, broker_id: int, partitions: list[TopicPartition]) -> None:
        while True:
            try:
                await self._store.notify_log_dir_failure(broker_id, partitions)
                return
            except Exception as exc:  # ZooKeeper away: meanwhile the replicas answer KAFKA_STORAGE_ERROR
                log.error("log dir failure notification failed (%s); trying again", exc)
            await sleep_ms(self._clock, LOG_DIR_NOTIFICATION_RETRY_MS)

    async def stop(self) -> None:
        await cancel_and_wait(self._tasks)
