"""One hosted replica of a partition, as the replica manager sees it (Kafka's ``Partition``).

A `Partition` pairs the local log with what this broker knows of the partition's leadership: the leader
and its epoch, the offset where that epoch started on this replica, the assigned replicas and the ISR
with the znode version it was read at (the ISR store's compare-and-set token), and, while this broker
leads, what each follower last fetched (`FollowerState`). Pure data: the replica manager changes it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from strom.storage.log import PartitionLog

TopicPartition = tuple[str, int]


@dataclass(slots=True)
class FollowerState:
    log_end_offset: int = -1
    last_caught_up_ms: int = 0
    last_fetch_leader_leo: int = -1
    last_fetch_ms: int = 0


@dataclass(slots=True)
class Partition:
    topic: str
    index: int
    log: PartitionLog
    leader_id: int = -1
    leader_epoch: int = -1
    leader_epoch_start_offset: int = 0
    replicas: list[int] = field(default_factory=list)
    isr: list[int] = field(default_factory=list)
    zk_version: int = -1
    controller_epoch: int = -1
    followers: dict[int, FollowerState] = field(default_factory=dict)

    @property
    def tp(self) -> TopicPartition:
        return (self.topic, self.index)

    def min_isr(self) -> int:
        return max(1, min(self.log.config.min_insync_replicas, len(self.replicas) or 1))
