"""What the console shows, read from this broker's in-memory state (no I/O, no awaits).

The cluster-wide facts (brokers, controller, partition leaders, replicas, ISR) come from the metadata
cache, which every broker keeps from the controller's UpdateMetadata, so every broker's console draws
the same cluster. Log facts (offsets, sizes, segments) and rates exist only where this broker hosts a
replica, and consumer groups only on their coordinator; pages say "not on this broker" otherwise.

Racks of brokers that have left the cluster are remembered (`ConsoleState`), so a failed broker keeps
its ``R2-B3`` label in the broker table instead of turning into ``B3``.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from strom.broker.broker import Broker
from strom.cluster.broker_table import BrokerTable, PartitionState, broker_table


@dataclass
class ConsoleState:
    racks: dict[int, str | None] = field(default_factory=dict)
    # topic -> (monotonic time, messages in) at the previous look, for a rate.
    last_counts: dict[str, tuple[float, int]] = field(default_factory=dict)


@dataclass(frozen=True)
class BrokerView:
    broker: int
    rack: str | None
    host: str
    port: int
    alive: bool
    controller: bool


@dataclass(frozen=True)
class ClusterView:
    cluster_id: str
    this_broker: int
    controller: int
    zookeeper: str | None
    brokers: list[BrokerView]
    topics: int
    partitions: int
    under_replicated: list[tuple[str, int]]
    offline: list[tuple[str, int]]


@dataclass(frozen=True)
class TopicRow:
    name: str
    partitions: int
    replication_factor: int
    local_bytes: int
    messages_in: int
    rate: float | None  # messages/s led here since the previous look
    under_replicated: int
    internal: bool


@dataclass(frozen=True)
class PartitionRow:
    partition: int
    leader: int
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    offline: tuple[int, ...]
    local: LocalLog | None


@dataclass(frozen=True)
class LocalLog:
    log_start: int
    log_end: int
    high_watermark: int
    last_stable: int
    size: int
    segments: list[tuple[int, int, int]]  # (base offset, next offset, bytes)
    leader_epoch: int
    role: str
    remote: RemoteLog | None = None  # tiered storage: the remote log this broker manages


@dataclass(frozen=True)
class RemoteLog:
    log_start: int  # the remote log's first offset
    last_offset: int  # Kafka's highest offset in remote storage
    size: int
    segments: int


@dataclass(frozen=True)
class MemberView:
    member_id: str
    client_id: str
    host: str
    assignment: dict[str, list[int]]


@dataclass(frozen=True)
class GroupOffset:
    topic: str
    partition: int
    committed: int
    log_end: int | None
    lag: int | None
    owner: str | None
    metadata: str = ""  # the commit's metadata (a Spark query's progress, `spark_queries`)


@dataclass(frozen=True)
class GroupView:
    group_id: str
    group_type: str
    state: str
    protocol_type: str | None
    protocol: str | None
    generation: int
    members: list[MemberView]
    offsets: list[GroupOffset]


def _remember_racks(broker: Broker, state: ConsoleState) -> None:
    for b in broker.metadata.brokers.values():
        state.racks[b.node_id] = b.rack


def cluster_view(
    broker: Broker, state: ConsoleState, visible: Callable[[str], bool] = lambda topic: True
) -> ClusterView:
    """``visible``: the topics the person may describe; the others are neither counted nor named."""
    md = broker.metadata
    _remember_racks(broker, state)
    live = md.brokers
    dead = sorted({r for p in md.partitions.values() for r in p.replicas} - set(live))
    brokers = [
        BrokerView(b.node_id, b.rack, b.host, b.port, True, b.node_id == md.controller_id)
        for b in sorted(live.values(), key=lambda b: b.node_id)
    ] + [BrokerView(b, state.racks.get(b), "-", 0, False, False) for b in dead]
    shown = {t for t in md.topics if visible(t)}  # one check per topic, not per partition
    parts = sorted((tp, p) for tp, p in md.partitions.items() if tp[0] in shown)
    return ClusterView(
        md.cluster_id,
        broker.node_id,
        md.controller_id,
        broker.control.zookeeper_state,
        brokers,
        len(shown),
        len(parts),
        [tp for tp, p in parts if p.leader >= 0 and len(p.isr) < len(p.replicas)],
        [tp for tp, p in parts if p.leader < 0],
    )


def topic_rows(broker: Broker, state: ConsoleState) -> list[TopicRow]:
    md = broker.metadata
    hosted = broker.replica_manager.partitions
    counters = broker.metrics.topics if broker.metrics is not None else {}
    now = time.monotonic()
    # One pass over the partitions (not one per topic: 1,000 topics would make it a million steps).
    under: dict[str, int] = {}
    for (t, _), p in md.partitions.items():
        if len(p.isr) < len(p.replicas):
            under[t] = under.get(t, 0) + 1
    local_bytes: dict[str, int] = {}
    for (t, _), part in hosted.items():
        local_bytes[t] = local_bytes.get(t, 0) + part.log.size_bytes
    rows = []
    for name, info in sorted(md.topics.items(), key=lambda kv: (kv[0].startswith("_"), kv[0])):
        count = counters[name].messages_in if name in counters else 0
        before = state.last_counts.get(name)
        rate = (count - before[1]) / (now - before[0]) if before and now > before[0] else None
        state.last_counts[name] = (now, count)
        rows.append(
            TopicRow(
                name,
                info.partitions,
                info.replication_factor,
                local_bytes.get(name, 0),
                count,
                rate,
                under.get(name, 0),
                name.startswith("_"),
            )
        )
    for gone in [t for t in state.last_counts if t not in md.topics]:  # deleted topics
        del state.last_counts[gone]
    return rows


def topic_table(broker: Broker, state: ConsoleState, topic: str) -> BrokerTable:
    _remember_racks(broker, state)
    md = broker.metadata
    states = [
        PartitionState(i, p.leader, p.replicas, p.isr) for (t, i), p in md.partitions.items() if t == topic
    ]
    return broker_table(states, state.racks, set(md.brokers))


def partition_rows(broker: Broker, topic: str) -> list[PartitionRow]:
    md = broker.metadata
    rows = []
    for (t, i), p in sorted(md.partitions.items()):
        if t == topic:
            rows.append(
                PartitionRow(
                    i,
                    p.leader,
                    p.leader_epoch,
                    p.replicas,
                    p.isr,
                    p.offline_replicas,
                    local_log(broker, t, i),
                )
            )
    return rows


def local_log(broker: Broker, topic: str, index: int) -> LocalLog | None:
    part = broker.replica_manager.partitions.get((topic, index))
    if part is None:
        return None
    log = part.log
    return LocalLog(
        log.log_start_offset,
        log.log_end_offset,
        log.high_watermark,
        log.last_stable_offset,
        log.size_bytes,
        [(s.base_offset, s.next_offset, s.size) for s in log.segments],
        part.leader_epoch,
        "leader" if part.leader_id == broker.node_id else "follower",
        remote_log(broker, topic, index),
    )


def remote_log(broker: Broker, topic: str, index: int) -> RemoteLog | None:
    """The partition's remote log (tiered storage), if this broker manages one with something in it."""
    manager = broker.remote_log_manager
    state = manager.state_of(topic, index) if manager is not None else None
    if state is None or state.log_start_offset is None:
        return None
    copied = state.copied_segments()
    return RemoteLog(state.log_start_offset, state.highest_copied_offset, state.size_bytes, len(copied))


Watermarks = Callable[[list[tuple[str, int]]], dict[tuple[str, int], int]]


@dataclass(frozen=True)
class GroupRow:
    group_id: str
    group_type: str
    state: str
    members: int
    lag: int | None  # summed over the partitions whose high watermark is known


def group_rows(broker: Broker, remote: Watermarks) -> list[GroupRow]:
    """The groups this broker coordinates, classic and consumer (KIP-848) ones, with their total lag.

    A consumer group's committed offsets are kept in a classic entry of the same id, which is not a
    group of its own (as Kafka's group coordinator counts them)."""
    classic = broker.groups.coordinator.groups
    consumer = {g.group_id: g for g in broker.groups.consumer_groups()}
    hosted = broker.replica_manager.partitions
    known = remote([tp for g in classic.values() for tp in g.offsets if tp not in hosted])
    rows = []
    for group_id in sorted(set(classic) | set(consumer)):
        offsets = classic[group_id].offsets if group_id in classic else {}
        lags = [_lag(broker, known, tp, c.offset) for tp, c in offsets.items()]
        total = sum(lag for lag in lags if lag is not None) if any(lag is not None for lag in lags) else None
        if group_id in consumer:
            group = consumer[group_id]
            rows.append(GroupRow(group_id, "consumer", group.state.value, len(group.members), total))
        else:
            g = classic[group_id]
            rows.append(GroupRow(group_id, "classic", g.state.kafka_name, len(g.members), total))
    return rows


def _lag(
    broker: Broker, known: dict[tuple[str, int], int], tp: tuple[str, int], committed: int
) -> int | None:
    part = broker.replica_manager.partitions.get(tp)
    end = part.log.high_watermark if part is not None else known.get(tp)
    return None if end is None else max(end - committed, 0)


def group_view(broker: Broker, group_id: str, remote: Watermarks) -> GroupView | None:
    """A group this broker coordinates as its coordinator reports it: a consumer group (KIP-848) with
    its group epoch as the generation and the members' current assignments, else a classic one."""
    classic = broker.groups.coordinator.groups.get(group_id)
    consumer = broker.groups.consumer_group(group_id)
    head: tuple[str, str, str | None, str | None, int]  # type, state, protocol type, assignor, generation
    if consumer is not None:
        members = [
            MemberView(
                m.member_id, m.client_id, m.client_host, {t: sorted(ps) for t, ps in m.assigned.items()}
            )
            for m in consumer.members.values()
        ]
        assignors = sorted({m.server_assignor for m in consumer.members.values() if m.server_assignor})
        head = (
            "consumer",
            consumer.state.value,
            "consumer",
            ", ".join(assignors) or None,
            consumer.group_epoch,
        )
    elif classic is not None:
        members = [
            MemberView(m.member_id, m.client_id, m.client_host, consumer_assignment(m.assignment))
            for m in classic.members.values()
        ]
        head = ("classic", classic.state.kafka_name, classic.protocol_type, classic.protocol_name,
                classic.generation_id)  # fmt: skip
    else:
        return None
    owners = {(t, p): m.member_id for m in members for t, ps in m.assignment.items() for p in ps}
    committed = classic.offsets if classic is not None else {}
    hosted = broker.replica_manager.partitions
    known = remote([tp for tp in committed if tp not in hosted])
    offsets = []
    for (t, p), offset in sorted(committed.items()):
        part = hosted.get((t, p))
        end = part.log.high_watermark if part is not None else known.get((t, p))
        lag = max(end - offset.offset, 0) if end is not None else None
        offsets.append(GroupOffset(t, p, offset.offset, end, lag, owners.get((t, p)), offset.metadata or ""))
    group_type, state, protocol_type, protocol, generation = head
    return GroupView(group_id, group_type, state, protocol_type, protocol, generation, members, offsets)


def consumer_assignment(data: bytes) -> dict[str, list[int]]:
    """The consumer protocol's Assignment (int16 version, [topic string, [int32 partition]], user data).

    Other protocol types (Connect, custom) or malformed bytes give an empty assignment.
    """
    try:
        pos = 2
        (count,) = struct.unpack_from(">i", data, pos)
        pos += 4
        out: dict[str, list[int]] = {}
        for _ in range(max(count, 0)):
            (size,) = struct.unpack_from(">h", data, pos)
            topic = bytes(data[pos + 2 : pos + 2 + size]).decode()
            pos += 2 + size
            (n,) = struct.unpack_from(">i", data, pos)
            out[topic] = list(struct.unpack_from(f">{max(n, 0)}i", data, pos + 4))
            pos += 4 + 4 * max(n, 0)
        return out
    except (struct.error, UnicodeDecodeError):
        return {}
