"""The controller's topic events: new topics, a topic's new partitions, a change of its configs.

Theory of operation (Kafka's ``TopicChange``, ``PartitionModifications`` and the controller's part of
a config change). The controller watches ``/brokers/topics`` (the topic list) and each topic's znode
(its assignment); a watch only enqueues the event, which runs on the controller's event loop.

* **New topics**: their assignments are read with pipelined requests, each partition goes NEW, then
  ONLINE with its first live replica as leader (`strom.cluster.partition_machine`), and the brokers get
  LeaderAndIsr for them and new metadata. A topic gone from the list is forgotten.
* **New partitions** of a topic (CreatePartitions writes its assignment): the same, for those only.
* **Config changes**: every broker follows ``/config/changes``; the controller's own broker passes
  each notification on (`on_config_change`). The two configs elections read
  (`strom.cluster.election_configs`) are read again, and partitions with eligible leader replicas are
  written again if the min ISR they are kept for changed.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from strom.cluster import zk_paths as paths
from strom.cluster.context import TopicPartition
from strom.cluster.controller_part import ControllerPart
from strom.cluster.topic_ids import assign_topic_ids
from strom.cluster.zk_paths import TopicAssignment

log = logging.getLogger("strom.cluster.controller")

__all__ = ["TopicChanges"]


class TopicChanges(ControllerPart):
    def load_topic(self, topic: str) -> TopicAssignment | None:
        """Read (and watch) one topic's assignment into the context."""
        found = self.zk.get_topic_assignment(topic)
        self.zk.watch_data(paths.topic_path(topic), self._modified_event(topic))
        if found is None:
            return None
        self.ctx.assignments[topic], self.ctx.assignment_versions[topic] = found
        assign_topic_ids(self.ctx, self.zk, [topic])
        return found[0]

    def load_topics(self, topics: list[str]) -> None:
        """`load_topic` for many topics, read with pipelined requests (fail-over, new topics)."""
        for topic, found in self.zk.get_topic_assignments(topics, self._modified_event).items():
            if found is not None:
                self.ctx.assignments[topic], self.ctx.assignment_versions[topic] = found
        assign_topic_ids(self.ctx, self.zk, topics)

    def watch_topics(self) -> list[str]:
        return self.zk.watch_children(paths.BROKER_TOPICS, lambda: self._enqueue(self.on_topic_change))

    def _modified_event(self, topic: str) -> Callable[[], None]:
        return lambda: self._enqueue(lambda: self.on_topic_modified(topic))

    def on_topic_change(self) -> None:
        """The topic list changed."""
        if not self._active():
            return
        topics = self.watch_topics()
        added = [t for t in topics if t not in self.ctx.assignments]
        for topic in set(self.ctx.assignments) - set(topics):
            self.ctx.forget_topic(topic)
            self.partitions.configs.forget(topic)
        for topic in added:  # made again after a deletion: its configs are new
            self.partitions.configs.forget(topic)
        self.load_topics(added)
        changed = self._add_partitions(
            [tp for topic in added if topic in self.ctx.assignments for tp in self.ctx.partitions_of(topic)]
        )
        if added:
            log.info("controller: new topics %s", added)
            self.requests.update_metadata()
            self.requests.leader_and_isr(changed)
            self.requests.update_metadata()

    def on_topic_modified(self, topic: str) -> None:
        """A topic's assignment changed: partitions added (or a reassignment's steps)."""
        if not self._active() or topic not in self.ctx.assignments:
            return
        before = set(self.ctx.partitions_of(topic))
        assignment = self.load_topic(topic)
        if assignment is None:
            return
        changed = self._add_partitions([tp for tp in self.ctx.partitions_of(topic) if tp not in before])
        if changed:
            log.info("controller: %s now has %d partitions", topic, len(assignment.partitions))
            self.requests.leader_and_isr(changed)
            self.requests.update_metadata()

    def on_config_change(self, topic: str | None) -> None:
        """``topic``'s configs changed, or (None) the cluster-wide broker defaults."""
        if not self._active():
            return
        changed = self.partitions.min_isr_changed(topic)
        if changed:
            log.info("controller: eligible leader replicas of %d partition(s) rewritten", len(changed))
            self.requests.leader_and_isr(changed)
            self.requests.update_metadata()

    def _add_partitions(self, tps: list[TopicPartition]) -> set[TopicPartition]:
        """New partitions: NEW, then ONLINE where a replica is alive; returns those now online."""
        for tp in tps:
            self.partitions.add(tp)
        return self.partitions.bring_online_all(tps)
