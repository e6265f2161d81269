"""Log dir failures (KIP-112, JBOD): the controller's side of a broker's offline log dir.

Theory of operation (Kafka's ``LogDirEventNotificationHandler`` and ``onBrokerLogDirFailure``). A
broker whose log dir fails writes a notification under ``/log_dir_event_notification`` naming itself
and the replicas that dir held (zk_paths.py; Kafka's controller learns the replicas by sending that
broker a LeaderAndIsr and reading its KAFKA_STORAGE_ERROR answers instead). The controller watches
the notifications, reads and deletes them, and from then on those replicas count as a dead broker's
(`ControllerContext.offline_dir_replicas`): partitions they led get a new leader from the rest of the
ISR, and they leave every ISR, in one decision with broker failures
(`PartitionStateMachine.handle_offline_all`); the brokers hear of it by LeaderAndIsr and
UpdateMetadata. A notification from a broker that is not live is dropped: its replicas are out already.

A new registration of the broker (a ZooKeeper session expiry, a restart) or a new controller starts
from nothing known offline; as in Kafka, the broker's answers tell it again: a broker answers a
LeaderAndIsr with KAFKA_STORAGE_ERROR for each replica in a failed dir (one it took offline and still
has offline, or one in a dir that failed at its start), and `on_leader_and_isr_response` takes those
replicas out the same way (`storage_errors` picks them, a pure decision). An answer of a previous
registration of the broker is ignored: the process that answered is gone. A restart with the dir
repaired answers no such error, and the replicas are eligible again.
"""

from __future__ import annotations

import logging

from strom.cluster import zk_paths as paths
from strom.cluster.context import TopicPartition
from strom.cluster.controller_part import ControllerPart
from strom.protocol.errors import ErrorCode
from strom.protocol.messages import LeaderAndIsrResponsePartitionError

log = logging.getLogger(__name__)

__all__ = ["LogDirFailures", "storage_errors"]

STORAGE_ERROR = int(ErrorCode.KAFKA_STORAGE_ERROR)


def storage_errors(partition_errors: list[LeaderAndIsrResponsePartitionError]) -> set[TopicPartition]:
    """The partitions a LeaderAndIsr response says are in a failed log dir of the broker."""
    return {
        (e["topic_name"], e["partition_index"]) for e in partition_errors if e["error_code"] == STORAGE_ERROR
    }


class LogDirFailures(ControllerPart):
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

    def on_leader_and_isr_response(
        self, broker: int, broker_epoch: int, partition_errors: list[LeaderAndIsrResponsePartitionError]
    ) -> None:
        """A LeaderAndIsr answer of ``broker`` (its registration ``broker_epoch``), from the channel:
        handled as a controller event (`storage_errors_answered`)."""

        def event() -> None:
            self.storage_errors_answered(broker, broker_epoch, partition_errors)

        self._enqueue(event)

    def storage_errors_answered(
        self, broker: int, broker_epoch: int, partition_errors: list[LeaderAndIsrResponsePartitionError]
    ) -> set[TopicPartition]:
        """The replicas a LeaderAndIsr answer reports in a failed log dir, not yet known offline, are taken
        out (`handle`); returns the partitions changed."""
        registration = self.ctx.live.get(broker)
        if not self._active() or registration is None or registration.epoch != broker_epoch:
            return set()  # a deposed controller, or an answer of the broker's previous process
        offline = storage_errors(partition_errors) - self.ctx.offline_dir_replicas.get(broker, set())
        if not offline:
            return set()
        return self.handle({broker: offline})
