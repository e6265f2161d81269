"""The coordinators' one door to the replica manager: their internal topics' logs and leadership.

`CoordinatorPartitions` implements the coordinator runtime's ports (`strom.coordinator_runtime.ports`)
over `ReplicaManager`, and is the only module of the coordinator hosts (groups, transactions, the
schema registry) that calls it:

* **Leadership**: one callback on the replica manager; each leadership change of a partition is passed
  to the listeners registered for its topic as ``(partition, leader_epoch, is_leader)``. A partition
  this broker stops hosting while it led it (StopReplica with delete) counts as losing leadership.
* **Writer**: `append` as leader (an OSError of the log becomes KAFKA_STORAGE_ERROR), transactional
  coordinator batches flagged as the coordinator's own (sequence numbers unchecked); `wait_committed`
  is the acks=all wait of a produce (`ReplicaManager.wait_for_replication`); `append_marker` and its
  wait serve the transaction coordinator's COMMIT/ABORT markers on data partitions.
* **Reader**: log start offset, log end offset, high watermark and chunked reads of a hosted replica
  (leader or follower: the registry replays its follower replica too).

Call only from the broker's event loop.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from strom.broker.replication.partition import Partition
from strom.broker.replication.replica_manager import ReplicaManager
from strom.protocol.errors import ErrorCode, KafkaError
from strom.protocol.records.control import ControlType

log = logging.getLogger(__name__)

# (partition, leader epoch, is leader)
LeadershipListener = Callable[[int, int, bool], None]


class CoordinatorPartitions:
    def __init__(self, replica_manager: ReplicaManager) -> None:
        self._rm = replica_manager
        self._listeners: dict[str, list[LeadershipListener]] = {}
        replica_manager.on_leadership_change.append(self._on_leadership_change)

    @property
    def node_id(self) -> int:
        return self._rm.node_id

    def on_leadership(self, topic: str, listener: LeadershipListener) -> None:
        """Tell ``listener`` of every leadership change of ``topic``'s partitions on this broker."""
        self._listeners.setdefault(topic, []).append(listener)

    def _on_leadership_change(self, partition: Partition, is_leader: bool) -> None:
        for listener in self._listeners.get(partition.topic, ()):
            listener(partition.index, partition.leader_epoch, is_leader)

    # --- lookups -------------------------------------------------------------------------------
    def _hosted(self, topic: str, partition: int) -> Partition:
        part = self._rm.partitions.get((topic, partition))
        if part is None:
            raise KafkaError(ErrorCode.NOT_LEADER_OR_FOLLOWER, f"{topic}-{partition} is not hosted here")
        return part

    def replica(self, topic: str, partition: int) -> object | None:
        """The local replica (an opaque identity: a new object after it was deleted and re-created)."""
        return self._rm.partitions.get((topic, partition))

    def is_leader(self, topic: str, partition: int) -> bool:
        part = self._rm.partitions.get((topic, partition))
        return part is not None and part.leader_id == self._rm.node_id

    def leader_id(self, topic: str, partition: int) -> int | None:
        """The leader the local replica knows of (None without a local replica)."""
        part = self._rm.partitions.get((topic, partition))
        return None if part is None else part.leader_id

    def leader_epoch(self, topic: str, partition: int) -> int:
        return self._hosted(topic, partition).leader_epoch

    # --- PartitionReader -----------------------------------------------------------------------
    def log_start_offset(self, topic: str, partition: int) -> int:
        return self._hosted(topic, partition).log.log_start_offset

    def log_end_offset(self, topic: str, partition: int) -> int:
        return self._hosted(topic, partition).log.log_end_offset

    def high_watermark(self, topic: str, partition: int) -> int:
        return self._hosted(topic, partition).log.high_watermark

    def read(self, topic: str, partition: int, offset: int, max_bytes: int, end_offset: int) -> bytes:
        return self._hosted(topic, partition).log.read(offset, max_bytes, end_offset, True)

    # --- PartitionWriter -----------------------------------------------------------------------
    def append(self, topic: str, partition: int, batch: bytes, transactional: bool) -> int:
        rm = self._rm
        try:
            part = rm.leader_partition(topic, partition)
            info = rm.append_as_leader(part, batch, from_coordinator=transactional)
        except OSError as exc:
            raise KafkaError(ErrorCode.KAFKA_STORAGE_ERROR, str(exc)) from exc
        return info.last_offset + 1

    async def wait_committed(self, topic: str, partition: int, end_offset: int, timeout_ms: int) -> ErrorCode:
        part = self._rm.partitions.get((topic, partition))
        if part is None:
            return ErrorCode.NOT_LEADER_OR_FOLLOWER
        return await self._rm.wait_for_replication(part, end_offset, timeout_ms)

    # --- transaction markers -------------------------------------------------------------------
    async def write_marker(
        self,
        topic: str,
        partition: int,
        producer_id: int,
        producer_epoch: int,
        control: ControlType,
        coordinator_epoch: int,
        timeout_ms: int,
    ) -> ErrorCode:
        """Append a COMMIT/ABORT marker as the partition's leader and wait for its ISR (acks=-1)."""
        rm = self._rm
        try:
            part = rm.leader_partition(topic, partition)
            appended = rm.append_marker(part, producer_id, producer_epoch, control, coordinator_epoch)
            return await rm.wait_for_replication(part, appended.last_offset + 1, timeout_ms)
        except KafkaError as exc:
            return exc.code
        except OSError as exc:
            log.warning("%s-%d: marker append failed: %s", topic, partition, exc)
            return ErrorCode.KAFKA_STORAGE_ERROR
