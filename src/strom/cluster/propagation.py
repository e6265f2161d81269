"""The controller's requests to brokers: LeaderAndIsr, UpdateMetadata and StopReplica, built and sent.

Theory of operation (Kafka's ``ControllerChannelManager`` and its request batch). After every change the
controller writes to ZooKeeper it tells the brokers, in this order:

1. **LeaderAndIsr** (api key 4) to each live replica of the changed partitions: one request per broker,
   carrying one entry per partition it replicates (leader, leader epoch, ISR, znode version, the replica
   list with the adding/removing sides of a reassignment). A *full* send also goes to live brokers that
   replicate none of the partitions (an empty request), which a freshly elected controller uses so that
   every broker learns the new controller epoch.
2. **UpdateMetadata** (api key 6) to every live broker, so that every broker answers Metadata requests
   the same way: the live brokers with their racks, and partition states. The first one a broker gets
   from this controller (after the controller's election, or after the broker registered again) is
   *full*: every partition. Later ones are *incremental*: only the partitions whose metadata changed
   since the previous UpdateMetadata, and the topics deleted since. The controller keeps the
   `metadata_image` it last sent and diffs the current one against it (`metadata_delta`), so no call
   site has to say what it changed; the channel delivers every request in order and retries it until
   the broker leaves the live set, so a broker that got the full one has seen every delta since.
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
from strom.protocol.messages import (
    LeaderAndIsrRequest,
    LeaderAndIsrRequestLiveLeader,
    LeaderAndIsrRequestPartitionState,
    StopReplicaRequest,
    UpdateMetadataRequest,
    UpdateMetadataRequestTopicState,
)

__all__ = [
    "LEADER_AND_ISR",
    "STOP_REPLICA",
    "UPDATE_METADATA",
    "ControllerBody",
    "ControllerChannel",
    "ControllerRequests",
    "leader_and_isr_requests",
    "metadata_delta",
    "metadata_image",
    "stop_replica_body",
    "update_metadata_body",
]

LEADER_AND_ISR, STOP_REPLICA, UPDATE_METADATA = (
    ApiKey.LEADER_AND_ISR,
    ApiKey.STOP_REPLICA,
    ApiKey.UPDATE_METADATA,
)


# What the controller sends brokers: the body of a LeaderAndIsr, StopReplica or UpdateMetadata request.
ControllerBody = LeaderAndIsrRequest | StopReplicaRequest | UpdateMetadataRequest


class ControllerChannel(Protocol):
    """How the controller reaches brokers (the broker layer implements it over the Kafka protocol)."""

    def set_brokers(self, brokers: dict[int, BrokerRegistration]) -> None: ...

    def send(self, broker_id: int, api_key: int, body: ControllerBody) -> None: ...


def _partition_state_entry(
    ctx: ControllerContext, tp: TopicPartition, state: LeaderAndIsr
) -> LeaderAndIsrRequestPartitionState:
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
) -> list[tuple[int, LeaderAndIsrRequest]]:
    """``(broker id, body)`` in broker order: each live replica of ``tps`` (only those in ``to``, if
    given); with ``full``, also every other live broker (in ``to``), with no partitions."""
    per_broker: dict[int, list[LeaderAndIsrRequestPartitionState]] = {}
    for tp in sorted(tps):
        state = ctx.leadership.get(tp)
        if state is None or tp[0] not in ctx.assignments:
            continue
        entry = _partition_state_entry(ctx, tp, state)
        for replica in ctx.replicas(tp):
            if replica in ctx.live and (to is None or replica in to):
                per_broker.setdefault(replica, []).append(entry)
    targets = set(ctx.live) if full else set(per_broker)
    live_leaders: list[LeaderAndIsrRequestLiveLeader] = [
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


#: What a broker's metadata cache holds of one partition: (topic id, leader, leader epoch, ISR, znode
#: version, controller epoch, replicas, offline replicas). Equal images need no UpdateMetadata entry.
PartitionImage = tuple[bytes, int, int, tuple[int, ...], int, int, tuple[int, ...], tuple[int, ...]]
MetadataImage = dict[TopicPartition, PartitionImage]
INCREMENTAL, FULL = 1, 2


def metadata_image(ctx: ControllerContext) -> MetadataImage:
    """Every partition as UpdateMetadata describes it, from the controller's view."""
    image: MetadataImage = {}
    live = ctx.live
    no_leader = LeaderAndIsr(-1, -1, ())
    for topic, assignment in ctx.assignments.items():
        for p, replicas in assignment.partitions.items():
            state = ctx.leadership.get((topic, p)) or no_leader
            image[(topic, p)] = (
                assignment.topic_id,
                state.leader,
                state.leader_epoch,
                state.isr,
                state.zk_version,
                state.controller_epoch,
                tuple(replicas),
                tuple(b for b in replicas if b not in live),
            )
    return image


def metadata_delta(before: MetadataImage, after: MetadataImage) -> tuple[list[TopicPartition], list[str]]:
    """(partitions new or changed, sorted; topics deleted, sorted) from ``before`` to ``after``. A topic
    deleted and created again keeps its name but not its id, so all its partitions count as changed."""
    changed = sorted(tp for tp, entry in after.items() if before.get(tp) != entry)
    remaining = {tp[0] for tp in after}
    return changed, sorted({tp[0] for tp in before} - remaining)


def update_metadata_body(
    ctx: ControllerContext, image: MetadataImage, delta: tuple[list[TopicPartition], list[str]] | None = None
) -> UpdateMetadataRequest:
    """The cluster as every broker should see it: all of ``image`` (full), or with ``delta`` only its
    changed partitions and deleted topics (incremental)."""
    tps = sorted(image) if delta is None else delta[0]
    topics: list[UpdateMetadataRequestTopicState] = []
    for tp in tps:
        topic_id, leader, leader_epoch, isr, zk_version, controller_epoch, replicas, offline = image[tp]
        if not topics or topics[-1]["topic_name"] != tp[0]:
            topics.append({"topic_name": tp[0], "topic_id": topic_id, "partition_states": []})
        topics[-1]["partition_states"].append(
            {
                "partition_index": tp[1],
                "controller_epoch": controller_epoch,
                "leader": leader,
                "leader_epoch": leader_epoch,
                "isr": list(isr),
                "zk_version": zk_version,
                "replicas": list(replicas),
                "offline_replicas": list(offline),
            }
        )
    return {
        "controller_id": ctx.broker_id,
        "controller_epoch": ctx.epoch,
        "type": FULL if delta is None else INCREMENTAL,
        "deleted_topics": [] if delta is None else delta[1],
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


def stop_replica_body(
    ctx: ControllerContext, tps: Iterable[TopicPartition], delete: bool
) -> StopReplicaRequest:
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
        # The image the brokers were last sent, and the registration (epoch) of each broker when it got
        # its full UpdateMetadata from this controller.
        self._sent: MetadataImage | None = None
        self._full_sent_to: dict[int, int] = {}

    def set_brokers(self) -> None:
        self.channel.set_brokers(self.ctx.live)

    def leader_and_isr(
        self, tps: Iterable[TopicPartition], full: bool = False, to: set[int] | None = None
    ) -> None:
        started = time.perf_counter()
        for broker_id, body in sorted(leader_and_isr_requests(self.ctx, tps, full, to), key=self._own_last):
            self.channel.send(broker_id, LEADER_AND_ISR, body)
        self.build_s += time.perf_counter() - started

    def _own_last(self, item: tuple[int, Any]) -> tuple[bool, int]:
        """Brokers in id order, the controller's own broker last: its requests are handled on the loop
        that also sends the others theirs, so the others' go out first."""
        return item[0] == self.ctx.broker_id, item[0]

    def reset(self) -> None:
        """Forget what was sent (a new controller term): every broker gets a full UpdateMetadata next."""
        self._sent = None
        self._full_sent_to.clear()

    def update_metadata(self) -> None:
        """UpdateMetadata to every live broker: full to those that have not had one from this controller
        since they registered, incremental (what changed since the last call) to the others."""
        started = time.perf_counter()
        image = metadata_image(self.ctx)
        full: UpdateMetadataRequest | None = None
        incremental: UpdateMetadataRequest | None = None
        for broker_id, registration in sorted(self.ctx.live.items(), key=self._own_last):
            if self._sent is not None and self._full_sent_to.get(broker_id) == registration.epoch:
                if incremental is None:
                    delta = metadata_delta(self._sent, image)
                    incremental = update_metadata_body(self.ctx, image, delta)
                self.channel.send(broker_id, UPDATE_METADATA, incremental)
            else:
                full = full or update_metadata_body(self.ctx, image)
                self.channel.send(broker_id, UPDATE_METADATA, full)
                self._full_sent_to[broker_id] = registration.epoch
        for gone in set(self._full_sent_to) - set(self.ctx.live):
            del self._full_sent_to[gone]
        self._sent = image
        self.build_s += time.perf_counter() - started

    def stop_replica(self, broker_id: int, tps: list[TopicPartition], delete: bool) -> None:
        """StopReplica to a live broker (nothing is sent to a dead one, or for no partitions)."""
        if broker_id not in self.ctx.live or not tps:
            return
        self.channel.send(broker_id, STOP_REPLICA, stop_replica_body(self.ctx, tps, delete))
