"""Replica states as the controller sees them, and the moves allowed between them.

Theory of operation (Kafka's ``ReplicaStateMachine``, one enum member per state). A replica is one
broker's copy of one partition, keyed by `PartitionReplica` (topic, partition, broker).

* ``NON_EXISTENT`` -- not assigned, or deleted.
* ``NEW`` -- just assigned (topic creation, added partitions, the adding side of a reassignment); the
  broker has been or is about to be told by LeaderAndIsr and starts as a follower.
* ``ONLINE`` -- assigned and its broker is alive (after the partition has a leader, or when the broker
  starts again).
* ``OFFLINE`` -- its broker died, or is shutting down in a controlled way and was told to stop
  following (StopReplica without delete); also the first step of every deletion.
* ``REPLICA_DELETION_STARTED`` -- StopReplica with ``delete_partitions`` has been handed to the
  broker's channel.
* ``REPLICA_DELETION_SUCCESSFUL`` -- the deletion is done as far as the controller can know.
  The controller channel reports no responses: it retries a request until it is delivered or the
  broker leaves the live set, so a request handed to it counts as delivered.
* ``REPLICA_DELETION_INELIGIBLE`` -- the replica cannot be deleted now: its broker is not alive. Kafka
  retries such deletions when the broker returns; Strom does not yet, so such an entry is logged and
  forgotten with its topic or reassignment (the stray log stays on that broker's disk).

Allowed moves (``VALID_PREVIOUS[target]``, Kafka's table):

| target | from |
|---|---|
| NEW | NON_EXISTENT |
| ONLINE | NEW, ONLINE, OFFLINE, REPLICA_DELETION_INELIGIBLE |
| OFFLINE | NEW, ONLINE, OFFLINE, REPLICA_DELETION_INELIGIBLE |
| REPLICA_DELETION_STARTED | OFFLINE |
| REPLICA_DELETION_SUCCESSFUL | REPLICA_DELETION_STARTED |
| REPLICA_DELETION_INELIGIBLE | OFFLINE, REPLICA_DELETION_STARTED |
| NON_EXISTENT | REPLICA_DELETION_SUCCESSFUL |

So a replica is always taken offline before its deletion starts, and only a finished deletion makes it
non-existent. Pure: the effect that goes with a move (a StopReplica, with or without delete) is sent by
the controller step that makes the move (topic deletion, reassignment, controlled shutdown), and only
if the move was allowed.

Deleting replicas is two calls around the sending: `start_deletion` takes each replica offline, then
to REPLICA_DELETION_STARTED if its broker is alive (returning, per broker, the partitions whose
StopReplica with delete must now be sent) or to REPLICA_DELETION_INELIGIBLE if not;
`complete_deletion` then moves the started ones through REPLICA_DELETION_SUCCESSFUL to NON_EXISTENT and
forgets the ineligible ones (logged).
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Iterable
from enum import Enum
from typing import NamedTuple

from strom.cluster.state_table import StateTable

__all__ = [
    "VALID_PREVIOUS",
    "PartitionReplica",
    "ReplicaState",
    "complete_deletion",
    "new_replica_states",
    "start_deletion",
    "state_at_failover",
]

log = logging.getLogger("strom.cluster.state_change")


class PartitionReplica(NamedTuple):
    topic: str
    partition: int
    replica: int


class ReplicaState(Enum):
    NEW = "NewReplica"
    ONLINE = "OnlineReplica"
    OFFLINE = "OfflineReplica"
    REPLICA_DELETION_STARTED = "ReplicaDeletionStarted"
    REPLICA_DELETION_SUCCESSFUL = "ReplicaDeletionSuccessful"
    REPLICA_DELETION_INELIGIBLE = "ReplicaDeletionIneligible"
    NON_EXISTENT = "NonExistentReplica"

    @property
    def valid_previous(self) -> frozenset[ReplicaState]:
        """The states this one may be entered from."""
        return VALID_PREVIOUS[self]


_ASSIGNED = frozenset(
    {ReplicaState.NEW, ReplicaState.ONLINE, ReplicaState.OFFLINE, ReplicaState.REPLICA_DELETION_INELIGIBLE}
)

VALID_PREVIOUS: dict[ReplicaState, frozenset[ReplicaState]] = {
    ReplicaState.NEW: frozenset({ReplicaState.NON_EXISTENT}),
    ReplicaState.ONLINE: _ASSIGNED,
    ReplicaState.OFFLINE: _ASSIGNED,
    ReplicaState.REPLICA_DELETION_STARTED: frozenset({ReplicaState.OFFLINE}),
    ReplicaState.REPLICA_DELETION_SUCCESSFUL: frozenset({ReplicaState.REPLICA_DELETION_STARTED}),
    ReplicaState.REPLICA_DELETION_INELIGIBLE: frozenset(
        {ReplicaState.OFFLINE, ReplicaState.REPLICA_DELETION_STARTED}
    ),
    ReplicaState.NON_EXISTENT: frozenset({ReplicaState.REPLICA_DELETION_SUCCESSFUL}),
}


def new_replica_states() -> StateTable[PartitionReplica, ReplicaState]:
    return StateTable("replica", VALID_PREVIOUS, ReplicaState.NON_EXISTENT)


def state_at_failover(broker_id: int, live: Collection[int]) -> ReplicaState:
    """A replica's state rebuilt by a newly elected controller: ONLINE on a live broker, else OFFLINE."""
    return ReplicaState.ONLINE if broker_id in live else ReplicaState.OFFLINE


ReplicaTable = StateTable[PartitionReplica, ReplicaState]


def start_deletion(
    table: ReplicaTable, replicas: Iterable[PartitionReplica], live: Collection[int]
) -> dict[int, list[tuple[str, int]]]:
    """Offline, then DeletionStarted (live broker) or DeletionIneligible (dead broker).

    Returns, per live broker in first-seen order, the partitions to send StopReplica(delete) for:
    exactly the replicas whose deletion started.
    """
    per_broker: dict[int, list[tuple[str, int]]] = {}
    for replica in replicas:
        if not table.transition_to(replica, ReplicaState.OFFLINE, "deletion"):
            continue
        if replica.replica not in live:
            table.transition_to(replica, ReplicaState.REPLICA_DELETION_INELIGIBLE, "broker not alive")
        elif table.transition_to(replica, ReplicaState.REPLICA_DELETION_STARTED, "StopReplica(delete)"):
            per_broker.setdefault(replica.replica, []).append((replica.topic, replica.partition))
    return per_broker


def complete_deletion(table: ReplicaTable, replicas: Iterable[PartitionReplica]) -> None:
    """After the StopReplica requests were handed to the channel: started deletions succeed and the
    replicas cease to exist; ineligible ones (dead brokers) are forgotten, with a warning, because
    Strom does not retry them when the broker returns."""
    for replica in replicas:
        state = table.get(replica)
        if state is ReplicaState.REPLICA_DELETION_STARTED:
            table.transition_to(replica, ReplicaState.REPLICA_DELETION_SUCCESSFUL, "StopReplica sent")
            table.transition_to(replica, ReplicaState.NON_EXISTENT, "deleted")
        elif state is ReplicaState.REPLICA_DELETION_INELIGIBLE:
            log.warning("replica %s was not deleted: its broker is not alive; its log stays there", replica)
            table.forget([replica], "deletion ineligible")
