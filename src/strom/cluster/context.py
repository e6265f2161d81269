"""The active controller's view of the cluster: what it last read from or wrote to ZooKeeper.

Theory of operation (Kafka's ``ControllerContext``). While a broker is the active controller it caches:
the live brokers (``/brokers/ids``), every topic's assignment (``/brokers/topics/<t>``, with the znode
version for conditional writes), every partition's `LeaderAndIsr` (its state znode, with version), the
brokers in controlled shutdown, and the two state tables (partition and replica states). Every decision
reads this cache; every ZooKeeper write that succeeds updates it; a write conflict re-reads the znode
into it. Resigning clears it, and the next controller rebuilds it from ZooKeeper.

Pure data, no I/O. Call only from the controller's event loop.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from strom.cluster.election import LeaderAndIsr
from strom.cluster.partition_state import PartitionState, TopicPartition, new_partition_states
from strom.cluster.replica_state import PartitionReplica, ReplicaState, new_replica_states
from strom.cluster.state_table import StateTable
from strom.cluster.zk_paths import BrokerRegistration, TopicAssignment

__all__ = [
    "ControllerContext",
    "TopicPartition",
    "bounced_since",
    "broker_changes",
    "renewed_since",
    "renews",
]


def renews(known_epoch: int | None, registration: BrokerRegistration) -> bool:
    """Whether ``registration`` is the process registered at ``known_epoch`` registering again after its
    session expired (once or several times): it names that epoch among those it replaces. The
    process never stopped, so its log is whole; were it taken for a restart, its failure would move
    its leaderships and shrink its ISRs to brokers that may themselves have restarted with less (a
    restarted process's old session can outlive the new process's start)."""
    return known_epoch is not None and known_epoch >= 0 and known_epoch in registration.previous_epochs


def broker_changes(
    before: dict[int, BrokerRegistration],
    after: dict[int, BrokerRegistration],
    known: Mapping[int, int] | None = None,
) -> tuple[set[int], set[int]]:
    """(dead, new) brokers between two reads of ``/brokers/ids``. A broker that registered again
    (a new ephemeral znode, so a new czxid epoch) is both: it died and started; unless it `renews`
    the registration seen before (see `renewed_since`). So is a broker absent from ``before`` whose
    registration is another process than the one ``known`` (the last epochs taken in) names: its
    failure was decided in an earlier event, its restart shows only now, and the log it comes
    back with may lack what the process seen before had (a machine crash)."""
    dead = {
        b
        for b in before
        if b not in after or (after[b].epoch != before[b].epoch and not renews(before[b].epoch, after[b]))
    }
    if known:
        dead |= {
            b
            for b, registration in after.items()
            if b not in before
            and b in known
            and known[b] != registration.epoch
            and not renews(known[b], registration)
        }
    new = {b for b in after if b not in before or b in dead}
    return dead, new


def renewed_since(before: dict[int, BrokerRegistration], after: dict[int, BrokerRegistration]) -> set[int]:
    """Brokers whose process registered again after its session expired, without restarting: neither
    dead nor new, only their requests' broker epoch changes."""
    return {
        b
        for b, registration in after.items()
        if b in before and registration.epoch != before[b].epoch and renews(before[b].epoch, registration)
    }


def bounced_since(recorded: dict[int, int] | None, registered: dict[int, BrokerRegistration]) -> set[int]:
    """Registered brokers whose registration (epoch) is not the one a controller last took in
    (``recorded``), or that it did not know, unless the registration `renews` it; none if nothing was
    ever recorded (a cluster whose controllers did not record them trusts the registrations, as
    Kafka's ZooKeeper mode does)."""
    if recorded is None:
        return set()
    return {
        b
        for b, registration in registered.items()
        if recorded.get(b) != registration.epoch and not renews(recorded.get(b), registration)
    }


@dataclass(slots=True)
class ControllerContext:
    broker_id: int
    epoch: int = -1
    #: Version of ``/controller_epoch`` this controller wrote: every write checks it (fencing).
    epoch_zk_version: int = -1
    live: dict[int, BrokerRegistration] = field(default_factory=dict)
    shutting_down: set[int] = field(default_factory=set)
    #: Replicas a broker reported in a failed log dir (KIP-112): not eligible for leadership or the ISR
    #: until that broker registers again (a restart, which loads the dir anew).
    offline_dir_replicas: dict[int, set[TopicPartition]] = field(default_factory=dict)
    assignments: dict[str, TopicAssignment] = field(default_factory=dict)
    assignment_versions: dict[str, int] = field(default_factory=dict)
    leadership: dict[TopicPartition, LeaderAndIsr] = field(default_factory=dict)
    #: Each broker's last registration (epoch) this controller took in, dead ones' too: the epoch an
    #: eligible leader replica is kept with (`strom.cluster.election.next_elr`).
    last_epochs: dict[int, int] = field(default_factory=dict)
    #: Where replicas' logs end, as they answered a LeaderAndIsr without a leader: per partition, per
    #: broker, (its registration epoch then, latest leader epoch, log end offset).
    log_ends: dict[TopicPartition, dict[int, tuple[int, int, int]]] = field(default_factory=dict)
    partition_states: StateTable[TopicPartition, PartitionState] = field(default_factory=new_partition_states)
    replica_states: StateTable[PartitionReplica, ReplicaState] = field(default_factory=new_replica_states)

    def all_partitions(self) -> list[TopicPartition]:
        return [(t, p) for t, a in sorted(self.assignments.items()) for p in sorted(a.partitions)]

    def partitions_of(self, topic: str) -> list[TopicPartition]:
        assignment = self.assignments.get(topic)
        return [] if assignment is None else [(topic, p) for p in sorted(assignment.partitions)]

    def replicas(self, tp: TopicPartition) -> list[int]:
        """The partition's replica list (first = preferred leader; during a reassignment the targets
        first, then the replicas being removed)."""
        assignment = self.assignments.get(tp[0])
        return list(assignment.partitions.get(tp[1], [])) if assignment else []

    def replicas_of(self, tp: TopicPartition, brokers: list[int] | None = None) -> list[PartitionReplica]:
        """`PartitionReplica` keys of ``brokers`` (default: all assigned replicas) for ``tp``."""
        return [
            PartitionReplica(tp[0], tp[1], b) for b in (self.replicas(tp) if brokers is None else brokers)
        ]

    def replicas_on(self, brokers: set[int]) -> list[PartitionReplica]:
        """Every assigned replica hosted by one of ``brokers``."""
        return [r for tp in self.all_partitions() for r in self.replicas_of(tp) if r.replica in brokers]

    def live_ids(self) -> set[int]:
        return set(self.live)

    def forget_offline_dirs(self, brokers: set[int]) -> None:
        for broker in brokers:
            self.offline_dir_replicas.pop(broker, None)

    def epoch_of(self, broker: int) -> int | None:
        """The broker epoch of ``broker``'s registration: its live one, else the last taken in."""
        registration = self.live.get(broker)
        return registration.epoch if registration is not None else self.last_epochs.get(broker)

    def take_in_epochs(self) -> None:
        self.last_epochs.update((b, r.epoch) for b, r in self.live.items())

    def electable(self, tp: TopicPartition, elr: tuple[tuple[int, int], ...]) -> set[int]:
        """The eligible leader replicas of ``tp`` live as the process they were when they became
        eligible (the same registration, or its renewal after a session expiry) with their replica
        of ``tp`` in a working log dir."""
        found = set()
        for broker, epoch in elr:
            registration = self.live.get(broker)
            if registration is None or tp in self.offline_dir_replicas.get(broker, ()):
                continue
            if registration.epoch == epoch or renews(epoch, registration):
                found.add(broker)
        return found

    def log_ends_of(self, tp: TopicPartition) -> dict[int, tuple[int, int]]:
        """The answered log ends of ``tp``'s replicas still live as the process that answered."""
        return {
            b: (epoch, end)
            for b, (registration, epoch, end) in self.log_ends.get(tp, {}).items()
            if b in self.live and self.live[b].epoch == registration
        }

    def live_replicas_for(self, tp: TopicPartition, live: set[int]) -> set[int]:
        """``live`` without the brokers whose replica of ``tp`` is in a failed log dir."""
        return {b for b in live if tp not in self.offline_dir_replicas.get(b, ())}

    def forget_topic(self, topic: str) -> None:
        """Drop every cached fact about ``topic`` (its znodes are gone)."""
        assignment = self.assignments.pop(topic, None)
        self.assignment_versions.pop(topic, None)
        if assignment is None:
            return
        for p, replicas in assignment.partitions.items():
            self.leadership.pop((topic, p), None)
            self.log_ends.pop((topic, p), None)
            self.partition_states.forget([(topic, p)], f"topic {topic} is gone")
            self.replica_states.forget(
                [PartitionReplica(topic, p, b) for b in replicas], f"topic {topic} is gone"
            )

    def clear(self) -> None:
        """Forget what ZooKeeper said (on resignation; brokers in controlled shutdown are kept, as
        they keep asking whichever controller is active)."""
        self.live.clear()
        self.last_epochs.clear()
        self.offline_dir_replicas.clear()
        self.assignments.clear()
        self.assignment_versions.clear()
        self.leadership.clear()
        self.log_ends.clear()
        self.partition_states.clear()
        self.replica_states.clear()
