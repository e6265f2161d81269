"""Topic deletion: the controller carries out what DeleteTopics marked in ``/admin/delete_topics``.

Theory of operation (Kafka's ``TopicDeletionManager``, without its retry queue). DeleteTopics, handled
by any broker, only creates ``/admin/delete_topics/<topic>``; the controller watches that path and, for
each topic listed:

1. every replica of every partition (`replicas_to_delete`: the replica lists, plus replicas being added
   by a reassignment) goes OFFLINE, then REPLICA_DELETION_STARTED on a live broker or
   REPLICA_DELETION_INELIGIBLE on a dead one (`strom.cluster.replica_state.start_deletion`);
2. each live broker gets one StopReplica with ``delete_partitions`` for its started replicas, which
   stops them and deletes their logs;
3. the deletions count as successful once handed to the channel, and the replicas become NON_EXISTENT;
   ineligible ones are forgotten with a warning (Kafka would keep the topic queued until their broker
   returns; Strom deletes the topic's znodes anyway, so the returning broker keeps a stray log);
4. every partition goes OFFLINE, then NON_EXISTENT, the cached topic is forgotten, and the topic's
   znodes (assignment with partition states, config, deletion marker) are deleted;
5. every broker gets UpdateMetadata without the topic (sent once for all topics deleted together).

Call only from the controller's event loop.
"""

from __future__ import annotations

import logging

from strom.cluster.controller_part import ControllerPart
from strom.cluster.replica_state import PartitionReplica, complete_deletion, start_deletion
from strom.cluster.zk_paths import TopicAssignment

log = logging.getLogger("strom.cluster.controller")

__all__ = ["TopicDeletion", "replicas_to_delete"]


def replicas_to_delete(topic: str, assignment: TopicAssignment) -> list[PartitionReplica]:
    """Every replica of the topic, partition by partition, each once."""
    found: dict[PartitionReplica, None] = {}
    for p, replicas in sorted(assignment.partitions.items()):
        for b in [*replicas, *assignment.adding_replicas.get(p, [])]:
            found[PartitionReplica(topic, p, b)] = None
    return list(found)


class TopicDeletion(ControllerPart):
    def delete(self, topic: str) -> None:
        """Steps 1-4 for one topic (the caller sends UpdateMetadata once for all)."""
        assignment = self.ctx.assignments.get(topic)
        if assignment is not None:
            replicas = replicas_to_delete(topic, assignment)
            for broker_id, tps in start_deletion(self.ctx.replica_states, replicas, self.ctx.live).items():
                self.requests.stop_replica(broker_id, tps, delete=True)
            complete_deletion(self.ctx.replica_states, replicas)
            for tp in self.ctx.partitions_of(topic):
                self.partitions.remove(tp)
        self.ctx.forget_topic(topic)
        self.partitions.configs.forget(topic)
        self.zk.delete_topic_znodes(topic)
        log.info("controller: deleted topic %s", topic)
