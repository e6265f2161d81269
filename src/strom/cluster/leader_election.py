"""Elections on demand: the ElectLeaders API and the periodic auto leader rebalance.

Theory of operation (Kafka's ``onReplicaElection`` and ``checkAndTriggerAutoLeaderRebalance``).

* **ElectLeaders** (KIP-460, `strom cluster elect-leaders`), per requested partition (all when none
  are named):

  - PREFERRED: not needed if the first replica leads already; otherwise it takes over if it is alive,
    in the ISR and not shutting down (`strom.cluster.election.preferred_leader`), else the answer is
    PREFERRED_LEADER_NOT_AVAILABLE.
  - UNCLEAN: not needed while the leader is alive; otherwise the first live ISR member leads, or, if the
    ISR has no live member, the first live replica at all (records may be lost; the operator asked
    for it), else ELIGIBLE_LEADERS_NOT_AVAILABLE.

  Unknown partitions answer UNKNOWN_TOPIC_OR_PARTITION. Every election that was written is followed
  by LeaderAndIsr for the changed partitions and UpdateMetadata to every broker.
* **Auto rebalance** (`auto.leader.rebalance.enable`, every `leader.imbalance.check.interval.seconds`):
  a preferred election for every partition whose preferred replica is alive and in the ISR but does not
  lead, except partitions a reassignment is adding replicas to
  (`strom.cluster.election.preferred_leader_imbalanced`).

Decisions are the pure functions of `strom.cluster.election`; writes go through the partition state
machine. Call only from the controller's event loop.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from strom.cluster import election
from strom.cluster.context import ControllerContext, TopicPartition
from strom.cluster.election import Decision, ElectionType, LeaderAndIsr
from strom.cluster.partition_machine import PartitionStateMachine
from strom.cluster.propagation import ControllerRequests
from strom.protocol.errors import ErrorCode

log = logging.getLogger("strom.cluster.controller")

__all__ = ["LeaderElections"]

Outcome = tuple[ErrorCode, str | None]


class LeaderElections:
    def __init__(
        self, ctx: ControllerContext, partitions: PartitionStateMachine, requests: ControllerRequests
    ) -> None:
        self.ctx = ctx
        self.partitions = partitions
        self.requests = requests

    def elect_leaders(
        self, election_type: ElectionType, partitions: list[TopicPartition] | None
    ) -> dict[TopicPartition, Outcome]:
        """ElectLeaders (preferred or unclean); per-partition outcome."""
        results: dict[TopicPartition, Outcome] = {}
        changed: set[TopicPartition] = set()
        live = self.ctx.live_ids() - self.ctx.shutting_down
        for tp in partitions if partitions is not None else self.ctx.all_partitions():
            state = self.ctx.leadership.get(tp)
            replicas = self.ctx.replicas(tp)
            if state is None or not replicas:
                results[tp] = (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, None)
                continue
            if not election.election_needed(election_type, state, replicas, live):
                results[tp] = (ErrorCode.ELECTION_NOT_NEEDED, None)
                continue
            if self.partitions.elect(
                tp, _decision(election_type, replicas, live), election_type.name.lower()
            ):
                changed.add(tp)
                results[tp] = (ErrorCode.NONE, None)
            elif election_type == ElectionType.UNCLEAN:
                results[tp] = (ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE, "no live replica")
            else:
                results[tp] = (
                    ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE,
                    f"preferred replica {replicas[0]} is not alive and in the ISR",
                )
        if changed:
            self.requests.leader_and_isr(changed)
            self.requests.update_metadata()
        return results

    def auto_rebalance(self) -> None:
        live = self.ctx.live_ids()
        imbalanced = [
            tp
            for tp in self.ctx.all_partitions()
            if (s := self.ctx.leadership.get(tp)) is not None
            and election.preferred_leader_imbalanced(
                s,
                self.ctx.replicas(tp),
                live,
                bool(self.ctx.assignments[tp[0]].adding_replicas.get(tp[1])),
            )
        ]
        if imbalanced:
            log.info("controller: auto rebalance moves %d leader(s) back to preferred", len(imbalanced))
            self.elect_leaders(ElectionType.PREFERRED, imbalanced)


def _decision(
    election_type: ElectionType, replicas: list[int], live: set[int]
) -> Callable[[LeaderAndIsr], Decision]:
    if election_type == ElectionType.UNCLEAN:
        return lambda cur: election.offline_leader(replicas, cur.isr, live, unclean_allowed=True)
    return lambda cur: election.preferred_leader(replicas, election.trusted_isr(cur), live)
