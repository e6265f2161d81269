"""Partition states as the controller sees them, and the moves allowed between them.

Theory of operation (Kafka's ``PartitionStateMachine``, one enum member per state):

* ``NON_EXISTENT`` -- the controller knows no such partition: never created, or deleted.
* ``NEW`` -- the partition is in a topic assignment but has no state znode yet (no leader was ever
  elected): just created, or created while none of its replicas was alive.
* ``ONLINE`` -- a leader has been elected and written to the state znode (leader != -1).
* ``OFFLINE`` -- the partition had a leader, and the leader died or was taken away with nobody eligible
  to replace it (leader -1 in the znode), or the controller found the recorded leader dead at fail-over.
  Also the first step of deletion.

Allowed moves (``VALID_PREVIOUS[target]``):

| target | from | when |
|---|---|---|
| NEW | NON_EXISTENT | a topic or partition appears in ``/brokers/topics`` |
| ONLINE | NEW, ONLINE, OFFLINE | a leader elected (first, offline, preferred, reassignment, shutdown) |
| OFFLINE | NEW, ONLINE, OFFLINE | no eligible leader (leader -1 written); deletion starts |
| NON_EXISTENT | OFFLINE | deletion completes |

An election that writes a state is an ONLINE -> ONLINE move when it finds a leader and an ONLINE ->
OFFLINE move when it writes leader -1, so the state after a write is a function of the written leader
(`state_after_election`). The I/O side (conditional writes, retries) is `PartitionStateMachine` in
`strom.cluster.partition_machine`; this module is pure.
"""

from __future__ import annotations

from collections.abc import Collection
from enum import Enum

from strom.cluster.election import NO_LEADER, LeaderAndIsr
from strom.cluster.state_table import StateTable

__all__ = [
    "VALID_PREVIOUS",
    "PartitionState",
    "TopicPartition",
    "new_partition_states",
    "state_after_election",
    "state_at_failover",
]

TopicPartition = tuple[str, int]


class PartitionState(Enum):
    NON_EXISTENT = "NonExistentPartition"
    NEW = "NewPartition"
    ONLINE = "OnlinePartition"
    OFFLINE = "OfflinePartition"

    @property
    def valid_previous(self) -> frozenset[PartitionState]:
        """The states this one may be entered from."""
        return VALID_PREVIOUS[self]


_ELECTABLE = frozenset({PartitionState.NEW, PartitionState.ONLINE, PartitionState.OFFLINE})

VALID_PREVIOUS: dict[PartitionState, frozenset[PartitionState]] = {
    PartitionState.NON_EXISTENT: frozenset({PartitionState.OFFLINE}),
    PartitionState.NEW: frozenset({PartitionState.NON_EXISTENT}),
    PartitionState.ONLINE: _ELECTABLE,
    PartitionState.OFFLINE: _ELECTABLE,
}


def new_partition_states() -> StateTable[TopicPartition, PartitionState]:
    return StateTable("partition", VALID_PREVIOUS, PartitionState.NON_EXISTENT)


def state_after_election(leader: int) -> PartitionState:
    """The state a partition is in once a state znode with ``leader`` has been written."""
    return PartitionState.OFFLINE if leader == NO_LEADER else PartitionState.ONLINE


def state_at_failover(state: LeaderAndIsr | None, live: Collection[int]) -> PartitionState:
    """A partition's state rebuilt by a newly elected controller from its znode and the live brokers."""
    if state is None:
        return PartitionState.NEW
    if state.leader != NO_LEADER and state.leader in live:
        return PartitionState.ONLINE
    return PartitionState.OFFLINE
