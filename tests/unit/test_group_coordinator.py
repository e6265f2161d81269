"""Group coordinator decisions, driven by a ManualClock and ManualScheduler (no sockets, no sleeps)."""

from __future__ import annotations

import struct
from collections.abc import Sequence

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from strom._util.clock import ManualClock
from strom.coordinator import (
    GroupConfig,
    GroupCoordinator,
    GroupState,
    JoinGroupRequest,
    JoinResult,
    ManualScheduler,
    OffsetAndMetadata,
    SyncGroupRequest,
    SyncResult,
    TopicPartition,
)
from strom.coordinator.coordinator import expired_offsets
from strom.protocol.errors import ErrorCode, KafkaError

SESSION_MS = 10_000
REBALANCE_MS = 30_000
DELAY_MS = 3_000


def subscription(*topics: str) -> bytes:
    out = struct.pack(">hi", 0, len(topics))
    for t in topics:
        out += struct.pack(">h", len(t)) + t.encode()
    return out + struct.pack(">i", -1)


class FakeWriter:
    def __init__(self) -> None:
        self.records: list[tuple[int, bytes, bytes | None]] = []
        self.fail_with: ErrorCode | None = None

    def append(self, partition: int, records: Sequence[tuple[bytes, bytes | None]]) -> None:
        if self.fail_with is not None:
            raise KafkaError(self.fail_with)
        self.records.extend((partition, k, v) for k, v in records)


class Harness:
    def __init__(self, delay_ms: int = DELAY_MS, writer: FakeWriter | None = None) -> None:
        self.clock = ManualClock()
        self.scheduler = ManualScheduler(self.clock)
        self.writer = writer or FakeWriter()
        self.coord = GroupCoordinator(
            GroupConfig(initial_rebalance_delay_ms=delay_ms, min_session_timeout_ms=1000),
            self.clock,
            self.scheduler,
            self.writer,
            num_partitions=5,
        )

    def join(
        self,
        member_id: str = "",
        group: str = "g",
        instance: str | None = None,
        protocols: tuple[tuple[str, bytes], ...] = (("range", subscription("t")),),
        v4: bool = False,
        session_ms: int = SESSION_MS,
    ) -> list[JoinResult]:
        out: list[JoinResult] = []
        req = JoinGroupRequest(
            group_id=group,
            member_id=member_id,
            group_instance_id=instance,
            protocol_type="consumer",
            protocols=protocols,
            session_timeout_ms=session_ms,
            rebalance_timeout_ms=REBALANCE_MS,
            client_id="client",
            client_host="/127.0.0.1",
            require_known_member_id=v4,
        )
        self.coord.join_group(req, out.append)
        return out

    def sync(
        self,
        member_id: str,
        generation: int,
        assignments: dict[str, bytes] | None = None,
        group: str = "g",
        instance: str | None = None,
    ) -> list[SyncResult]:
        out: list[SyncResult] = []
        req = SyncGroupRequest(
            group, generation, member_id, instance, None, None, tuple((assignments or {}).items())
        )
        self.coord.sync_group(req, out.append)
        return out

    def state(self, group: str = "g") -> GroupState:
        return self.coord.groups[group].state

    def settle(self, pending: list[list[JoinResult]]) -> None:
        """Let the initial rebalance delay (extended while members keep arriving) run out."""
        for _ in range(REBALANCE_MS // DELAY_MS + 1):
            if all(pending):
                return
            self.scheduler.advance(DELAY_MS)
        assert all(pending)

    def form_group(self, n: int) -> list[JoinResult]:
        """n members join an Empty group together and sync; returns their join results."""
        pending = [self.join() for _ in range(n)]
        self.settle(pending)
        results = [p[0] for p in pending]
        leader = next(r for r in results if r.members)
        gen = leader.generation_id
        assignments = {r.member_id: f"A-{r.member_id}".encode() for r in results}
        syncs = [self.sync(r.member_id, gen, assignments if r is leader else None) for r in results]
        assert all(s and s[0].error is ErrorCode.NONE for s in syncs)
        return results


def test_single_member_waits_for_initial_delay_then_leads() -> None:
    h = Harness()
    out = h.join()
    assert out == [] and h.state() is GroupState.PREPARING_REBALANCE
    h.scheduler.advance(DELAY_MS - 1)
    assert out == []
    h.scheduler.advance(1)
    (res,) = out
    assert res.error is ErrorCode.NONE and res.generation_id == 1
    assert res.leader == res.member_id and res.protocol_name == "range"
    assert [m.member_id for m in res.members] == [res.member_id]
    assert res.members[0].metadata == subscription("t")  # relayed untouched
    assert h.state() is GroupState.COMPLETING_REBALANCE
    (sync,) = h.sync(res.member_id, 1, {res.member_id: b"assignment"})
    assert sync.error is ErrorCode.NONE and sync.assignment == b"assignment"
    assert h.state() is GroupState.STABLE
    assert h.coord.heartbeat("g", 1, res.member_id) is ErrorCode.NONE


def test_kip394_member_id_required_round_trip() -> None:
    h = Harness()
    (first,) = h.join(v4=True)
    assert first.error is ErrorCode.MEMBER_ID_REQUIRED and first.member_id
    assert h.state() is GroupState.EMPTY
    out = h.join(member_id=first.member_id, v4=True)
    h.scheduler.advance(DELAY_MS)
    assert out[0].error is ErrorCode.NONE and out[0].member_id == first.member_id


def test_pending_member_id_expires() -> None:
    h = Harness()
    (first,) = h.join(v4=True)
    h.scheduler.advance(SESSION_MS + 1)
    assert h.join(member_id=first.member_id)[0].error is ErrorCode.UNKNOWN_MEMBER_ID


def test_members_joining_during_initial_delay_share_one_generation() -> None:
    h = Harness()
    results = h.form_group(3)
    assert {r.generation_id for r in results} == {1}
    leaders = [r for r in results if r.members]
    assert len(leaders) == 1 and len(leaders[0].members) == 3
    assert all(r.leader == leaders[0].member_id for r in results)


def test_new_member_triggers_rebalance_that_completes_when_all_rejoin() -> None:
    h = Harness()
    a, b = h.form_group(2)
    newcomer = h.join()
    assert h.state() is GroupState.PREPARING_REBALANCE and newcomer == []
    assert h.coord.heartbeat("g", 1, a.member_id) is ErrorCode.REBALANCE_IN_PROGRESS
    ra = h.join(member_id=a.member_id)
    assert ra == []
    rb = h.join(member_id=b.member_id)
    # Everyone is in: no need to wait for the rebalance timeout.
    assert ra and rb and newcomer
    assert {ra[0].generation_id, rb[0].generation_id, newcomer[0].generation_id} == {2}
    assert h.coord.heartbeat("g", 1, a.member_id) is ErrorCode.ILLEGAL_GENERATION


def test_member_that_does_not_rejoin_is_dropped_at_rebalance_timeout() -> None:
    h = Harness()
    a, b = h.form_group(2)
    h.join()  # newcomer
    ra = h.join(member_id=a.member_id)
    # b keeps heartbeating but never rejoins (stuck beyond max.poll.interval.ms).
    for _ in range(REBALANCE_MS // 2000):
        h.scheduler.advance(2000)
        h.coord.heartbeat("g", 1, b.member_id)
    h.scheduler.advance(2000)
    assert ra and ra[0].generation_id == 2
    assert b.member_id not in h.coord.groups["g"].members
    assert len(ra[0].members or ()) in (0, 2)


def test_session_expiry_removes_member_and_rebalances() -> None:
    h = Harness()
    a, b = h.form_group(2)
    for _ in range(6):
        h.scheduler.advance(2000)
        assert h.coord.heartbeat("g", 1, a.member_id) in (ErrorCode.NONE, ErrorCode.REBALANCE_IN_PROGRESS)
    # b went silent 12 s ago (> 10 s session): gone, and a is asked to rejoin.
    assert b.member_id not in h.coord.groups["g"].members
    assert h.state() is GroupState.PREPARING_REBALANCE
    ra = h.join(member_id=a.member_id)
    assert ra[0].generation_id == 2 and [m.member_id for m in ra[0].members] == [a.member_id]


def test_leave_group_rebalances_and_last_leave_empties() -> None:
    h = Harness()
    a, b = h.form_group(2)
    assert h.coord.leave_group("g", [(b.member_id, None)]) == [ErrorCode.NONE]
    assert h.state() is GroupState.PREPARING_REBALANCE
    assert h.coord.leave_group("g", [(a.member_id, None)]) == [ErrorCode.NONE]
    assert h.state() is GroupState.EMPTY
    assert h.coord.groups["g"].generation_id == 2
    assert h.coord.leave_group("g", [("nobody", None)]) == [ErrorCode.UNKNOWN_MEMBER_ID]
    assert h.coord.leave_group("nogroup", [("x", None)]) == [ErrorCode.UNKNOWN_MEMBER_ID]


def test_follower_sync_waits_for_leader() -> None:
    h = Harness()
    pending = [h.join(), h.join()]
    h.settle(pending)
    leader = next(p[0] for p in pending if p[0].members)
    follower = next(p[0] for p in pending if not p[0].members)
    fs = h.sync(follower.member_id, 1)
    assert fs == []
    h.sync(leader.member_id, 1, {leader.member_id: b"L"})  # follower left out: gets empty
    assert fs[0].error is ErrorCode.NONE and fs[0].assignment == b""


def test_sync_errors() -> None:
    h = Harness()
    (a,) = h.form_group(1)
    assert h.sync("ghost", 1)[0].error is ErrorCode.UNKNOWN_MEMBER_ID
    assert h.sync(a.member_id, 7)[0].error is ErrorCode.ILLEGAL_GENERATION
    assert h.sync(a.member_id, 1, group="other")[0].error is ErrorCode.UNKNOWN_MEMBER_ID
    h.join()
    assert h.sync(a.member_id, 1)[0].error is ErrorCode.REBALANCE_IN_PROGRESS


def test_join_validation() -> None:
    h = Harness()
    assert h.join(group="")[0].error is ErrorCode.INVALID_GROUP_ID
    assert h.join(session_ms=10)[0].error is ErrorCode.INVALID_SESSION_TIMEOUT
    assert h.join(member_id="made-up")[0].error is ErrorCode.UNKNOWN_MEMBER_ID
    h.form_group(1)
    bad = h.join(protocols=(("roundrobin", b""),))
    assert bad[0].error is ErrorCode.INCONSISTENT_GROUP_PROTOCOL


def test_protocol_selection_by_votes_among_common_protocols() -> None:
    h = Harness()
    both = (("cooperative-sticky", b"c"), ("range", b"r"))
    pending = [h.join(protocols=both), h.join(protocols=(("range", b"r2"), ("cooperative-sticky", b"c2")))]
    pending.append(h.join(protocols=both))
    h.settle(pending)
    assert {p[0].protocol_name for p in pending} == {"cooperative-sticky"}
    leader = next(p[0] for p in pending if p[0].members)
    assert {m.metadata for m in leader.members} == {b"c", b"c2"}


def test_static_member_restart_keeps_assignment_without_rebalance() -> None:
    h = Harness()
    pa, pb = h.join(instance="inst-a"), h.join(instance="inst-b")
    h.settle([pa, pb])
    a, b = pa[0], pb[0]
    leader = a if a.members else b
    h.sync(a.member_id, 1, {a.member_id: b"A", b.member_id: b"B"} if leader is a else None, instance="inst-a")
    h.sync(b.member_id, 1, {a.member_id: b"A", b.member_id: b"B"} if leader is b else None, instance="inst-b")
    assert h.state() is GroupState.STABLE
    # inst-b restarts: joins with no member id.
    (rejoin,) = h.join(instance="inst-b")
    assert rejoin.error is ErrorCode.NONE and rejoin.generation_id == 1
    assert rejoin.member_id != b.member_id and rejoin.leader == leader.member_id
    assert rejoin.members == ()
    assert h.state() is GroupState.STABLE
    (sync,) = h.sync(rejoin.member_id, 1, instance="inst-b")
    assert sync.assignment == b"B"
    # The previous incarnation is fenced; the other member is undisturbed.
    assert h.coord.heartbeat("g", 1, b.member_id, "inst-b") is ErrorCode.FENCED_INSTANCE_ID
    assert h.coord.heartbeat("g", 1, a.member_id, "inst-a") is ErrorCode.NONE
    assert h.join(member_id=b.member_id, instance="inst-b")[0].error is ErrorCode.FENCED_INSTANCE_ID


def test_static_member_is_not_dropped_for_missing_a_rebalance_but_expires_by_session() -> None:
    h = Harness()
    pa, pb = h.join(instance="ia"), h.join()
    h.settle([pa, pb])
    a, b = pa[0], pb[0]
    for r in (a, b):
        h.sync(r.member_id, 1, {a.member_id: b"A", b.member_id: b"B"} if r.members else None)
    h.join()  # newcomer starts a rebalance; only b and the newcomer rejoin
    rb = h.join(member_id=b.member_id)
    h.scheduler.advance(REBALANCE_MS)
    assert h.coord.groups["g"].generation_id >= 2
    assert rb and rb[0].error is ErrorCode.NONE


def test_offsets_standalone_commit_and_fetch() -> None:
    h = Harness()
    tp = TopicPartition("t", 0)
    res = h.coord.commit_offsets("solo", -1, "", None, {tp: OffsetAndMetadata(10, 3, "m")})
    assert res == {tp: ErrorCode.NONE}
    got = h.coord.fetch_offsets("solo", [tp, TopicPartition("t", 1)])
    committed = got[tp]
    assert committed is not None and (committed.offset, committed.leader_epoch, committed.metadata) == (
        10,
        3,
        "m",
    )
    assert got[TopicPartition("t", 1)] is None
    assert h.coord.fetch_offsets("solo", None).keys() == {tp}
    assert h.coord.fetch_offsets("unknown", [tp]) == {tp: None}
    assert len(h.writer.records) == 1 and h.writer.records[0][0] == h.coord.partition_for("solo")


def test_offset_commit_rules_for_group_members() -> None:
    h = Harness()
    (a,) = h.form_group(1)
    tp = TopicPartition("t", 0)
    om = {tp: OffsetAndMetadata(5)}
    assert h.coord.commit_offsets("g", 1, a.member_id, None, om) == {tp: ErrorCode.NONE}
    assert h.coord.commit_offsets("g", 0, a.member_id, None, om) == {tp: ErrorCode.ILLEGAL_GENERATION}
    assert h.coord.commit_offsets("g", 1, "ghost", None, om) == {tp: ErrorCode.UNKNOWN_MEMBER_ID}
    assert h.coord.commit_offsets("g", -1, "", None, om) == {tp: ErrorCode.UNKNOWN_MEMBER_ID}
    assert h.coord.commit_offsets("new", 3, "x", None, om) == {tp: ErrorCode.ILLEGAL_GENERATION}
    big = {tp: OffsetAndMetadata(5, -1, "x" * 5000)}
    assert h.coord.commit_offsets("g", 1, a.member_id, None, big) == {tp: ErrorCode.OFFSET_METADATA_TOO_LARGE}
    h.join()  # PreparingRebalance: commits still allowed
    assert h.coord.commit_offsets("g", 1, a.member_id, None, om) == {tp: ErrorCode.NONE}


def test_failed_write_is_not_acknowledged_or_applied() -> None:
    h = Harness()
    tp = TopicPartition("t", 0)
    h.writer.fail_with = ErrorCode.KAFKA_STORAGE_ERROR
    res = h.coord.commit_offsets("solo", -1, "", None, {tp: OffsetAndMetadata(1)})
    assert res == {tp: ErrorCode.COORDINATOR_NOT_AVAILABLE}
    assert h.coord.fetch_offsets("solo", [tp]) == {tp: None}


def test_replay_rebuilds_offsets_and_stable_group() -> None:
    h = Harness()
    a, b = h.form_group(2)
    tp = TopicPartition("t", 1)
    h.coord.commit_offsets("g", 1, a.member_id, None, {tp: OffsetAndMetadata(7, 2, "x")})
    h.coord.commit_offsets("g", 1, a.member_id, None, {tp: OffsetAndMetadata(9, 2, "y")})
    h.coord.commit_offsets("solo", -1, "", None, {tp: OffsetAndMetadata(3)})

    h2 = Harness(writer=h.writer)
    h2.coord.load((k, v) for _, k, v in h.writer.records)
    group = h2.coord.groups["g"]
    assert group.state is GroupState.STABLE and group.generation_id == 1
    assert set(group.members) == {a.member_id, b.member_id}
    assert group.members[a.member_id].assignment == f"A-{a.member_id}".encode()
    committed = h2.coord.fetch_offsets("g", [tp])[tp]
    assert committed is not None and (committed.offset, committed.leader_epoch, committed.metadata) == (
        9,
        2,
        "y",
    )
    assert h2.coord.heartbeat("g", 1, a.member_id) is ErrorCode.NONE
    # b never comes back after the "restart": its session expires and the group rebalances.
    for _ in range(6):
        h2.scheduler.advance(2000)
        h2.coord.heartbeat("g", 1, a.member_id)
    assert b.member_id not in group.members


def test_delete_groups_and_replay_after_delete() -> None:
    h = Harness()
    (a,) = h.form_group(1)
    tp = TopicPartition("t", 0)
    h.coord.commit_offsets("g", 1, a.member_id, None, {tp: OffsetAndMetadata(1)})
    assert h.coord.delete_groups(["g", "nope"]) == {
        "g": ErrorCode.NON_EMPTY_GROUP,
        "nope": ErrorCode.GROUP_ID_NOT_FOUND,
    }
    h.coord.leave_group("g", [(a.member_id, None)])
    assert h.coord.delete_groups(["g"]) == {"g": ErrorCode.NONE}
    assert "g" not in h.coord.groups
    assert h.coord.describe_group("g").state == "Dead"
    h2 = Harness()
    h2.coord.load((k, v) for _, k, v in h.writer.records)
    assert "g" not in h2.coord.groups


def test_offset_delete_refuses_subscribed_topics() -> None:
    h = Harness()
    (a,) = h.form_group(1)
    t0, other = TopicPartition("t", 0), TopicPartition("other", 0)
    h.coord.commit_offsets("g", 1, a.member_id, None, {t0: OffsetAndMetadata(1), other: OffsetAndMetadata(2)})
    error, results = h.coord.delete_offsets("g", [t0, other])
    assert error is ErrorCode.NONE
    assert results == {t0: ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC, other: ErrorCode.NONE}
    assert h.coord.fetch_offsets("g", None).keys() == {t0}
    assert h.coord.delete_offsets("zzz", [t0])[0] is ErrorCode.GROUP_ID_NOT_FOUND


def test_describe_and_list() -> None:
    h = Harness()
    (a,) = h.form_group(1)
    h.coord.commit_offsets("solo", -1, "", None, {TopicPartition("t", 0): OffsetAndMetadata(1)})
    summary = h.coord.describe_group("g")
    assert (summary.state, summary.protocol_type, summary.protocol_name) == ("Stable", "consumer", "range")
    assert summary.members[0].assignment == f"A-{a.member_id}".encode()
    assert summary.members[0].metadata == subscription("t")
    listed = {g.group_id: g for g in h.coord.list_groups()}
    assert listed["g"].protocol_type == "consumer" and listed["solo"].protocol_type == ""
    assert listed["solo"].state == "Empty"


def test_offset_expiry() -> None:
    h = Harness()
    tp = TopicPartition("t", 0)
    h.coord.commit_offsets("solo", -1, "", None, {tp: OffsetAndMetadata(1)})
    group = h.coord.groups["solo"]
    retention = h.coord.config.offsets_retention_ms
    assert expired_offsets(group, h.clock.time_ms() + retention - 1, retention) == []
    h.clock.advance(retention)
    assert h.coord.expire_offsets() == 1
    assert "solo" not in h.coord.groups


def test_shutdown_answers_parked_requests() -> None:
    h = Harness()
    out = h.join()
    h.coord.shutdown()
    assert out[0].error is ErrorCode.NOT_COORDINATOR


@pytest.mark.parametrize("n", [1, 4])
def test_rejoin_after_lost_join_response_returns_same_generation(n: int) -> None:
    h = Harness()
    pending = [h.join() for _ in range(n)]
    h.settle(pending)
    first = pending[0][0]
    again = h.join(member_id=first.member_id)
    assert again[0].generation_id == 1 and again[0].error is ErrorCode.NONE
    assert h.state() is GroupState.COMPLETING_REBALANCE


# --- stateful exploration -------------------------------------------------------------------------
# Hypothesis explores sequences of joins, syncs, heartbeats, leaves, commits and time passing. Whatever
# the sequence: no illegal state transition is attempted (it would raise), the group's invariants hold
# after every step, and once clients go quiet every parked request gets an answer.

PROTOCOLS = (("range", b"r"),)


class GroupMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.h = Harness(delay_ms=1000)
        self.joins: list[list[JoinResult]] = []
        self.syncs: list[list[SyncResult]] = []
        self.known: list[tuple[str, str | None]] = []  # (member id, instance id) handed out by joins

    def _learn(self) -> None:
        for out in self.joins:
            for res in out:
                if res.member_id and res.error in (ErrorCode.NONE, ErrorCode.MEMBER_ID_REQUIRED):
                    instance = None
                    group = self.h.coord.groups.get("g")
                    member = group.members.get(res.member_id) if group else None
                    if member is not None:
                        instance = member.group_instance_id
                    if (res.member_id, instance) not in self.known:
                        self.known.append((res.member_id, instance))

    @rule(v4=st.booleans(), instance=st.sampled_from([None, None, "s1", "s2"]))
    def join_new(self, v4: bool, instance: str | None) -> None:
        self.joins.append(self.h.join(v4=v4, instance=instance, protocols=PROTOCOLS))
        self._learn()

    @precondition(lambda self: self.known)
    @rule(data=st.data())
    def rejoin(self, data: st.DataObject) -> None:
        member_id, instance = data.draw(st.sampled_from(self.known))
        self.joins.append(self.h.join(member_id=member_id, instance=instance, protocols=PROTOCOLS))
        self._learn()

    @precondition(lambda self: self.known)
    @rule(data=st.data(), as_leader=st.booleans())
    def sync(self, data: st.DataObject, as_leader: bool) -> None:
        member_id, instance = data.draw(st.sampled_from(self.known))
        group = self.h.coord.groups.get("g")
        generation = group.generation_id if group else 0
        assignments = {member_id: b"x"} if as_leader else None
        self.syncs.append(self.h.sync(member_id, generation, assignments, instance=instance))

    @precondition(lambda self: self.known)
    @rule(data=st.data())
    def heartbeat(self, data: st.DataObject) -> None:
        member_id, instance = data.draw(st.sampled_from(self.known))
        group = self.h.coord.groups.get("g")
        self.h.coord.heartbeat("g", group.generation_id if group else 0, member_id, instance)

    @precondition(lambda self: self.known)
    @rule(data=st.data())
    def leave(self, data: st.DataObject) -> None:
        member_id, instance = data.draw(st.sampled_from(self.known))
        self.h.coord.leave_group("g", [(member_id, instance)])

    @precondition(lambda self: self.known)
    @rule(data=st.data(), offset=st.integers(0, 100))
    def commit(self, data: st.DataObject, offset: int) -> None:
        member_id, instance = data.draw(st.sampled_from(self.known))
        group = self.h.coord.groups.get("g")
        generation = group.generation_id if group else -1
        tp = TopicPartition("t", 0)
        result = self.h.coord.commit_offsets(
            "g", generation, member_id, instance, {tp: OffsetAndMetadata(offset)}
        )
        if result[tp] is ErrorCode.NONE:
            committed = self.h.coord.fetch_offsets("g", [tp])[tp]
            assert committed is not None and committed.offset == offset

    @rule(ms=st.sampled_from([100, 1000, 5000, 11_000, 31_000]))
    def advance(self, ms: int) -> None:
        self.h.scheduler.advance(ms)

    @invariant()
    def group_is_consistent(self) -> None:
        group = self.h.coord.groups.get("g")
        if group is None:
            return
        if group.members:
            assert group.leader_id in group.members
        else:
            assert group.leader_id is None
        if group.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            assert group.members
        if group.state is GroupState.EMPTY:
            assert not group.members
        for instance, member_id in group.static_members.items():
            assert group.members[member_id].group_instance_id == instance
        for member in group.members.values():
            if member.awaiting_join:
                assert group.state is GroupState.PREPARING_REBALANCE
            if member.awaiting_sync:
                assert group.state is GroupState.COMPLETING_REBALANCE

    def teardown(self) -> None:
        # Quiet clients: sessions expire, rebalances time out; nothing may stay parked forever.
        for _ in range(4):
            self.h.scheduler.advance(400_000)
        group = self.h.coord.groups.get("g")
        if group is not None:
            assert not any(m.awaiting_join or m.awaiting_sync for m in group.members.values())
        assert all(out for out in self.joins), "a JoinGroup was never answered"


GroupMachine.TestCase.settings = settings(max_examples=60, stateful_step_count=30, deadline=None)
test_group_state_machine = GroupMachine.TestCase
