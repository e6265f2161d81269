"""Rack-aware replica assignment and leader election decisions (pure functions)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from strom.cluster.assignment import assign_replicas, rack_alternating_order
from strom.cluster.election import (
    controlled_shutdown_leader,
    offline_leader,
    preferred_leader,
    reassignment_leader,
)
from strom.protocol.errors import ErrorCode, KafkaError

SIX = {0: "R1", 1: "R1", 2: "R1", 3: "R2", 4: "R2", 5: "R2"}

# docs/design.md#rack-aware-assignment: per broker, leaders / first / second followers of topic Invoice.
SEEDS_TABLE = {
    0: ([0, 6], [5], [4]),
    3: ([1, 7], [0, 6], [5]),
    1: ([2, 8], [1, 7], [0, 6]),
    4: ([3, 9], [2, 8], [1, 7]),
    2: ([4], [3, 9], [2, 8]),
    5: ([5], [4], [3, 9]),
}


def test_rack_alternating_order_matches_seeds() -> None:
    assert rack_alternating_order(SIX) == [0, 3, 1, 4, 2, 5]


def test_invoice_table_reproduced() -> None:
    assignment = assign_replicas(SIX, 10, 3)
    for broker, (leads, first, second) in SEEDS_TABLE.items():
        assert [p for p, r in assignment.items() if r[0] == broker] == leads
        assert [p for p, r in assignment.items() if r[1] == broker] == first
        assert [p for p, r in assignment.items() if r[2] == broker] == second


def test_without_racks_id_order() -> None:
    brokers = {2: None, 0: None, 1: None}
    assert assign_replicas(brokers, 4, 2) == {0: [0, 1], 1: [1, 2], 2: [2, 0], 3: [0, 1]}


def test_uneven_racks() -> None:
    assert rack_alternating_order({0: "a", 1: "a", 2: "a", 3: "b"}) == [0, 3, 1, 2]


def test_added_partitions_continue_the_formula() -> None:
    whole = assign_replicas(SIX, 12, 3)
    assert assign_replicas(SIX, 2, 3, first_partition=10) == {10: whole[10], 11: whole[11]}


def test_too_few_brokers() -> None:
    with pytest.raises(KafkaError) as info:
        assign_replicas({0: None}, 1, 2)
    assert info.value.code == ErrorCode.INVALID_REPLICATION_FACTOR


@given(
    st.dictionaries(st.integers(0, 50), st.sampled_from(["r1", "r2", "r3"]), min_size=1, max_size=12),
    st.integers(1, 30),
    st.integers(1, 4),
)
def test_assignment_properties(brokers: dict[int, str], partitions: int, rf: int) -> None:
    if rf > len(brokers):
        return
    assignment = assign_replicas(brokers, partitions, rf)
    assert sorted(assignment) == list(range(partitions))
    leaders = [r[0] for r in assignment.values()]
    for replicas in assignment.values():
        assert len(set(replicas)) == rf  # distinct brokers
        assert set(replicas) <= set(brokers)
    # leaders spread evenly: counts differ by at most one
    counts = [leaders.count(b) for b in brokers]
    assert max(counts) - min(counts) <= 1
    # with at least rf racks available each partition spans min(rf, racks) racks
    racks = {brokers[b] for b in brokers}
    order = rack_alternating_order(brokers)
    per_rack = [sum(1 for b in brokers if brokers[b] == r) for r in racks]
    if len(set(per_rack)) == 1:
        for replicas in assignment.values():
            assert len({brokers[b] for b in replicas}) == min(rf, len(racks))
    assert sorted(order) == sorted(brokers)


def test_offline_election_prefers_assignment_order_within_isr() -> None:
    assert offline_leader([1, 2, 3], [3, 2], live={2, 3}) == (2, [2, 3])
    assert offline_leader([1, 2, 3], [1], live={2, 3}) is None
    assert offline_leader([1, 2, 3], [1], live={2, 3}, unclean_allowed=True) == (2, [2])


def test_preferred_and_reassignment_and_shutdown() -> None:
    assert preferred_leader([1, 2, 3], [2, 3, 1], live={1, 2, 3}) == (1, [2, 3, 1])
    assert preferred_leader([1, 2, 3], [2, 3], live={1, 2, 3}) is None
    assert preferred_leader([1, 2, 3], [2, 3, 1], live={2, 3}) is None
    assert reassignment_leader([4, 5], [1, 4, 5], live={1, 4, 5}) == (4, [1, 4, 5])
    assert controlled_shutdown_leader([1, 2, 3], [1, 2, 3], {1, 2, 3}, {1}) == (2, [2, 3])
    assert controlled_shutdown_leader([1, 2], [1], {1, 2}, {1}) is None


@given(
    st.lists(st.integers(0, 9), min_size=1, max_size=5, unique=True),
    st.sets(st.integers(0, 9)),
    st.sets(st.integers(0, 9)),
    st.booleans(),
)
def test_offline_election_properties(
    replicas: list[int], isr: set[int], live: set[int], unclean: bool
) -> None:
    isr_list = [b for b in replicas if b in isr]
    result = offline_leader(replicas, isr_list, live, unclean)
    clean_candidates = [b for b in replicas if b in isr and b in live]
    if clean_candidates:
        assert result is not None
        leader, new_isr = result
        assert leader == clean_candidates[0]
        assert leader in new_isr and set(new_isr) <= live
    elif unclean and any(b in live for b in replicas):
        assert result is not None and result[0] in live
    else:
        assert result is None
