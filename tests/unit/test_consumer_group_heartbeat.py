"""KIP-848 consumer groups without a broker: heartbeats decided on a group rebuilt by replaying their
records, as the coordinator runtime does; incremental reconciliation, fencing, static members, leaving,
regular expressions, and the records a new coordinator loads."""

from __future__ import annotations

import pytest

from strom.coordinator.consumer.heartbeat import (
    ConsumerGroupConfig,
    HeartbeatOutcome,
    HeartbeatRequest,
    heartbeat,
    removal_records,
)
from strom.coordinator.consumer.model import ConsumerGroup, ConsumerGroupState, MemberState, commit_error
from strom.coordinator.consumer.reconciliation import reconcile
from strom.coordinator.consumer.records import decode_key, decode_value
from strom.protocol.errors import ErrorCode

TOPICS = {"orders": 6, "audit": 2, "__consumer_offsets": 50}
CONFIG = ConsumerGroupConfig(heartbeat_interval_ms=500, session_timeout_ms=6000)


class Coordinator:
    """One group's records and the group replayed from them (the runtime's append-then-replay)."""

    def __init__(self) -> None:
        self.log: list[tuple[bytes, bytes | None]] = []
        self.group: ConsumerGroup | None = None

    def apply(self, records: list[tuple[bytes, bytes | None]]) -> None:
        for key, value in records:
            self.log.append((key, value))
            decoded = decode_key(key)
            if self.group is None:
                self.group = ConsumerGroup(decoded.group)
            self.group.replay(decoded, None if value is None else decode_value(decoded, value))

    def beat(self, req: HeartbeatRequest, topics: dict[str, int] = TOPICS) -> HeartbeatOutcome:
        outcome = heartbeat(self.group, req, topics, CONFIG)
        if outcome.error is ErrorCode.NONE:
            self.apply(outcome.records)
        return outcome

    def reloaded(self) -> ConsumerGroup:
        fresh = Coordinator()
        fresh.apply(list(self.log))
        assert fresh.group is not None
        return fresh.group


def join(
    c: Coordinator, member: str, topics: tuple[str, ...] = ("orders",), **kw: object
) -> HeartbeatOutcome:
    req = HeartbeatRequest("g", member, 0, subscribed_topic_names=topics, rebalance_timeout_ms=30_000, **kw)  # type: ignore[arg-type]
    return c.beat(req)


def beat(c: Coordinator, member: str, epoch: int, owned: set[tuple[str, int]] | None) -> HeartbeatOutcome:
    return c.beat(HeartbeatRequest("g", member, epoch, owned=None if owned is None else tuple(sorted(owned))))


def owned_of(outcome: HeartbeatOutcome) -> set[tuple[str, int]]:
    assert outcome.assignment is not None
    return {(t, p) for t, ps in outcome.assignment.items() for p in ps}


def test_first_member_gets_everything_at_epoch_one() -> None:
    c = Coordinator()
    out = join(c, "a")
    assert out.error is ErrorCode.NONE and out.member_epoch == 1
    assert owned_of(out) == {("orders", p) for p in range(6)}
    assert c.group is not None and c.group.state is ConsumerGroupState.STABLE


def test_second_member_waits_for_the_revocation() -> None:
    c = Coordinator()
    a = owned_of(join(c, "a"))
    b_join = join(c, "b")
    # The group moved to epoch 2; b's partitions still belong to a: b gets nothing yet.
    assert b_join.member_epoch == 2 and owned_of(b_join) == set()
    assert c.group is not None and c.group.members["b"].state is MemberState.UNRELEASED_PARTITIONS
    # a must revoke first: it stays at epoch 1 with half its partitions.
    a_beat = beat(c, "a", 1, a)
    kept = owned_of(a_beat)
    assert a_beat.member_epoch == 1 and len(kept) == 3
    assert c.group.members["a"].state is MemberState.UNREVOKED_PARTITIONS
    assert c.group.state is ConsumerGroupState.RECONCILING
    # b asks again: still unreleased (a has not reported the revocation).
    waiting = beat(c, "b", 2, set())
    assert waiting.member_epoch == 2 and waiting.assignment is None
    assert c.group.members["b"].state is MemberState.UNRELEASED_PARTITIONS
    # a reports it revoked them: a moves to epoch 2; they are free now.
    a_done = beat(c, "a", 1, kept)
    assert a_done.member_epoch == 2 and c.group.members["a"].state is MemberState.STABLE
    b_now = beat(c, "b", 2, set())
    assert owned_of(b_now) == {("orders", p) for p in range(6)} - kept
    assert c.group.state is ConsumerGroupState.STABLE
    assert c.reloaded() == c.group


def test_leave_bumps_the_epoch_and_the_others_take_over() -> None:
    c = Coordinator()
    a = owned_of(join(c, "a"))
    join(c, "b")
    kept = owned_of(beat(c, "a", 1, a))
    beat(c, "a", 1, kept)
    b_parts = owned_of(beat(c, "b", 2, set()))
    left = beat(c, "b", -1, b_parts)
    assert left.member_epoch == -1
    assert c.group is not None and set(c.group.members) == {"a"} and c.group.group_epoch == 3
    a_all = beat(c, "a", 2, kept)
    assert a_all.member_epoch == 3 and owned_of(a_all) == {("orders", p) for p in range(6)}


def test_fencing() -> None:
    c = Coordinator()
    parts = owned_of(join(c, "a"))
    assert beat(c, "a", 5, parts).error is ErrorCode.FENCED_MEMBER_EPOCH
    assert beat(c, "nobody", 1, parts).error is ErrorCode.UNKNOWN_MEMBER_ID
    assert beat(c, "nobody", -1, None).error is ErrorCode.UNKNOWN_MEMBER_ID
    join(c, "b")
    kept = owned_of(beat(c, "a", 1, parts))
    beat(c, "a", 1, kept)  # a reaches epoch 2, previous epoch 1
    # A lost response: the previous epoch is accepted while a owns nothing beyond its assignment...
    assert beat(c, "a", 1, kept).error is ErrorCode.NONE
    # ...but not while it claims more.
    assert beat(c, "a", 1, parts).error is ErrorCode.FENCED_MEMBER_EPOCH
    assert c.group is not None
    assert commit_error(c.group, "a", 2) is ErrorCode.NONE
    assert commit_error(c.group, "a", 1) is ErrorCode.STALE_MEMBER_EPOCH
    assert commit_error(c.group, "x", 2) is ErrorCode.UNKNOWN_MEMBER_ID
    assert commit_error(c.group, "", -1) is ErrorCode.UNKNOWN_MEMBER_ID
    assert commit_error(None, "", -1) is None


def test_static_member_keeps_its_partitions_across_a_restart() -> None:
    c = Coordinator()
    first = join(c, "a1", instance_id="host-1")
    parts = owned_of(first)
    assert join(c, "a2", instance_id="host-1").error is ErrorCode.UNRELEASED_INSTANCE_ID
    left = c.beat(HeartbeatRequest("g", "a1", -2, instance_id="host-1"))
    assert left.member_epoch == -2
    back = join(c, "a2", instance_id="host-1")
    assert back.error is ErrorCode.NONE and owned_of(back) == parts and back.member_epoch == 1
    assert c.group is not None and set(c.group.members) == {"a2"} and c.group.group_epoch == 1


def test_regular_expression_subscription_and_new_topics() -> None:
    c = Coordinator()
    out = c.beat(HeartbeatRequest("g", "a", 0, subscribed_topic_regex="ord.*|aud.*", rebalance_timeout_ms=1))
    assert owned_of(out) == {("orders", p) for p in range(6)} | {("audit", 0), ("audit", 1)}
    grown = c.beat(HeartbeatRequest("g", "a", 1, owned=tuple(sorted(owned_of(out)))), {**TOPICS, "orders": 8})
    assert grown.member_epoch == 2 and ("orders", 7) in owned_of(grown)
    bad = c.beat(HeartbeatRequest("g", "b", 0, subscribed_topic_regex="(", rebalance_timeout_ms=1))
    assert bad.error is ErrorCode.INVALID_REGULAR_EXPRESSION
    assert join(c, "c", server_assignor="sticky").error is ErrorCode.UNSUPPORTED_ASSIGNOR


def test_removal_releases_partitions_and_reload_matches() -> None:
    c = Coordinator()
    join(c, "a")
    join(c, "b")
    assert c.group is not None
    c.apply(removal_records(c.group, "a", TOPICS))
    assert set(c.group.members) == {"b"} and not any(o == "a" for o in c.group.owners.values())
    b = beat(c, "b", 2, set())
    assert owned_of(b) == {("orders", p) for p in range(6)}
    assert c.reloaded() == c.group


@pytest.mark.parametrize("owned", [None, {("orders", 0)}])
def test_unrevoked_member_waits_for_its_report(owned: set[tuple[str, int]] | None) -> None:
    c = Coordinator()
    join(c, "a")
    join(c, "b")
    assert c.group is not None
    member = c.group.members["a"]
    moved = reconcile(member, 2, {"orders": frozenset({1})}, {("orders", p) for p in range(6)}, c.group.owner)
    assert moved.state is MemberState.UNREVOKED_PARTITIONS and moved.member_epoch == 1
    again = reconcile(moved, 2, {"orders": frozenset({1})}, owned, c.group.owner)
    assert again == moved
