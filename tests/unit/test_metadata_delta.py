"""UpdateMetadata deltas: what the controller sends (full first, then only changes) and how a broker's
metadata cache merges it; a cache fed deltas must equal one fed the full state each time."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from strom.broker.metadata_cache import ClusterMetadataStore
from strom.cluster.context import ControllerContext
from strom.cluster.election import LeaderAndIsr
from strom.cluster.propagation import (
    FULL,
    INCREMENTAL,
    UPDATE_METADATA,
    ControllerRequests,
    metadata_delta,
    metadata_image,
    update_metadata_body,
)
from strom.cluster.zk_paths import BrokerRegistration, TopicAssignment


def _reg(broker_id: int, epoch: int = 0) -> BrokerRegistration:
    return BrokerRegistration(broker_id, "127.0.0.1", 9000 + broker_id, None, epoch)


class Recorder:
    def __init__(self) -> None:
        self.sent: list[tuple[int, int, dict[str, Any]]] = []

    def set_brokers(self, brokers: dict[int, BrokerRegistration]) -> None:
        pass

    def send(self, broker_id: int, api_key: int, body: dict[str, Any]) -> None:
        self.sent.append((broker_id, api_key, body))

    def take(self) -> dict[int, dict[str, Any]]:
        found = {b: body for b, key, body in self.sent if key == UPDATE_METADATA}
        self.sent.clear()
        return found


def _cluster() -> ControllerContext:
    ctx = ControllerContext(broker_id=0, epoch=3)
    ctx.live = {0: _reg(0), 1: _reg(1), 2: _reg(2)}
    for name, topic_id in (("a", b"A" * 16), ("b", b"B" * 16)):
        ctx.assignments[name] = TopicAssignment(topic_id, {p: [p % 3, (p + 1) % 3] for p in range(4)})
        for p in range(4):
            ctx.leadership[(name, p)] = LeaderAndIsr(p % 3, 0, (p % 3, (p + 1) % 3), 3, 0)
    return ctx


def _cache() -> ClusterMetadataStore:
    return ClusterMetadataStore("c", lambda topic: {"t": topic}, lambda n: 0)


def _view(cache: ClusterMetadataStore) -> tuple[Any, ...]:
    topics = {n: (i.topic_id, i.partitions, i.replication_factor) for n, i in cache.topics.items()}
    return topics, dict(cache.partitions), sorted(cache.brokers), cache.controller_epoch


def test_delta_names_changed_partitions_and_deleted_topics() -> None:
    ctx = _cluster()
    before = metadata_image(ctx)
    assert metadata_delta(before, before) == ([], [])
    ctx.leadership[("a", 1)] = LeaderAndIsr(2, 1, (2,), 3, 1)
    ctx.forget_topic("b")
    ctx.assignments["c"] = TopicAssignment(b"C" * 16, {0: [0]})
    assert metadata_delta(before, metadata_image(ctx)) == ([("a", 1), ("c", 0)], ["b"])


def test_a_dead_broker_changes_the_offline_replicas_of_its_partitions() -> None:
    ctx = _cluster()
    before = metadata_image(ctx)
    del ctx.live[2]
    changed, _ = metadata_delta(before, metadata_image(ctx))
    assert changed == sorted(tp for tp, reps in _replicas(ctx).items() if 2 in reps)


def _replicas(ctx: ControllerContext) -> dict[tuple[str, int], list[int]]:
    return {(t, p): r for t, a in ctx.assignments.items() for p, r in a.partitions.items()}


def test_a_recreated_topic_is_sent_whole_and_replaces_the_old_one() -> None:
    ctx = _cluster()
    before = metadata_image(ctx)
    ctx.assignments["a"] = TopicAssignment(b"Z" * 16, {0: [1]})  # deleted, created again with 1 partition
    for p in range(4):
        ctx.leadership.pop(("a", p))
    changed, deleted = metadata_delta(before, metadata_image(ctx))
    assert ("a", 0) in changed and deleted == []
    cache = _cache()
    cache.apply_update_metadata(update_metadata_body(_cluster(), before))
    cache.apply_update_metadata(update_metadata_body(ctx, metadata_image(ctx), (changed, deleted)))
    assert cache.topics["a"].topic_id == b"Z" * 16 and cache.topics["a"].partitions == 1
    assert ("a", 3) not in cache.partitions


def test_full_first_then_incremental_and_full_again_after_reregistration() -> None:
    ctx = _cluster()
    channel = Recorder()
    requests = ControllerRequests(ctx, channel)
    requests.update_metadata()
    first = channel.take()
    assert sorted(first) == [0, 1, 2] and all(b["type"] == FULL for b in first.values())
    ctx.leadership[("a", 0)] = LeaderAndIsr(1, 1, (1,), 3, 1)
    ctx.live[2] = _reg(2, epoch=9)  # broker 2 registered again
    requests.update_metadata()
    second = channel.take()
    assert second[0]["type"] == INCREMENTAL and second[2]["type"] == FULL
    assert [t["topic_name"] for t in second[0]["topics"]] == ["a"]
    assert [p["partition_index"] for p in second[0]["topics"][0]["partition_states"]] == [0]
    requests.update_metadata()  # nothing changed: an empty incremental one (live brokers only)
    third = channel.take()
    assert all(b["type"] == INCREMENTAL and b["topics"] == [] for b in third.values())
    requests.reset()  # a new controller term
    requests.update_metadata()
    assert all(b["type"] == FULL for b in channel.take().values())


_change = st.tuples(
    st.sampled_from(["leader", "isr", "kill", "revive", "delete", "create", "grow"]),
    st.integers(min_value=0, max_value=3),
)


@settings(max_examples=60, deadline=None)
@given(st.lists(_change, max_size=25))
def test_a_cache_fed_deltas_equals_a_cache_fed_the_full_state(changes: list[tuple[str, int]]) -> None:
    ctx = _cluster()
    channel = Recorder()
    requests = ControllerRequests(ctx, channel)
    merged = _cache()
    created = 0
    for kind, n in [("leader", 0), *changes]:
        topics = sorted(ctx.assignments)
        if kind in ("leader", "isr") and topics:
            tp = (topics[n % len(topics)], n % len(ctx.assignments[topics[n % len(topics)]].partitions))
            old = ctx.leadership.get(tp) or LeaderAndIsr(0, 0, (0,), 3, 0)
            isr = old.isr if kind == "leader" else old.isr[:1]
            ctx.leadership[tp] = LeaderAndIsr(
                (old.leader + 1) % 3, old.leader_epoch + 1, isr, 3, old.zk_version + 1
            )
        elif kind == "kill":
            ctx.live.pop(n % 3, None)
        elif kind == "revive":
            ctx.live[n % 3] = _reg(n % 3, epoch=n + 10)
        elif kind == "delete" and topics:
            ctx.forget_topic(topics[n % len(topics)])
        elif kind == "create":
            created += 1
            name = f"n{created % 3}"  # names come back: deleted and created again
            ctx.forget_topic(name)
            ctx.assignments[name] = TopicAssignment(bytes([created]) * 16, {p: [p % 3] for p in range(n + 1)})
        elif kind == "grow" and topics:
            assignment = ctx.assignments[topics[n % len(topics)]]
            assignment.partitions[len(assignment.partitions)] = [n % 3]
        requests.update_metadata()
        for broker_id, body in channel.take().items():
            if broker_id == 0:
                merged.apply_update_metadata(body)
        if 0 in ctx.live:
            fresh = _cache()
            fresh.apply_update_metadata(update_metadata_body(ctx, metadata_image(ctx)))
            assert _view(merged) == _view(fresh)
