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
from collections.abc import Callable, Collection

from strom.cluster import election
from strom.cluster.context import ControllerContext, TopicPartition
from strom.cluster.election import Decision, LeaderAndIsr
from strom.cluster.election_configs import ElectionConfigs
from strom.cluster.kafka_metadata import KafkaMetadataClient
from strom.cluster.partition_state import PartitionState, state_after_election, state_at_failover
from strom.cluster.replica_state import ReplicaState
from strom.cluster.replica_state import state_at_failover as replica_state_at_failover
from strom.storage.config import effective_min_isr

log = logging.getLogger("strom.cluster.controller")

__all__ = ["PartitionStateMachine"]

MAX_WRITE_ATTEMPTS = 5
PER_PARTITION_LOG_LIMIT = 20


class PartitionStateMachine:
    def __init__(
        self,
        ctx: ControllerContext,
        zk: KafkaMetadataClient,
        unclean_default: bool,
        min_isr_default: int = 1,
    ) -> None:
        self.ctx = ctx
        self.zk = zk
        self.configs = ElectionConfigs(zk, min_isr_default, unclean_default)
        self.states = ctx.partition_states

    # fail-over and creation --------------------------------------------------------------------------
    def initialize(self, tp: TopicPartition) -> LeaderAndIsr | None:
        """Read the partition's znode and set its state (and its replicas') from it and the live set."""
        return self.initialize_all([tp])[tp]

    def initialize_all(self, tps: list[TopicPartition]) -> dict[TopicPartition, LeaderAndIsr | None]:
        """`initialize` for many partitions, their znodes read with pipelined requests."""
        found = self.zk.get_partition_states(tps)
        live = self.ctx.live
        for tp, state in found.items():
            if state is not None:
                self.ctx.leadership[tp] = state
            self.states.initialize(tp, state_at_failover(state, live))
            for replica in self.ctx.replicas_of(tp):
                self.ctx.replica_states.initialize(replica, replica_state_at_failover(replica.replica, live))
        return found

    def add(self, tp: TopicPartition) -> None:
        """A partition appeared in an assignment: NON_EXISTENT -> NEW, its replicas too."""
        self.states.transition_to(tp, PartitionState.NEW, "assigned")
        self.ctx.replica_states.transition_all(self.ctx.replicas_of(tp), ReplicaState.NEW, "assigned")

    def bring_online(self, tp: TopicPartition) -> bool:
        """NEW -> ONLINE: create the state znode with the first live replica as leader."""
        return tp in self.bring_online_all([tp])

    def bring_online_all(self, tps: list[TopicPartition]) -> set[TopicPartition]:
        """`bring_online` for many partitions, the znodes created in fenced multi-ops; those now online."""
        creates = []
        for tp in tps:
            if not self.states.check(tp, PartitionState.ONLINE, "first leader"):
                continue
            live_replicas = [b for b in self.ctx.replicas(tp) if b in self.ctx.live]
            if live_replicas:
                creates.append((tp, LeaderAndIsr(live_replicas[0], 0, tuple(live_replicas), self.ctx.epoch)))
        if not creates:
            return set()
        stored = self.zk.create_partition_states(creates, self.ctx.epoch_zk_version)
        existing = [tp for tp, state in stored.items() if state is None]
        if existing:  # a previous controller created them: take their content
            stored.update(self.zk.get_partition_states(existing))
        online = set()
        for tp, _ in creates:
            state = stored.get(tp)
            if state is None:
                continue
            self.ctx.leadership[tp] = state
            self.states.transition_to(tp, state_after_election(state.leader), "first leader")
            self.sync_replicas(tp)
            online.add(tp)
        return online

    def sync_replicas(self, tp: TopicPartition) -> None:
        """Once a partition has a leader its replicas are ONLINE on live brokers, OFFLINE elsewhere."""
        for replica in self.ctx.replicas_of(tp):
            target = ReplicaState.ONLINE if replica.replica in self.ctx.live else ReplicaState.OFFLINE
            if self.ctx.replica_states.get(replica) is not target:
                self.ctx.replica_states.transition_to(replica, target, "partition online")

    # elections ----------------------------------------------------------------------------------------
    def elect(self, tp: TopicPartition, decide: Callable[[LeaderAndIsr], Decision], why: str) -> bool:
        """Apply ``decide`` with conditional writes, deciding again after a conflict; True if written."""
        return tp in self.elect_all([tp], lambda _tp, current: decide(current), why)

    def elect_all(
        self,
        tps: list[TopicPartition],
        decide: Callable[[TopicPartition, LeaderAndIsr], Decision],
        why: str,
        restarted: Collection[int] = (),
    ) -> set[TopicPartition]:
        """`elect` for many partitions: all decisions, then their writes in fenced multi-ops; the
        conflicted ones are re-read and decided again (up to five rounds). Returns those written.
        Each write carries the partition's eligible leader replicas (`election.next_elr`), of which
        ``restarted`` brokers (a new process) are not."""
        written: set[TopicPartition] = set()
        pending = list(tps)

        def elr(tp: TopicPartition, current: LeaderAndIsr, isr: list[int]) -> tuple[tuple[int, int], ...]:
            replicas = self.ctx.replicas(tp)
            if len(isr) >= len(replicas) and not current.elr:
                return ()  # every replica in sync: nobody to keep, no config to read
            ineligible = {
                *restarted,
                *current.restarted,  # may lack what the longest log had
                *(b for b in replicas if tp in self.ctx.offline_dir_replicas.get(b, ())),
                *(b for b, _ in current.elr if b not in replicas),  # a reassignment removed it
            }
            bound = effective_min_isr(self.configs.min_isr(tp[0]), len(replicas))
            return election.next_elr(current, isr, bound, self.ctx.epoch_of, ineligible)

        for _ in range(MAX_WRITE_ATTEMPTS):
            writes = []
            for tp in pending:
                current = self.ctx.leadership.get(tp)
                decision = None if current is None else decide(tp, current)
                if current is None or decision is None:
                    continue
                leader, isr = decision
                eligible = elr(tp, current, isr)
                gone = election.next_restarted(current, leader, restarted, self.ctx.replicas(tp))
                if (leader, tuple(isr), eligible, gone) == (
                    current.leader,
                    current.isr,
                    current.elr,
                    current.restarted,
                ):
                    continue
                target = state_after_election(leader)
                if self.states.check(tp, target, why):
                    writes.append((tp, current.elected(leader, isr, self.ctx.epoch, eligible, gone), target))
            if not writes:
                break
            stored = self.zk.update_partition_states(
                [(tp, new) for tp, new, _ in writes], self.ctx.epoch_zk_version
            )
            pending = []
            for tp, new, target in writes:
                state = stored.get(tp)
                if state is None:
                    pending.append(tp)
                    continue
                self.ctx.leadership[tp] = state
                if state.leader != election.NO_LEADER:
                    self.ctx.log_ends.pop(tp, None)  # answers of a leaderless time: stale from now on
                self.states.transition_to(tp, target, why)
                written.add(tp)
                # Each one at INFO for a few (an operator's election), a count for thousands.
                log.log(
                    logging.INFO if len(writes) <= PER_PARTITION_LOG_LIMIT else logging.DEBUG,
                    "controller: %s-%d leader %d epoch %d isr %s (%s)%s",
                    *tp,
                    new.leader,
                    new.leader_epoch,
                    new.isr,
                    why,
                    f" eligible {[b for b, _ in new.elr]}" if new.elr else "",
                )
            if not pending:
                break
            self.refresh_all(pending)  # a leader changed the ISR meanwhile: decide again on what is stored
        if len(written) > PER_PARTITION_LOG_LIMIT:
            log.info("controller: %d partition state(s) written (%s)", len(written), why)
        return written

    def handle_offline(self, tp: TopicPartition) -> bool:
        """New leader if the current one is gone; dead brokers leave the ISR either way."""
        return tp in self.handle_offline_all([tp])

    def handle_offline_all(
        self, tps: list[TopicPartition], why: str = "broker failure", bounced: Collection[int] = ()
    ) -> set[TopicPartition]:
        """`handle_offline` for many partitions (the unclean setting from `ElectionConfigs`); a
        replica in a failed log dir counts as a dead broker's. ``bounced``: dead brokers that
        registered again, which a partition left without a leader does not keep in its ISR."""
        live = self.ctx.live_ids()
        fresh: dict[str, int] = {}

        def still_below(tp: TopicPartition, current: LeaderAndIsr) -> bool:
            """The ISR is below min ISR as read from the store now, not the cache: a change the
            controller has not heard of yet may have let it acknowledge without the eligible ones."""
            if tp[0] not in fresh:
                fresh[tp[0]] = self.configs.fresh_min_isr(tp[0])
            return len(current.isr) < effective_min_isr(fresh[tp[0]], len(self.ctx.replicas(tp)))

        def decide(tp: TopicPartition, current: LeaderAndIsr) -> Decision:
            eligible = self.ctx.live_replicas_for(tp, live) if self.ctx.offline_dir_replicas else live
            return election.offline_partition_decision(
                current,
                self.ctx.replicas(tp),
                eligible,
                self.ctx.shutting_down,
                lambda: self.configs.unclean_allowed(tp[0]),
                bounced,
                self.ctx.electable(tp, current.elr) if current.elr and still_below(tp, current) else (),
                self.ctx.log_ends_of(tp) if current.leader == election.NO_LEADER else None,
            )

        return self.elect_all(tps, decide, why, bounced)

    def min_isr_changed(self, topic: str | None) -> set[TopicPartition]:
        """A config change notification named ``topic`` (None: the cluster default): read its
        min.insync.replicas again and write the eligible replicas it now gives (a lowered value may
        put an ISR at min ISR, acknowledging without them); returns the partitions written."""
        self.configs.forget(topic)
        tps = self.ctx.all_partitions() if topic is None else self.ctx.partitions_of(topic)
        # Without a leader nothing is acknowledged: its eligible replicas still hold every record.
        return self._rewrite_elr(tps, lambda _tp, s: s.leader != election.NO_LEADER, "min ISR changed")

    def prune_elr(self, tps: list[TopicPartition], why: str) -> set[TopicPartition]:
        """Rewrite the eligible replicas of ``tps`` without brokers no longer among their replicas (a
        reassignment removed them, and their logs with them)."""
        return self._rewrite_elr(
            tps, lambda tp, s: any(b not in self.ctx.replicas(tp) for b, _ in s.elr), why
        )

    def _rewrite_elr(
        self, tps: list[TopicPartition], needed: Callable[[TopicPartition, LeaderAndIsr], bool], why: str
    ) -> set[TopicPartition]:
        kept = [
            tp for tp in tps if (s := self.ctx.leadership.get(tp)) is not None and s.elr and needed(tp, s)
        ]
        return self.elect_all(kept, lambda _tp, cur: (cur.leader, list(cur.isr)), why) if kept else set()

    def refresh(self, tp: TopicPartition) -> None:
        """Re-read the state znode after a leader changed the ISR (the leader stays, so does the state)."""
        self.refresh_all([tp])

    def refresh_all(self, tps: list[TopicPartition]) -> None:
        for tp, fresh in self.zk.get_partition_states(tps).items():
            if fresh is not None:
                self.ctx.leadership[tp] = fresh

    # deletion -----------------------------------------------------------------------------------------
    def remove(self, tp: TopicPartition) -> None:
        """Deletion: the partition goes OFFLINE, then NON_EXISTENT."""
        self.states.transition_to(tp, PartitionState.OFFLINE, "topic deletion")
        if self.states.transition_to(tp, PartitionState.NON_EXISTENT, "topic deletion"):
            self.ctx.leadership.pop(tp, None)
