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
from strom.coordinator.group import Group


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


def cluster_view(broker: Broker, state: ConsoleState) -> ClusterView:
    md = broker.metadata
    _remember_racks(broker, state)
    live = md.brokers
    dead = sorted({r for p in md.partitions.values() for r in p.replicas} - set(live))
    brokers = [
        BrokerView(b.node_id, b.rack, b.host, b.port, True, b.node_id == md.controller_id)
        for b in sorted(live.values(), key=lambda b: b.node_id)
    ] + [BrokerView(b, state.racks.get(b), "-", 0, False, False) for b in dead]
    parts = sorted(md.partitions.items())
    return ClusterView(
        md.cluster_id,
        broker.node_id,
        md.controller_id,
        broker.control.zookeeper_state,
        brokers,
        len(md.topics),
        len(parts),
        [tp for tp, p in parts if p.leader >= 0 and len(p.isr) < len(p.replicas)],
        [tp for tp, p in parts if p.leader < 0],
    )


def topic_rows(broker: Broker, state: ConsoleState) -> list[TopicRow]:
    md = broker.metadata
    hosted = broker.replica_manager.partitions
    counters = broker.metrics.topics if broker.metrics is not None else {}
    now = time.monotonic()
    rows = []
    for name, info in sorted(md.topics.items(), key=lambda kv: (kv[0].startswith("_"), kv[0])):
        count = counters[name].messages_in if name in counters else 0
        before = state.last_counts.get(name)
        rate = (count - before[1]) / (now - before[0]) if before and now > before[0] else None
        state.last_counts[name] = (now, count)
        parts = [p for (t, _), p in md.partitions.items() if t == name]
        rows.append(
            TopicRow(
                name,
                info.partitions,
                info.replication_factor,
                sum(p.log.size_bytes for (t, _), p in hosted.items() if t == name),
                count,
                rate,
                sum(1 for p in parts if len(p.isr) < len(p.replicas)),
                name.startswith("_"),
            )
        )
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
    )


Watermarks = Callable[[list[tuple[str, int]]], dict[tuple[str, int], int]]


@dataclass(frozen=True)
class GroupRow:
    group_id: str
    group_type: str
    state: str
    members: int
    lag: int | None  # summed over the partitions whose high watermark is known


def group_type(group: Group) -> str:
    """The group's type as ListGroups v5 (KIP-848) names it; the coordinator's groups are classic ones
    (the consumer protocol of KIP-848 and share groups report their own type and state here)."""
    return "classic"


def group_rows(broker: Broker, remote: Watermarks) -> list[GroupRow]:
    """The groups this broker coordinates, with their total lag."""
    groups = sorted(broker.groups.coordinator.groups.items())
    hosted = broker.replica_manager.partitions
    known = remote([tp for _, g in groups for tp in g.offsets if tp not in hosted])
    rows = []
    for _, g in groups:
        lags = [_lag(broker, known, tp, c.offset) for tp, c in g.offsets.items()]
        total = sum(lag for lag in lags if lag is not None) if any(lag is not None for lag in lags) else None
        rows.append(GroupRow(g.group_id, group_type(g), g.state.value, len(g.members), total))
    return rows


def _lag(
    broker: Broker, known: dict[tuple[str, int], int], tp: tuple[str, int], committed: int
) -> int | None:
    part = broker.replica_manager.partitions.get(tp)
    end = part.log.high_watermark if part is not None else known.get(tp)
    return None if end is None else max(end - committed, 0)


def group_view(broker: Broker, group_id: str, remote: Watermarks) -> GroupView | None:
    group = broker.groups.coordinator.groups.get(group_id)
    if group is None:
        return None
    return _group_view(broker, group, remote)


def _group_view(broker: Broker, group: Group, remote: Watermarks) -> GroupView:
    members = [
        MemberView(m.member_id, m.client_id, m.client_host, consumer_assignment(m.assignment))
        for m in group.members.values()
    ]
    owners = {(t, p): m.member_id for m in members for t, ps in m.assignment.items() for p in ps}
    hosted = broker.replica_manager.partitions
    known = remote([tp for tp in group.offsets if tp not in hosted])
    offsets = []
    for (t, p), committed in sorted(group.offsets.items()):
        part = hosted.get((t, p))
        end = part.log.high_watermark if part is not None else known.get((t, p))
        lag = max(end - committed.offset, 0) if end is not None else None
        offsets.append(GroupOffset(t, p, committed.offset, end, lag, owners.get((t, p))))
    return GroupView(
        group.group_id,
        group_type(group),
        group.state.value,
        group.protocol_type,
        group.protocol_name,
        group.generation_id,
        members,
        offsets,
    )


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
