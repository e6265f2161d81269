"""The partition state machine's ZooKeeper side: every leader/ISR change the controller writes.

Theory of operation (Kafka's ``ZkPartitionStateMachine``). A partition's state changes only here, and
only in two ways, each checked against the rule book of `strom.cluster.partition_state` *before* the
write (a refused move writes nothing and is logged):

* `PartitionStateMachine.bring_online` (NEW -> ONLINE): the first leader of a new partition is its first
  live replica, the ISR its live replicas; the state znode is created in a transaction that checks the
  controller epoch. If the znode already exists (a previous controller created it) its content is taken.
  No live replica: the partition stays NEW and is retried at the next broker change.
* `PartitionStateMachine.elect` (NEW/ONLINE/OFFLINE -> ONLINE or OFFLINE): a `Decision` from
  `strom.cluster.election` is applied to the cached state with a conditional write (znode version +
  controller epoch). On a version conflict (a leader changed the ISR meanwhile) the znode is re-read and
  the decision made again on the fresh state, up to five times. A decision equal to the current state
  writes nothing. The new state is ONLINE if the written leader is a broker, OFFLINE for leader -1.

Deletion (`remove`) moves OFFLINE -> NON_EXISTENT in memory; the znodes go with the topic. A write that
finds ``/controller_epoch`` moved raises `ControllerMovedError` (the event loop resigns).
Call only from the controller's event loop.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from strom.cluster import election
from strom.cluster.context import ControllerContext, TopicPartition
from strom.cluster.election import Decision, LeaderAndIsr
from strom.cluster.partition_state import PartitionState, state_after_election, state_at_failover
from strom.cluster.replica_state import ReplicaState
from strom.cluster.replica_state import state_at_failover as replica_state_at_failover
from strom.cluster.zk import KafkaZkClient

log = logging.getLogger("strom.cluster.controller")

__all__ = ["PartitionStateMachine"]

MAX_WRITE_ATTEMPTS = 5


class PartitionStateMachine:
    def __init__(self, ctx: ControllerContext, zk: KafkaZkClient, unclean_default: bool) -> None:
        self.ctx = ctx
        self.zk = zk
        self.unclean_default = unclean_default
        self.states = ctx.partition_states

    # fail-over and creation --------------------------------------------------------------------------
    def initialize(self, tp: TopicPartition) -> LeaderAndIsr | None:
        """Read the partition's znode and set its state (and its replicas') from it and the live set."""
        state = self.zk.get_partition_state(*tp)
        if state is not None:
            self.ctx.leadership[tp] = state
        self.states.initialize(tp, state_at_failover(state, self.ctx.live))
        for replica in self.ctx.replicas_of(tp):
            self.ctx.replica_states.initialize(
                replica, replica_state_at_failover(replica.replica, self.ctx.live)
            )
        return state

    def add(self, tp: TopicPartition) -> None:
        """A partition appeared in an assignment: NON_EXISTENT -> NEW, its replicas too."""
        self.states.transition_to(tp, PartitionState.NEW, "assigned")
        self.ctx.replica_states.transition_all(self.ctx.replicas_of(tp), ReplicaState.NEW, "assigned")

    def bring_online(self, tp: TopicPartition) -> bool:
        """NEW -> ONLINE: create the state znode with the first live replica as leader."""
        if not self.states.check(tp, PartitionState.ONLINE, "first leader"):
            return False
        live_replicas = [b for b in self.ctx.replicas(tp) if b in self.ctx.live]
        if not live_replicas:
            return False
        state = LeaderAndIsr(live_replicas[0], 0, tuple(live_replicas), self.ctx.epoch)
        stored = self.zk.create_partition_state(tp[0], tp[1], state, self.ctx.epoch_zk_version)
        if stored is None:
            stored = self.zk.get_partition_state(*tp)
        if stored is None:
            return False
        self.ctx.leadership[tp] = stored
        self.states.transition_to(tp, state_after_election(stored.leader), "first leader")
        self.sync_replicas(tp)
        return True

    def sync_replicas(self, tp: TopicPartition) -> None:
        """Once a partition has a leader its replicas are ONLINE on live brokers, OFFLINE elsewhere."""
        for replica in self.ctx.replicas_of(tp):
            target = ReplicaState.ONLINE if replica.replica in self.ctx.live else ReplicaState.OFFLINE
            if self.ctx.replica_states.get(replica) is not target:
                self.ctx.replica_states.transition_to(replica, target, "partition online")

    # elections ----------------------------------------------------------------------------------------
    def elect(self, tp: TopicPartition, decide: Callable[[LeaderAndIsr], Decision], why: str) -> bool:
        """Apply ``decide`` with conditional writes, deciding again after a conflict; True if written."""
        for _ in range(MAX_WRITE_ATTEMPTS):
            current = self.ctx.leadership.get(tp)
            if current is None:
                return False
            decision = decide(current)
            if decision is None:
                return False
            leader, isr = decision
            if leader == current.leader and tuple(isr) == current.isr:
                return False
            target = state_after_election(leader)
            if not self.states.check(tp, target, why):
                return False
            if self._write(tp, current.elected(leader, isr, self.ctx.epoch)):
                self.states.transition_to(tp, target, why)
                log.info(
                    "controller: %s-%d leader %d epoch %d isr %s (%s)",
                    tp[0],
                    tp[1],
                    leader,
                    current.leader_epoch + 1,
                    isr,
                    why,
                )
                return True
        return False

    def handle_offline(self, tp: TopicPartition) -> bool:
        """New leader if the current one is gone; dead brokers leave the ISR either way."""
        replicas = self.ctx.replicas(tp)
        live = self.ctx.live_ids()

        def decide(current: LeaderAndIsr) -> Decision:
            return election.offline_partition_decision(
                current, replicas, live, self.ctx.shutting_down, lambda: self.unclean_allowed(tp[0])
            )

        return self.elect(tp, decide, "broker failure")

    def unclean_allowed(self, topic: str) -> bool:
        value = self.zk.get_topic_config(topic).get("unclean.leader.election.enable")
        if value is None:
            return self.unclean_default
        return value.strip().lower() == "true"

    def refresh(self, tp: TopicPartition) -> None:
        """Re-read the state znode after a leader changed the ISR (the leader stays, so does the state)."""
        fresh = self.zk.get_partition_state(*tp)
        if fresh is not None:
            self.ctx.leadership[tp] = fresh

    # deletion -----------------------------------------------------------------------------------------
    def remove(self, tp: TopicPartition) -> None:
        """Deletion: the partition goes OFFLINE, then NON_EXISTENT."""
        self.states.transition_to(tp, PartitionState.OFFLINE, "topic deletion")
        if self.states.transition_to(tp, PartitionState.NON_EXISTENT, "topic deletion"):
            self.ctx.leadership.pop(tp, None)

    def _write(self, tp: TopicPartition, new: LeaderAndIsr) -> bool:
        stored = self.zk.update_partition_state(tp[0], tp[1], new, self.ctx.epoch_zk_version)
        if stored is None:
            self.refresh(tp)
            return False
        self.ctx.leadership[tp] = stored
        return True
