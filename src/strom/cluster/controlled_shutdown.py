"""Controlled shutdown: a stopping broker hands its leaderships over before it goes.

Theory of operation (Kafka's ``KafkaController.doControlledShutdown``). A broker about to stop sends
ControlledShutdown to the controller (or, being the controller, calls it directly) and waits for the
answer. The controller marks the broker *shutting down* -- it is never chosen as a leader again while
it lives -- and plans, per partition the broker replicates (`plan_controlled_shutdown`, pure):

* it **leads** the partition: elect another leader among the live ISR members that are not shutting
  down (`strom.cluster.election.controlled_shutdown_leader`); with nobody eligible it stays leader
  until it dies, and the partition goes offline then as after any failure;
* it **follows** and is in the ISR: remove it from the ISR (`leave_isr_decision`; never the last
  member) and send it StopReplica without delete, so that it stops fetching; its replica goes OFFLINE;
* it follows but is out of the ISR already: nothing to do.

The changed partitions get LeaderAndIsr and every broker UpdateMetadata. The answer lists the
partitions the broker still leads; the broker retries a few times while that list is not empty.
Call only from the controller's event loop.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from strom.cluster.context import ControllerContext, TopicPartition
from strom.cluster.election import Decision, LeaderAndIsr, controlled_shutdown_leader, shrink_isr
from strom.cluster.partition_machine import PartitionStateMachine
from strom.cluster.propagation import ControllerRequests
from strom.cluster.replica_state import PartitionReplica, ReplicaState

__all__ = [
    "ControlledShutdown",
    "ShutdownAction",
    "leave_isr_decision",
    "partitions_led_by",
    "plan_controlled_shutdown",
]


class ShutdownAction(enum.Enum):
    MOVE_LEADERSHIP = "move leadership"
    LEAVE_ISR = "leave ISR and stop fetching"


@dataclass(frozen=True, slots=True)
class PartitionView:
    """What the plan needs to know about one partition."""

    tp: TopicPartition
    state: LeaderAndIsr | None
    replicas: Sequence[int]


def plan_controlled_shutdown(
    broker_id: int, partitions: Iterable[PartitionView]
) -> list[tuple[TopicPartition, ShutdownAction]]:
    """What the controller must do for each partition the stopping broker replicates, in order."""
    plan: list[tuple[TopicPartition, ShutdownAction]] = []
    for view in partitions:
        if view.state is None or broker_id not in view.replicas:
            continue
        if view.state.leader == broker_id:
            plan.append((view.tp, ShutdownAction.MOVE_LEADERSHIP))
        elif broker_id in view.state.isr:
            plan.append((view.tp, ShutdownAction.LEAVE_ISR))
    return plan


def leave_isr_decision(current: LeaderAndIsr, broker_id: int) -> Decision:
    """The same leader with ``broker_id`` out of the ISR; None if that would empty the ISR."""
    isr = shrink_isr(current.isr, {broker_id})
    return (current.leader, isr) if isr else None


def partitions_led_by(
    broker_id: int, order: Iterable[TopicPartition], leadership: Mapping[TopicPartition, LeaderAndIsr]
) -> list[TopicPartition]:
    return [tp for tp in order if (s := leadership.get(tp)) is not None and s.leader == broker_id]


class ControlledShutdown:
    def __init__(
        self, ctx: ControllerContext, partitions: PartitionStateMachine, requests: ControllerRequests
    ) -> None:
        self.ctx = ctx
        self.partitions = partitions
        self.requests = requests

    def shutdown(self, broker_id: int) -> list[TopicPartition]:
        """Move leadership off a stopping broker and take it out of ISRs; returns what it still leads."""
        ctx = self.ctx
        ctx.shutting_down.add(broker_id)
        live = ctx.live_ids()
        views = (PartitionView(tp, ctx.leadership.get(tp), ctx.replicas(tp)) for tp in ctx.all_partitions())
        changed: set[TopicPartition] = set()
        stopped: list[TopicPartition] = []
        for tp, action in plan_controlled_shutdown(broker_id, views):
            if action is ShutdownAction.LEAVE_ISR:
                replica = PartitionReplica(tp[0], tp[1], broker_id)
                if ctx.replica_states.transition_to(replica, ReplicaState.OFFLINE, "controlled shutdown"):
                    stopped.append(tp)
            if self.partitions.elect(tp, self._decision(tp, action, broker_id, live), action.value):
                changed.add(tp)
        if changed:
            self.requests.leader_and_isr(changed)
            self.requests.update_metadata()
        self.requests.stop_replica(broker_id, stopped, delete=False)
        return partitions_led_by(broker_id, ctx.all_partitions(), ctx.leadership)

    def _decision(
        self, tp: TopicPartition, action: ShutdownAction, broker_id: int, live: set[int]
    ) -> Callable[[LeaderAndIsr], Decision]:
        if action is ShutdownAction.LEAVE_ISR:
            return lambda cur: leave_isr_decision(cur, broker_id)
        replicas = self.ctx.replicas(tp)
        return lambda cur: controlled_shutdown_leader(replicas, cur.isr, live, self.ctx.shutting_down)
