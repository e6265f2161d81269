"""Log dir failures (KIP-112, JBOD): the controller's side of a broker's offline log dir.

Theory of operation (Kafka's ``LogDirEventNotificationHandler`` and ``onBrokerLogDirFailure``). A
broker whose log dir fails writes a notification under ``/log_dir_event_notification`` naming itself
and the replicas that dir held (zk_paths.py; Kafka's controller learns the replicas by sending that
broker a LeaderAndIsr and reading its KAFKA_STORAGE_ERROR answers instead). The controller watches
the notifications, reads and deletes them, and from then on those replicas count as a dead broker's
(`ControllerContext.offline_dir_replicas`): partitions they led get a new leader from the rest of the
ISR, and they leave every ISR, in one decision with broker failures
(`PartitionStateMachine.handle_offline_all`); the brokers hear of it by LeaderAndIsr and
UpdateMetadata. They are eligible again once that broker registers again (its restart, which loads the
dir anew), or under a new controller, which starts from the partition states in the store (where they
are out of every ISR already). A notification from a broker that is not live is dropped: its replicas
are out already.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from strom.cluster import zk_paths as paths
from strom.cluster.context import ControllerContext, TopicPartition
from strom.cluster.kafka_metadata import KafkaMetadataClient
from strom.cluster.partition_machine import PartitionStateMachine
from strom.cluster.propagation import ControllerRequests

log = logging.getLogger(__name__)

__all__ = ["LogDirFailures"]


class LogDirFailures:
    def __init__(
        self,
        ctx: ControllerContext,
        zk: KafkaMetadataClient,
        partitions: PartitionStateMachine,
        requests: ControllerRequests,
        enqueue: Callable[[Callable[[], None]], None],
        active: Callable[[], bool],
    ) -> None:
        self.ctx = ctx
        self.zk = zk
        self.partitions = partitions
        self.requests = requests
        self._enqueue = enqueue
        self._active = active

    def on_event(self) -> None:
        """The watch's event (and the first read when the controller becomes active)."""
        if not self._active():
            return
        children = self.zk.watch_children(
            paths.LOG_DIR_EVENT_NOTIFICATION, lambda: self._enqueue(self.on_event)
        )
        if children:
            self.handle(self.zk.read_and_delete_log_dir_events(children))

    def handle(self, failed: dict[int, set[TopicPartition]]) -> set[TopicPartition]:
        """Take each broker's replicas in a failed log dir out; returns the partitions changed."""
        ctx = self.ctx
        hit: set[TopicPartition] = set()
        for broker, replicas in sorted(failed.items()):
            if broker not in ctx.live:
                continue
            known = {tp for tp in replicas if broker in ctx.replicas(tp)}
            log.warning("controller: broker %d lost a log dir with %d replica(s)", broker, len(known))
            ctx.offline_dir_replicas.setdefault(broker, set()).update(known)
            hit |= known
        changed = self.partitions.handle_offline_all(sorted(hit), "log dir failure")
        self.requests.update_metadata()
        if changed:
            self.requests.leader_and_isr(changed)
        return changed
