"""Partition reassignment (KIP-455): move a partition's replicas to other brokers without losing data.

Theory of operation. AlterPartitionReassignments names, per partition, the *target* replica list (or
None to cancel). The assignment znode holds the move in flight: ``partitions[p]`` is the full replica set
during the move -- the targets first, then the original replicas being removed -- with
``adding_replicas[p]`` (targets not in the original) and ``removing_replicas[p]`` (originals not in the
target). The steps:

1. **Start** (`plan_reassignment`, pure): check the target (non-empty, no duplicates, every broker
   alive), write the assignment conditionally, send LeaderAndIsr to the full replica set so the adding
   replicas (NEW) start following, and UpdateMetadata. A target equal to the original replicas cancels
   the move: the assignment goes back to the original replicas, leadership and ISR are brought back
   inside them (`completion_decision`), and each replica no longer listed (an adding replica of the
   cancelled move, or of a move replaced by a new target) is deleted like a removed one (step 3).
2. **Wait** until every target replica is in the ISR (`ready_to_complete`, checked after every ISR change
   notification and every ``reassignment_check_interval_s``).
3. **Complete**: if the leader is not a target, elect one among the targets (`completion_decision`);
   shrink the replica set and the ISR to the targets; write the assignment without the in-flight maps;
   send LeaderAndIsr; the target replicas go ONLINE; each removed replica goes OFFLINE and through
   deletion (StopReplica with delete to its live broker); UpdateMetadata to all.

Call only from the controller's event loop.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass

from strom.cluster.context import TopicPartition
from strom.cluster.controller_part import ControllerPart, ControllerParts
from strom.cluster.election import Decision, LeaderAndIsr, reassignment_leader, trusted_isr
from strom.cluster.replica_state import PartitionReplica, ReplicaState, complete_deletion, start_deletion
from strom.cluster.zk_paths import TopicAssignment
from strom.protocol.errors import ErrorCode, KafkaError

log = logging.getLogger("strom.cluster.controller")

__all__ = [
    "PartitionReassignment",
    "Reassignments",
    "completion_decision",
    "in_flight",
    "plan_reassignment",
    "ready_to_complete",
]

Outcome = tuple[ErrorCode, str | None]


@dataclass(frozen=True, slots=True)
class PartitionReassignment:
    """A partition's assignment after a reassignment request.

    ``adding``/``removing`` are None when no move is in flight afterwards (a cancel, or a target equal to
    the current replicas); otherwise they are written even when empty (a pure reordering, which
    completes at the next check).
    """

    replicas: list[int]
    adding: list[int] | None
    removing: list[int] | None


def plan_reassignment(
    current: Sequence[int],
    adding: Sequence[int],
    removing: Sequence[int],
    requested: Sequence[int] | None,
    live: Collection[int],
) -> PartitionReassignment:
    """The partition's new assignment for a request (``requested`` None = cancel the move in flight).

    Raises:
        KafkaError: NO_REASSIGNMENT_IN_PROGRESS for a cancel with nothing to cancel,
            INVALID_REPLICA_ASSIGNMENT for an empty, duplicated or not-all-live target.
    """
    if requested is None and not adding and not removing:
        raise KafkaError(ErrorCode.NO_REASSIGNMENT_IN_PROGRESS)
    original = [b for b in current if b not in adding]
    target = list(requested) if requested is not None else original
    if not target or len(set(target)) != len(target) or any(b not in live for b in target):
        raise KafkaError(ErrorCode.INVALID_REPLICA_ASSIGNMENT, f"replicas {target} are not all live brokers")
    if target == original:
        return PartitionReassignment(original, None, None)
    return PartitionReassignment(
        target + [b for b in original if b not in target],
        [b for b in target if b not in original],
        [b for b in original if b not in target],
    )


def ready_to_complete(target: Collection[int], isr: Collection[int]) -> bool:
    """Step 2: every target replica has caught up."""
    return all(b in isr for b in target)


def completion_decision(current: LeaderAndIsr, target: Sequence[int], live: Collection[int]) -> Decision:
    """Step 3: the ISR shrinks to the targets; the leader stays if it is a target, else a target leads."""
    isr = [b for b in trusted_isr(current) if b in target]
    if current.leader in target:
        return current.leader, isr
    chosen = reassignment_leader(target, trusted_isr(current), live)
    return None if chosen is None else (chosen[0], isr)


def in_flight(
    assignments: Mapping[str, TopicAssignment],
) -> dict[TopicPartition, tuple[list[int], list[int], list[int]]]:
    """Every move in flight: (replicas, adding, removing) per partition."""
    found = {}
    for topic, a in assignments.items():
        for p in set(a.adding_replicas) | set(a.removing_replicas):
            found[(topic, p)] = (
                list(a.partitions[p]),
                a.adding_replicas.get(p, []),
                a.removing_replicas.get(p, []),
            )
    return found


def _apply(assignment: TopicAssignment, p: int, plan: PartitionReassignment) -> None:
    assignment.partitions[p] = plan.replicas
    if plan.adding is None or plan.removing is None:
        assignment.adding_replicas.pop(p, None)
        assignment.removing_replicas.pop(p, None)
    else:
        assignment.adding_replicas[p] = plan.adding
        assignment.removing_replicas[p] = plan.removing


class Reassignments(ControllerPart):
    def __init__(self, parts: ControllerParts, reload_topic: Callable[[str], object]) -> None:
        super().__init__(parts)
        self._reload_topic = reload_topic

    def reassign(self, targets: dict[TopicPartition, list[int] | None]) -> dict[TopicPartition, Outcome]:
        """Step 1 for each partition; the per-partition outcome for AlterPartitionReassignments."""
        results: dict[TopicPartition, Outcome] = {}
        changed: set[TopicPartition] = set()
        dropped: list[PartitionReplica] = []
        for tp, requested in targets.items():
            assignment = self.ctx.assignments.get(tp[0])
            if assignment is None or tp[1] not in assignment.partitions:
                results[tp] = (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, None)
                continue
            current = list(assignment.partitions[tp[1]])
            try:
                plan = plan_reassignment(
                    current,
                    assignment.adding_replicas.get(tp[1], []),
                    assignment.removing_replicas.get(tp[1], []),
                    requested,
                    self.ctx.live,
                )
            except KafkaError as exc:
                results[tp] = (exc.code, exc.message)
                continue
            _apply(assignment, tp[1], plan)
            if not self._write_assignment(tp[0]):
                results[tp] = (ErrorCode.REQUEST_TIMED_OUT, "assignment changed concurrently; retry")
                continue
            results[tp] = (ErrorCode.NONE, None)
            changed.add(tp)
            added = [b for b in plan.replicas if b not in current]
            self.ctx.replica_states.transition_all(
                self.ctx.replicas_of(tp, added), ReplicaState.NEW, "adding"
            )
            gone = [b for b in current if b not in plan.replicas]
            if gone:
                # Replicas leave (a cancel or a changed target): leadership and ISR stay inside the rest.
                self.partitions.elect(tp, self._completion(plan.replicas), "reassignment cancelled")
                dropped.extend(self.ctx.replicas_of(tp, gone))
        if changed:
            self.requests.leader_and_isr(changed)
            self.requests.update_metadata()
            self._delete(dropped)
            self.check()
        return results

    def check(self) -> None:
        """Steps 2 and 3 for every move in flight."""
        for (topic, p), (replicas, _adding, removing) in in_flight(self.ctx.assignments).items():
            tp = (topic, p)
            state = self.ctx.leadership.get(tp)
            target = [b for b in replicas if b not in removing]
            if state is None or not ready_to_complete(target, state.isr):
                continue

            self.partitions.elect(tp, self._completion(target), "reassignment")
            assignment = self.ctx.assignments[topic]
            _apply(assignment, p, PartitionReassignment(target, None, None))
            if not self._write_assignment(topic):
                continue
            self.partitions.prune_elr([tp], "reassignment")  # the removed ones' logs go
            log.info(
                "controller: reassignment of %s-%d complete: %s (removed %s)", topic, p, target, removing
            )
            self.requests.leader_and_isr({tp})
            self.partitions.sync_replicas(tp)
            self._delete(self.ctx.replicas_of(tp, removing))
            self.requests.update_metadata()

    def _completion(self, target: list[int]) -> Callable[[LeaderAndIsr], Decision]:
        live = self.ctx.live_ids()
        return lambda cur: completion_decision(cur, target, live)

    def _delete(self, replicas: list[PartitionReplica]) -> None:
        for broker_id, tps in start_deletion(self.ctx.replica_states, replicas, self.ctx.live).items():
            self.requests.stop_replica(broker_id, tps, delete=True)
        complete_deletion(self.ctx.replica_states, replicas)

    def _write_assignment(self, topic: str) -> bool:
        version = self.zk.set_topic_assignment(
            topic, self.ctx.assignments[topic], self.ctx.assignment_versions[topic]
        )
        if version is None:
            self._reload_topic(topic)
            return False
        self.ctx.assignment_versions[topic] = version
        return True
