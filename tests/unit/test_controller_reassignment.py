"""Partition reassignment steps (KIP-455) as pure decisions: start, wait, complete, cancel."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from strom.cluster.election import LeaderAndIsr
from strom.cluster.reassignment import (
    PartitionReassignment,
    completion_decision,
    in_flight,
    plan_reassignment,
    ready_to_complete,
)
from strom.cluster.zk_paths import TopicAssignment
from strom.protocol.errors import ErrorCode, KafkaError

LIVE = {1, 2, 3, 4, 5}


def test_start_lists_targets_first_then_the_replicas_to_remove() -> None:
    plan = plan_reassignment([1, 2, 3], [], [], [4, 2, 5], LIVE)
    assert plan == PartitionReassignment([4, 2, 5, 1, 3], [4, 5], [1, 3])


def test_pure_reordering_is_a_move_with_nothing_to_add_or_remove() -> None:
    assert plan_reassignment([1, 2], [], [], [2, 1], LIVE) == PartitionReassignment([2, 1], [], [])


def test_target_equal_to_the_replicas_is_no_move() -> None:
    assert plan_reassignment([1, 2], [], [], [1, 2], LIVE) == PartitionReassignment([1, 2], None, None)


def test_cancel_restores_the_original_replicas() -> None:
    # a move from [1, 2, 3] to [4, 2, 5] is in flight
    plan = plan_reassignment([4, 2, 5, 1, 3], [4, 5], [1, 3], None, LIVE)
    assert plan == PartitionReassignment([2, 1, 3], None, None)


def test_new_target_replaces_a_move_in_flight() -> None:
    plan = plan_reassignment([4, 2, 5, 1, 3], [4, 5], [1, 3], [2, 3], LIVE)
    assert plan == PartitionReassignment([2, 3, 1], [], [1])


@pytest.mark.parametrize(
    ("adding", "requested", "code"),
    [
        ([], None, ErrorCode.NO_REASSIGNMENT_IN_PROGRESS),
        ([], [], ErrorCode.INVALID_REPLICA_ASSIGNMENT),
        ([], [4, 4], ErrorCode.INVALID_REPLICA_ASSIGNMENT),
        ([], [4, 9], ErrorCode.INVALID_REPLICA_ASSIGNMENT),
    ],
)
def test_refused_requests(adding: list[int], requested: list[int] | None, code: ErrorCode) -> None:
    with pytest.raises(KafkaError) as info:
        plan_reassignment([1, 2], adding, [], requested, LIVE)
    assert info.value.code == code


def test_waits_until_every_target_is_in_sync() -> None:
    assert not ready_to_complete([4, 2, 5], [1, 2, 3, 4])
    assert ready_to_complete([4, 2, 5], [1, 2, 3, 4, 5])


def test_completion_keeps_a_target_leader_and_shrinks_the_isr() -> None:
    current = LeaderAndIsr(2, 7, (1, 2, 3, 4, 5))
    assert completion_decision(current, [4, 2, 5], LIVE) == (2, [2, 4, 5])


def test_completion_moves_leadership_to_a_target() -> None:
    current = LeaderAndIsr(1, 7, (1, 2, 3, 4, 5))
    assert completion_decision(current, [4, 2, 5], LIVE) == (4, [2, 4, 5])  # first target in sync
    assert completion_decision(current, [4, 5], {1, 5}) == (5, [4, 5])
    assert completion_decision(current, [4, 5], {1}) is None


def test_in_flight_lists_moves_from_the_assignment() -> None:
    assignment = TopicAssignment(bytes(16), {0: [1, 2], 1: [4, 2, 1]}, {1: [4]}, {1: [1]})
    assert in_flight({"t": assignment}) == {("t", 1): ([4, 2, 1], [4], [1])}


@given(
    st.lists(st.integers(1, 6), min_size=1, max_size=4, unique=True),
    st.lists(st.integers(1, 6), min_size=1, max_size=4, unique=True),
)
def test_a_move_and_its_cancel_round_trip(original: list[int], target: list[int]) -> None:
    live = set(range(1, 7))
    move = plan_reassignment(original, [], [], target, live)
    if target == original:
        assert move == PartitionReassignment(original, None, None)
        return
    assert move.adding is not None and move.removing is not None
    # during the move every original and every target replica is assigned, each once
    assert sorted(move.replicas) == sorted(set(original) | set(target))
    assert [b for b in move.replicas if b not in move.removing] == target
    assert set(move.adding).isdisjoint(original) and set(move.removing).isdisjoint(target)
    if not move.adding and not move.removing:  # a reordering completes at once: nothing to cancel
        with pytest.raises(KafkaError):
            plan_reassignment(move.replicas, move.adding, move.removing, None, live)
        return
    cancel = plan_reassignment(move.replicas, move.adding, move.removing, None, live)
    # As in Kafka, the original replicas are "the replicas not being added", in the move's order: the
    # set comes back, the order (so the preferred leader) only if the target did not reorder them.
    assert cancel.adding is None and cancel.removing is None
    assert sorted(cancel.replicas) == sorted(original)
    assert cancel.replicas == [b for b in move.replicas if b not in move.adding]
