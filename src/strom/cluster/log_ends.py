"""Where replicas' logs end, from their answers to LeaderAndIsr: how the controller picks a leader when
every ISR member of a partition restarted.

Theory of operation. A restarted broker may have lost the writes its disk had not synced (a machine
crash); a process restart keeps them (the page cache survives). When every member of a leaderless
partition's ISR restarted, none is known to hold every acknowledged record, and Kafka's rule (the last
ISR member leads) can pick one that lost them while another member, dropped from the ISR for
restarting, still has them; that member then truncates them to follow (the simulation's seed 8239,
docs/faults.md). So the controller asks: a broker answers a LeaderAndIsr whose partition has no leader
(version 2) with the latest leader epoch in its log and its log end offset
(`strom.broker.replication.leader_and_isr_answer`). `on_answer` records them, per partition and broker,
with the registration that answered (`ControllerContext.log_ends`), and decides those partitions again:
`strom.cluster.election.longest_log_leader` elects the furthest log once every candidate is back and
has answered, as KIP-966's unclean recovery does with its last known eligible replicas. An answer of a
broker's previous process is ignored, so is one with an error; the answers of a partition are dropped
once it has a leader. A candidate that is back but has not answered (its log did not open, its request
was refused) is asked again by a periodic check (`ask_again`).
Call only from the controller's event loop (answers arrive through `on_answer`, which enqueues).
"""

from __future__ import annotations

from strom.cluster.context import TopicPartition
from strom.cluster.controller_part import ControllerPart
from strom.cluster.election import NO_LEADER, waiting_for_log_ends
from strom.protocol.messages import LeaderAndIsrResponsePartitionError

__all__ = ["LogEnds"]


class LogEnds(ControllerPart):
    def on_answer(
        self, broker: int, broker_epoch: int, answers: list[LeaderAndIsrResponsePartitionError]
    ) -> None:
        """A LeaderAndIsr answer, from the channel: handled as a controller event (`answered`)."""

        def event() -> None:
            self.answered(broker, broker_epoch, answers)

        if any(a.get("log_end_offset", -1) >= 0 for a in answers):
            self._enqueue(event)

    def ask_again(self) -> None:
        """A periodic check: send LeaderAndIsr again to candidates whose answer a leaderless partition
        still waits for (their log could not open at first, or the request was refused): the answer
        is what elects, and nothing else would ask."""
        if not self._active():
            return
        waiting: dict[int, set[TopicPartition]] = {}
        for tp, state in self.ctx.leadership.items():
            if state.leader != NO_LEADER or not state.restarted:
                continue
            live = self.ctx.live_replicas_for(tp, self.ctx.live_ids()) - self.ctx.shutting_down
            ends = self.ctx.log_ends_of(tp)
            for b in waiting_for_log_ends(state, self.ctx.replicas(tp), live, state.restarted, ends):
                waiting.setdefault(b, set()).add(tp)
        for broker, tps in sorted(waiting.items()):
            self.requests.leader_and_isr(tps, to={broker})

    def answered(
        self, broker: int, broker_epoch: int, answers: list[LeaderAndIsrResponsePartitionError]
    ) -> set[TopicPartition]:
        """Record the log ends answered and decide the leaderless partitions again; returns those
        written."""
        registration = self.ctx.live.get(broker)
        if not self._active() or registration is None or registration.epoch != broker_epoch:
            return set()  # a deposed controller, or an answer of the broker's previous process
        leaderless = []
        for a in answers:
            tp, end = (a["topic_name"], a["partition_index"]), a.get("log_end_offset", -1)
            state = self.ctx.leadership.get(tp)
            if end < 0 or a["error_code"] or state is None or state.leader != NO_LEADER:
                continue
            self.ctx.log_ends.setdefault(tp, {})[broker] = (broker_epoch, a.get("last_epoch", -1), end)
            leaderless.append(tp)
        changed = self.partitions.handle_offline_all(leaderless, "longest log") if leaderless else set()
        if changed:
            self.requests.leader_and_isr(changed)
            self.requests.update_metadata()
        return changed
