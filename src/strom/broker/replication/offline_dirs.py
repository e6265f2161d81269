"""Replicas in an offline log dir (KIP-112, JBOD: a broker with more than one log dir).

Theory of operation (Kafka's ``ReplicaManager.handleLogDirFailure``). The log manager's failure channel
(strom.storage.log_dirs) reports a log dir whose write failed, from inside that write (a produce, a
follower's append, a coordinator's); at the event loop's next turn `OfflineLogDirs.take_offline` has
the log manager take the dir offline and takes its replicas off this broker: they are no longer hosted
(parked fetches and acks=all waits re-check and move on), followers stop fetching them, a coordinator
leading one unloads it (the leadership callbacks), and every request for one answers
KAFKA_STORAGE_ERROR, a LeaderAndIsr included: no replica of it is made again in another dir, as in
Kafka. The controller is told through the metadata store (`IsrStore.notify_log_dir_failure`: a
log-dir event notification naming the replicas) and moves their leadership and ISRs
(strom.cluster.log_dir_failures). A StopReplica that deletes one forgets it (a topic made again gets an
online dir). Nothing else brings them back before the restart, which loads the dir again.

A dir that fails at start (LogManager: its lock, its listing, a log's load) is offline from the start,
with the replicas found in it. Neither those nor the ones taken offline are told to a controller that
did not see the failure (a new registration after a session expiry, a restart, a new controller): a
LeaderAndIsr naming one is answered KAFKA_STORAGE_ERROR, from which the controller learns it, as
Kafka's does (strom.cluster.log_dir_failures).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Protocol

from strom.broker.replication.isr_proposals import IsrChangeManager
from strom.broker.replication.partition import Partition, TopicPartition
from strom.broker.replication.replica_fetcher import ReplicaFetcherManager
from strom.broker.replication.unopened_logs import UnopenedLogs
from strom.protocol.errors import ErrorCode, KafkaError
from strom.storage.log_manager import LogManager

log = logging.getLogger(__name__)

__all__ = ["STORAGE_ERROR", "OfflineLogDirs"]

STORAGE_ERROR = int(ErrorCode.KAFKA_STORAGE_ERROR)


class _ReplicaManager(Protocol):
    """What of the replica manager a failed dir's replicas are taken off."""

    node_id: int
    partitions: dict[TopicPartition, Partition]
    unopened: UnopenedLogs
    fetchers: ReplicaFetcherManager
    isr_changes: IsrChangeManager
    on_leadership_change: list[Callable[[Partition, bool], None]]


class OfflineLogDirs:
    def __init__(
        self,
        manager: _ReplicaManager,
        log_manager: LogManager,
        replicated: dict[TopicPartition, Partition],
        wake: Callable[[TopicPartition], None],
    ) -> None:
        self._manager = manager
        self._log_manager = log_manager
        self._replicated = replicated  # the replica manager's partitions with followers
        self._wake = wake
        # KAFKA_STORAGE_ERROR until the restart; those of a dir that failed at start from the start.
        self.partitions: set[TopicPartition] = set(log_manager.offline_at_start)
        self._loop: asyncio.AbstractEventLoop | None = None
        log_manager.failures.on_dir_failure = self._dir_failed

    def start(self) -> None:
        self._loop = asyncio.get_running_loop()

    def check(self, tp: TopicPartition) -> None:
        """Raise KAFKA_STORAGE_ERROR for a replica in an offline log dir."""
        if tp in self.partitions:
            raise KafkaError(ErrorCode.KAFKA_STORAGE_ERROR, f"{tp[0]}-{tp[1]} is in an offline log dir")

    def _dir_failed(self, log_dir: str) -> None:
        # Reported from inside a write: the replicas go offline at the loop's next turn, not under the
        # caller's feet.
        if self._loop is None:
            self.take_offline(log_dir)
        else:
            self._loop.call_soon_threadsafe(self.take_offline, log_dir)

    def take_offline(self, log_dir: str) -> list[TopicPartition]:
        """The log dir failed: its replicas go offline here and the controller is told; returns them."""
        manager = self._manager
        offline: list[TopicPartition] = []
        for stored in self._log_manager.take_dir_offline(log_dir):
            tp = (stored.topic, stored.partition)
            offline.append(tp)
            self.partitions.add(tp)
            manager.unopened.forget(tp)
            manager.fetchers.remove_partition(tp)
            self._replicated.pop(tp, None)
            part = manager.partitions.pop(tp, None)
            if part is not None and part.leader_id == manager.node_id:
                for callback in manager.on_leadership_change:
                    callback(part, False)
            self._wake(tp)
        if offline:
            log.error("%d replica(s) offline with log dir %s", len(offline), log_dir)
            manager.isr_changes.notify_log_dir_failure(manager.node_id, offline)
        return offline
