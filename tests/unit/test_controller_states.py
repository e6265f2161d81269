"""Controller state machines: partition and replica states, allowed and refused moves (pure, no I/O)."""

from __future__ import annotations

import logging
from collections import deque
from enum import Enum

import pytest
from hypothesis import given
from hypothesis import strategies as st

from strom.cluster import partition_state, replica_state
from strom.cluster.election import NO_LEADER, LeaderAndIsr
from strom.cluster.partition_state import PartitionState, new_partition_states
from strom.cluster.replica_state import PartitionReplica, ReplicaState, new_replica_states
from strom.cluster.state_table import StateTable

P = PartitionState
R = ReplicaState

# Kafka's tables (PartitionStateMachine.scala / ReplicaStateMachine.scala), written out edge by edge.
PARTITION_EDGES = {
    (P.NON_EXISTENT, P.NEW),
    (P.NEW, P.ONLINE),
    (P.ONLINE, P.ONLINE),
    (P.OFFLINE, P.ONLINE),
    (P.NEW, P.OFFLINE),
    (P.ONLINE, P.OFFLINE),
    (P.OFFLINE, P.OFFLINE),
    (P.OFFLINE, P.NON_EXISTENT),
}
REPLICA_EDGES = {
    (R.NON_EXISTENT, R.NEW),
    *((s, R.ONLINE) for s in (R.NEW, R.ONLINE, R.OFFLINE, R.REPLICA_DELETION_INELIGIBLE)),
    *((s, R.OFFLINE) for s in (R.NEW, R.ONLINE, R.OFFLINE, R.REPLICA_DELETION_INELIGIBLE)),
    (R.OFFLINE, R.REPLICA_DELETION_STARTED),
    (R.REPLICA_DELETION_STARTED, R.REPLICA_DELETION_SUCCESSFUL),
    (R.OFFLINE, R.REPLICA_DELETION_INELIGIBLE),
    (R.REPLICA_DELETION_STARTED, R.REPLICA_DELETION_INELIGIBLE),
    (R.REPLICA_DELETION_SUCCESSFUL, R.NON_EXISTENT),
}


def _edges(valid_previous: dict[P, frozenset[P]] | dict[R, frozenset[R]]) -> set[tuple[Enum, Enum]]:
    return {(before, target) for target, befores in valid_previous.items() for before in befores}


def test_partition_table_is_kafkas() -> None:
    assert _edges(partition_state.VALID_PREVIOUS) == PARTITION_EDGES
    assert P.ONLINE.valid_previous == {P.NEW, P.ONLINE, P.OFFLINE}


def test_replica_table_is_kafkas() -> None:
    assert _edges(replica_state.VALID_PREVIOUS) == REPLICA_EDGES
    assert R.NON_EXISTENT.valid_previous == {R.REPLICA_DELETION_SUCCESSFUL}


def _reachable(start: Enum, edges: set[tuple[Enum, Enum]]) -> set[Enum]:
    seen, todo = {start}, deque([start])
    while todo:
        state = todo.popleft()
        for before, after in edges:
            if before is state and after not in seen:
                seen.add(after)
                todo.append(after)
    return seen


@pytest.mark.parametrize(
    ("states", "edges", "absent"),
    [(P, PARTITION_EDGES, P.NON_EXISTENT), (R, REPLICA_EDGES, R.NON_EXISTENT)],
)
def test_every_state_reachable_and_deletable(
    states: type[Enum], edges: set[tuple[Enum, Enum]], absent: Enum
) -> None:
    # Every state can be reached from nothing, and from every state there is a way back to nothing
    # (ReplicaDeletionIneligible through Offline, as Kafka retries a deletion once the broker is back).
    assert _reachable(absent, edges) == set(states)
    for state in states:
        assert absent in _reachable(state, edges), state


def test_partition_life_cycle() -> None:
    table = new_partition_states()
    tp = ("t", 0)
    assert table.get(tp) is P.NON_EXISTENT and tp not in table
    assert table.transition_to(tp, P.NEW)
    assert table.transition_to(tp, P.ONLINE)
    assert table.transition_to(tp, P.ONLINE)  # re-election keeps it online
    assert table.transition_to(tp, P.OFFLINE)
    assert table.transition_to(tp, P.ONLINE)
    assert table.transition_to(tp, P.OFFLINE)
    assert table.transition_to(tp, P.NON_EXISTENT)
    assert tp not in table and len(table) == 0


def test_refused_move_is_logged_and_not_applied(caplog: pytest.LogCaptureFixture) -> None:
    table = new_partition_states()
    tp = ("t", 3)
    table.transition_to(tp, P.NEW)
    with caplog.at_level(logging.WARNING, logger="strom.cluster.state_change"):
        assert not table.transition_to(tp, P.NON_EXISTENT, "delete without going offline")
    assert table.get(tp) is P.NEW
    (record,) = caplog.records
    message = record.getMessage()
    assert "refused partition state change" in message
    assert "NEW -> NON_EXISTENT" in message and "delete without going offline" in message


def test_online_partition_cannot_become_new_again() -> None:
    table = new_partition_states()
    tp = ("t", 0)
    table.initialize(tp, P.ONLINE)
    assert not table.allowed(tp, P.NEW)
    assert not table.transition_to(tp, P.NEW)
    assert table.get(tp) is P.ONLINE


def test_replica_deletion_path() -> None:
    table = new_replica_states()
    r = PartitionReplica("t", 0, 2)
    assert table.transition_to(r, R.NEW)
    assert table.transition_to(r, R.ONLINE)
    # deletion never starts from Online: the replica goes offline first
    assert not table.transition_to(r, R.REPLICA_DELETION_STARTED)
    assert table.transition_to(r, R.OFFLINE)
    assert table.transition_to(r, R.REPLICA_DELETION_STARTED)
    assert not table.transition_to(r, R.NON_EXISTENT)  # not before the deletion succeeded
    assert table.transition_to(r, R.REPLICA_DELETION_SUCCESSFUL)
    assert table.transition_to(r, R.NON_EXISTENT)
    assert r not in table


def test_ineligible_replica_returns_online() -> None:
    table = new_replica_states()
    r = PartitionReplica("t", 1, 4)
    table.initialize(r, R.OFFLINE)
    assert table.transition_to(r, R.REPLICA_DELETION_INELIGIBLE)
    assert not table.transition_to(r, R.REPLICA_DELETION_SUCCESSFUL)
    assert table.transition_to(r, R.ONLINE)


def test_transition_all_reports_only_the_moved_keys() -> None:
    table = new_replica_states()
    a, b = PartitionReplica("t", 0, 1), PartitionReplica("t", 0, 2)
    table.initialize(a, R.ONLINE)
    table.initialize(b, R.NEW)
    assert table.transition_all([a, b], R.NEW) == []  # both already exist
    assert table.transition_all([a, b], R.OFFLINE) == [a, b]
    assert table.keys_in(R.OFFLINE) == [a, b]


def test_forget_and_initialize_bypass_the_rules() -> None:
    table = new_replica_states()
    r = PartitionReplica("t", 0, 1)
    table.initialize(r, R.REPLICA_DELETION_INELIGIBLE)
    table.forget([r, PartitionReplica("t", 9, 9)], "topic gone")
    assert r not in table
    table.initialize(r, R.NON_EXISTENT)
    assert r not in table


def test_table_needs_an_entry_for_every_state() -> None:
    with pytest.raises(ValueError, match="ONLINE"):
        StateTable("partition", {P.NEW: frozenset({P.NON_EXISTENT})}, P.NON_EXISTENT)


def test_partition_state_at_failover() -> None:
    live = {1, 2}
    assert partition_state.state_at_failover(None, live) is P.NEW
    assert partition_state.state_at_failover(LeaderAndIsr(1, 3, (1, 2)), live) is P.ONLINE
    assert partition_state.state_at_failover(LeaderAndIsr(3, 3, (3,)), live) is P.OFFLINE
    assert partition_state.state_at_failover(LeaderAndIsr(NO_LEADER, 4, (3,)), live) is P.OFFLINE
    assert partition_state.state_after_election(NO_LEADER) is P.OFFLINE
    assert partition_state.state_after_election(2) is P.ONLINE


def test_replica_state_at_failover() -> None:
    assert replica_state.state_at_failover(1, {1, 2}) is R.ONLINE
    assert replica_state.state_at_failover(3, {1, 2}) is R.OFFLINE


@given(st.lists(st.sampled_from(list(R)), max_size=40))
def test_replica_table_follows_the_rule_book(moves: list[ReplicaState]) -> None:
    """Against a model: each move lands exactly when Kafka's table allows it, otherwise nothing changes."""
    table = new_replica_states()
    r = PartitionReplica("t", 0, 0)
    model = R.NON_EXISTENT
    for target in moves:
        moved = table.transition_to(r, target)
        assert moved == ((model, target) in REPLICA_EDGES)
        if moved:
            model = target
        assert table.get(r) is model
        assert (r in table) == (model is not R.NON_EXISTENT)


@given(st.lists(st.tuples(st.integers(0, 3), st.sampled_from(list(P))), max_size=60))
def test_partition_table_keys_are_independent(moves: list[tuple[int, PartitionState]]) -> None:
    table = new_partition_states()
    model = dict.fromkeys(range(4), P.NON_EXISTENT)
    for partition, target in moves:
        tp = ("t", partition)
        assert table.transition_to(tp, target) == ((model[partition], target) in PARTITION_EDGES)
        if (model[partition], target) in PARTITION_EDGES:
            model[partition] = target
        assert {p: table.get(("t", p)) for p in range(4)} == model
    assert len(table) == sum(1 for s in model.values() if s is not P.NON_EXISTENT)
