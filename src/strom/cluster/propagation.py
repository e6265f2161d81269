"""The controller's requests to brokers: LeaderAndIsr, UpdateMetadata and StopReplica, built and sent.

Theory of operation (Kafka's ``ControllerChannelManager`` and its request batch). After every change the
controller writes to ZooKeeper it tells the brokers, in this order:

1. **LeaderAndIsr** (api key 4) to each live replica of the changed partitions: one request per broker,
   carrying one entry per partition it replicates (leader, leader epoch, ISR, znode version, the replica
   list with the adding/removing sides of a reassignment). A *full* send also goes to live brokers that
   replicate none of the partitions (an empty request), which a freshly elected controller uses so that
   every broker learns the new controller epoch.
2. **UpdateMetadata** (api key 6) to every live broker: the whole cluster (every partition's state, the
   live brokers with their racks), so that every broker answers Metadata requests the same way.
3. **StopReplica** (api key 5) to a broker that must stop following partitions, with
   ``delete_partitions`` when its copy is to be deleted.

The bodies are pure functions of the `ControllerContext` (`leader_and_isr_requests`,
`update_metadata_body`, `stop_replica_body`); `ControllerRequests` hands them to the `ControllerChannel`,
which the broker implements over the Kafka protocol and which delivers requests in order per broker.
Requests carry the controller epoch, so brokers ignore a deposed controller.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any, Protocol

from strom.cluster.context import ControllerContext, TopicPartition
from strom.cluster.election import LeaderAndIsr
from strom.cluster.zk_paths import BrokerRegistration
from strom.protocol.api import ApiKey

__all__ = [
    "LEADER_AND_ISR",
    "STOP_REPLICA",
    "UPDATE_METADATA",
    "ControllerChannel",
    "ControllerRequests",
    "leader_and_isr_requests",
    "stop_replica_body",
    "update_metadata_body",
]

LEADER_AND_ISR, STOP_REPLICA, UPDATE_METADATA = (
    ApiKey.LEADER_AND_ISR,
    ApiKey.STOP_REPLICA,
    ApiKey.UPDATE_METADATA,
)


class ControllerChannel(Protocol):
    """How the controller reaches brokers (the broker layer implements it over the Kafka protocol)."""

    def set_brokers(self, brokers: dict[int, BrokerRegistration]) -> None: ...

    def send(self, broker_id: int, api_key: int, body: dict[str, Any]) -> None: ...


def _partition_state_entry(ctx: ControllerContext, tp: TopicPartition, state: LeaderAndIsr) -> dict[str, Any]:
    assignment = ctx.assignments[tp[0]]
    return {
        "topic_name": tp[0],
        "topic_id": assignment.topic_id,
        "partition_index": tp[1],
        "controller_epoch": state.controller_epoch,
        "leader": state.leader,
        "leader_epoch": state.leader_epoch,
        "isr": list(state.isr),
        "zk_version": state.zk_version,
        "replicas": ctx.replicas(tp),
        "adding_replicas": assignment.adding_replicas.get(tp[1], []),
        "removing_replicas": assignment.removing_replicas.get(tp[1], []),
        "is_new": False,
    }


def leader_and_isr_requests(
    ctx: ControllerContext, tps: Iterable[TopicPartition], full: bool = False, to: set[int] | None = None
) -> list[tuple[int, dict[str, Any]]]:
    """``(broker id, body)`` in broker order: each live replica of ``tps`` (only those in ``to``, if
    given); with ``full``, also every other live broker (in ``to``), with no partitions."""
    per_broker: dict[int, list[dict[str, Any]]] = {}
    for tp in sorted(tps):
        state = ctx.leadership.get(tp)
        if state is None or tp[0] not in ctx.assignments:
            continue
        entry = _partition_state_entry(ctx, tp, state)
        for replica in ctx.replicas(tp):
            if replica in ctx.live and (to is None or replica in to):
                per_broker.setdefault(replica, []).append(entry)
    targets = set(ctx.live) if full else set(per_broker)
    live_leaders = [
        {"broker_id": b.broker_id, "host_name": b.host, "port": b.port} for b in ctx.live.values()
    ]
    return [
        (
            broker_id,
            {
                "controller_id": ctx.broker_id,
                "controller_epoch": ctx.epoch,
                "partition_states": per_broker.get(broker_id, []),
                "live_leaders": live_leaders,
            },
        )
        for broker_id in sorted(targets)
        if to is None or broker_id in to
    ]


def update_metadata_body(ctx: ControllerContext) -> dict[str, Any]:
    """The whole cluster as every broker should see it."""
    topics = []
    for topic, assignment in sorted(ctx.assignments.items()):
        parts = []
        for p in sorted(assignment.partitions):
            state = ctx.leadership.get((topic, p)) or LeaderAndIsr(-1, -1, ())
            replicas = assignment.partitions[p]
            parts.append(
                {
                    "partition_index": p,
                    "controller_epoch": state.controller_epoch,
                    "leader": state.leader,
                    "leader_epoch": state.leader_epoch,
                    "isr": list(state.isr),
                    "zk_version": state.zk_version,
                    "replicas": replicas,
                    "offline_replicas": [b for b in replicas if b not in ctx.live],
                }
            )
        topics.append({"topic_name": topic, "topic_id": assignment.topic_id, "partition_states": parts})
    return {
        "controller_id": ctx.broker_id,
        "controller_epoch": ctx.epoch,
        "topics": topics,
        "live_brokers": [
            {
                "id": b.broker_id,
                "host": b.host,
                "port": b.port,
                "rack": b.rack,
                "endpoints": [
                    {"listener": name, "host": host, "port": port}
                    for name, host, port in b.listener_endpoints()
                ],
            }
            for _, b in sorted(ctx.live.items())
        ],
    }


def stop_replica_body(ctx: ControllerContext, tps: Iterable[TopicPartition], delete: bool) -> dict[str, Any]:
    return {
        "controller_id": ctx.broker_id,
        "controller_epoch": ctx.epoch,
        "delete_partitions": delete,
        "partitions": [{"topic_name": t, "partition_index": p} for t, p in tps],
    }


class ControllerRequests:
    """Sends the bodies above through the channel (in call order, per broker)."""

    def __init__(self, ctx: ControllerContext, channel: ControllerChannel) -> None:
        self.ctx = ctx
        self.channel = channel
        #: Seconds spent building and queueing requests (the controller's timing log reports it).
        self.build_s = 0.0

    def set_brokers(self) -> None:
        self.channel.set_brokers(self.ctx.live)

    def leader_and_isr(
        self, tps: Iterable[TopicPartition], full: bool = False, to: set[int] | None = None
    ) -> None:
        started = time.perf_counter()
        for broker_id, body in leader_and_isr_requests(self.ctx, tps, full, to):
            self.channel.send(broker_id, LEADER_AND_ISR, body)
        self.build_s += time.perf_counter() - started

    def update_metadata(self) -> None:
        started = time.perf_counter()
        body = update_metadata_body(self.ctx)
        for broker_id in sorted(self.ctx.live):
            self.channel.send(broker_id, UPDATE_METADATA, body)
        self.build_s += time.perf_counter() - started

    def stop_replica(self, broker_id: int, tps: list[TopicPartition], delete: bool) -> None:
        """StopReplica to a live broker (nothing is sent to a dead one, or for no partitions)."""
        if broker_id not in self.ctx.live or not tps:
            return
        self.channel.send(broker_id, STOP_REPLICA, stop_replica_body(self.ctx, tps, delete))
