"""One hosted replica of a partition, as the replica manager sees it (Kafka's ``Partition``).

A `Partition` pairs the local log with what this broker knows of the partition's leadership: the leader
and its epoch, the offset where that epoch started on this replica, the assigned replicas and the ISR
with the znode version it was read at (the ISR store's compare-and-set token), and, while this broker
leads, what each follower last fetched (`FollowerState`). Pure data: the replica manager changes it.

Parked fetches wait in the purgatory under one of two keys per partition, because they wait for
different things (as Kafka's delayed fetches check different offsets): a consumer's fetch reads below
the high watermark and is woken when it moves (`TopicPartition` itself is its key); a follower's reads
to the log end offset and is woken by appends (`follower_fetch_key`). An append that does not move the
high watermark (every acks=all append in a cluster) therefore wakes only the followers. A high-watermark
move wakes consumers and acks=all produces (`purgatory.DelayedProduces`); with `replica.selector.class`
set it also wakes the followers' fetches, which complete if the high watermark passed the one last sent
to that follower (`high_watermark_sent`): followers then serve consumers below the high watermark they
learn from the leader (KIP-392), so they must learn it without waiting for the next append (Kafka's
fetch sessions do the same). Without a selector, followers learn it with their next fetch.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from strom.storage.log import PartitionLog

TopicPartition = tuple[str, int]


def follower_fetch_key(tp: TopicPartition) -> tuple[str, int, str]:
    """The purgatory key under which followers' fetches of ``tp`` wait for appends."""
    return (tp[0], tp[1], "log_end")


@dataclass(slots=True)
class FollowerState:
    log_end_offset: int = -1
    log_start_offset: int = -1
    last_caught_up_ms: int = 0
    last_fetch_leader_leo: int = -1
    last_fetch_ms: int = 0
    # The high watermark this leader last put in a response to the follower: a parked fetch of the
    # follower completes when the high watermark passes it, so followers learn it without waiting for
    # an append (consumers reading from followers see records as soon as they are committed).
    high_watermark_sent: int = -1


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
    # Purgatory keys, built once (every append notifies them): see the module docstring.
    tp: TopicPartition = field(init=False, repr=False, compare=False)
    log_end_key: tuple[str, int, str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self.tp = (self.topic, self.index)
        self.log_end_key = follower_fetch_key(self.tp)

    def min_isr(self) -> int:
        return max(1, min(self.log.config.min_insync_replicas, len(self.replicas) or 1))
