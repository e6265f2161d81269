"""Controller steps without I/O: controlled-shutdown plans, deletion steps, broker changes, and the
LeaderAndIsr / UpdateMetadata / StopReplica bodies built from the controller's view."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from strom.cluster.context import ControllerContext, broker_changes
from strom.cluster.controlled_shutdown import (
    PartitionView,
    ShutdownAction,
    leave_isr_decision,
    partitions_led_by,
    plan_controlled_shutdown,
)
from strom.cluster.election import LeaderAndIsr
from strom.cluster.partition_state import PartitionState
from strom.cluster.propagation import (
    leader_and_isr_requests,
    metadata_image,
    stop_replica_body,
    update_metadata_body,
)
from strom.cluster.replica_state import (
    PartitionReplica,
    ReplicaState,
    complete_deletion,
    new_replica_states,
    start_deletion,
)
from strom.cluster.topic_deletion import replicas_to_delete
from strom.cluster.zk_paths import BrokerRegistration, TopicAssignment

R = ReplicaState


def _reg(broker_id: int, epoch: int = 0) -> BrokerRegistration:
    return BrokerRegistration(broker_id, "127.0.0.1", 9000 + broker_id, f"r{broker_id % 2}", epoch)


# --- controlled shutdown ----------------------------------------------------------------------------


def test_shutdown_plan_moves_leadership_and_leaves_isrs() -> None:
    views = [
        PartitionView(("t", 0), LeaderAndIsr(1, 0, (1, 2)), [1, 2]),  # leads
        PartitionView(("t", 1), LeaderAndIsr(2, 0, (2, 1)), [2, 1]),  # follows, in sync
        PartitionView(("t", 2), LeaderAndIsr(2, 0, (2,)), [2, 1]),  # follows, out of sync: nothing
        PartitionView(("t", 3), LeaderAndIsr(2, 0, (2, 3)), [2, 3]),  # not a replica
        PartitionView(("t", 4), None, [1, 2]),  # no leader yet
    ]
    assert plan_controlled_shutdown(1, views) == [
        (("t", 0), ShutdownAction.MOVE_LEADERSHIP),
        (("t", 1), ShutdownAction.LEAVE_ISR),
    ]


def test_leaving_the_isr_never_empties_it() -> None:
    assert leave_isr_decision(LeaderAndIsr(2, 0, (2, 1, 3)), 1) == (2, [2, 3])
    assert leave_isr_decision(LeaderAndIsr(1, 0, (1,)), 1) is None


def test_partitions_still_led() -> None:
    leadership = {("t", 0): LeaderAndIsr(1, 0, (1,)), ("t", 1): LeaderAndIsr(2, 0, (2,))}
    assert partitions_led_by(1, [("t", 1), ("t", 0), ("u", 0)], leadership) == [("t", 0)]


@given(st.lists(st.tuples(st.lists(st.integers(0, 4), min_size=1, max_size=3, unique=True), st.booleans())))
def test_shutdown_plan_touches_only_the_brokers_partitions(parts: list[tuple[list[int], bool]]) -> None:
    views = [
        PartitionView(
            ("t", i), LeaderAndIsr(replicas[0], 0, tuple(replicas[: 1 if short else None])), replicas
        )
        for i, (replicas, short) in enumerate(parts)
    ]
    plan = dict(plan_controlled_shutdown(0, views))
    for view in views:
        assert view.state is not None
        action = plan.get(view.tp)
        if view.state.leader == 0:
            assert action is ShutdownAction.MOVE_LEADERSHIP
        elif 0 in view.state.isr:
            assert action is ShutdownAction.LEAVE_ISR
        else:
            assert action is None


# --- deletion steps ---------------------------------------------------------------------------------


def test_replicas_to_delete_include_replicas_being_added() -> None:
    assignment = TopicAssignment(bytes(16), {1: [3, 1], 0: [1, 2]}, {1: [3]}, {1: [2]})
    assert replicas_to_delete("t", assignment) == [
        PartitionReplica("t", 0, 1),
        PartitionReplica("t", 0, 2),
        PartitionReplica("t", 1, 3),
        PartitionReplica("t", 1, 1),
    ]


def test_deletion_steps_live_and_dead_brokers() -> None:
    table = new_replica_states()
    replicas = [PartitionReplica("t", p, b) for p in (0, 1) for b in (1, 2)]
    for r in replicas:
        table.initialize(r, R.ONLINE if r.replica == 1 else R.OFFLINE)
    plan = start_deletion(table, replicas, live={1})
    assert plan == {1: [("t", 0), ("t", 1)]}  # one StopReplica(delete) for broker 1, none for dead 2
    assert {table.get(r) for r in replicas if r.replica == 1} == {R.REPLICA_DELETION_STARTED}
    assert {table.get(r) for r in replicas if r.replica == 2} == {R.REPLICA_DELETION_INELIGIBLE}
    complete_deletion(table, replicas)
    assert len(table) == 0  # deleted ones do not exist any more; ineligible ones are forgotten


def test_deletion_of_an_unknown_replica_is_refused_and_sends_nothing() -> None:
    table = new_replica_states()
    stray = PartitionReplica("t", 0, 1)
    assert start_deletion(table, [stray], live={1}) == {}
    assert stray not in table


def test_a_replica_mid_deletion_cannot_be_deleted_twice() -> None:
    table = new_replica_states()
    r = PartitionReplica("t", 0, 1)
    table.initialize(r, R.ONLINE)
    assert start_deletion(table, [r], live={1}) == {1: [("t", 0)]}
    assert start_deletion(table, [r], live={1}) == {}  # DeletionStarted -> Offline is refused
    assert table.get(r) is R.REPLICA_DELETION_STARTED


# --- broker changes ---------------------------------------------------------------------------------


def test_broker_changes() -> None:
    before = {1: _reg(1), 2: _reg(2), 3: _reg(3, epoch=5)}
    after = {1: _reg(1), 3: _reg(3, epoch=9), 4: _reg(4)}
    dead, new = broker_changes(before, after)
    assert dead == {2, 3}  # 3 registered again: a bounce is a death and a start
    assert new == {3, 4}


# --- requests to brokers ----------------------------------------------------------------------------


def _context() -> ControllerContext:
    ctx = ControllerContext(broker_id=1, epoch=7)
    ctx.live = {1: _reg(1), 2: _reg(2), 3: _reg(3)}
    ctx.assignments["t"] = TopicAssignment(bytes(range(16)), {0: [1, 2], 1: [2, 4]}, {1: [4]}, {1: [3]})
    ctx.leadership[("t", 0)] = LeaderAndIsr(1, 3, (1, 2), 7, 11)
    ctx.leadership[("t", 1)] = LeaderAndIsr(2, 1, (2,), 6, 2)
    return ctx


def test_leader_and_isr_goes_to_live_replicas_only() -> None:
    requests = dict(leader_and_isr_requests(_context(), [("t", 1), ("t", 0)]))
    assert sorted(requests) == [1, 2]  # broker 4 (a replica of t-1) is not alive
    assert [e["partition_index"] for e in requests[2]["partition_states"]] == [0, 1]
    entry = requests[2]["partition_states"][1]
    assert entry["leader"] == 2 and entry["isr"] == [2] and entry["zk_version"] == 2
    assert entry["replicas"] == [2, 4] and entry["adding_replicas"] == [4]
    assert entry["removing_replicas"] == [3] and entry["controller_epoch"] == 6
    assert requests[1]["controller_epoch"] == 7 and requests[1]["controller_id"] == 1
    assert {b["broker_id"] for b in requests[1]["live_leaders"]} == {1, 2, 3}


def test_full_leader_and_isr_reaches_every_live_broker() -> None:
    requests = dict(leader_and_isr_requests(_context(), [("t", 0)], full=True))
    assert sorted(requests) == [1, 2, 3] and requests[3]["partition_states"] == []
    only = dict(leader_and_isr_requests(_context(), [("t", 0), ("t", 1)], full=True, to={2}))
    assert list(only) == [2] and len(only[2]["partition_states"]) == 2


def test_update_metadata_describes_the_whole_cluster() -> None:
    ctx = _context()
    body = update_metadata_body(ctx, metadata_image(ctx))
    assert body["controller_epoch"] == 7 and body["type"] == 2
    assert [b["id"] for b in body["live_brokers"]] == [1, 2, 3]
    (topic,) = body["topics"]
    p1 = topic["partition_states"][1]
    assert p1["offline_replicas"] == [4] and p1["leader"] == 2


def test_stop_replica_body() -> None:
    body = stop_replica_body(_context(), [("t", 0), ("t", 1)], delete=True)
    assert body["delete_partitions"] is True
    assert body["partitions"] == [
        {"topic_name": "t", "partition_index": 0},
        {"topic_name": "t", "partition_index": 1},
    ]


def test_context_forgets_a_topic_and_its_states() -> None:
    ctx = _context()
    ctx.partition_states.initialize(("t", 0), PartitionState.ONLINE)
    ctx.replica_states.initialize(PartitionReplica("t", 0, 1), R.ONLINE)
    assert ctx.replicas_on({2}) == [PartitionReplica("t", 0, 2), PartitionReplica("t", 1, 2)]
    ctx.forget_topic("t")
    assert not ctx.assignments and not ctx.leadership
    assert len(ctx.partition_states) == 0 and len(ctx.replica_states) == 0
