"""Leader election decisions of the controller (pure functions of replicas, ISR and live brokers)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from strom.broker.control.cluster_member import stale_broker_epoch
from strom.cluster.context import bounced_since
from strom.cluster.election import (
    NO_LEADER,
    ElectionType,
    LeaderAndIsr,
    controlled_shutdown_leader,
    election_needed,
    hit_by_broker_failure,
    offline_leader,
    offline_partition_decision,
    preferred_leader,
    preferred_leader_imbalanced,
    reassignment_leader,
)
from strom.cluster.zk_paths import BrokerRegistration


def _never() -> bool:
    raise AssertionError("the topic config must not be read when the leader is alive")


# --- offline election: clean ------------------------------------------------------------------------


def test_clean_election_takes_first_live_isr_replica_in_assignment_order() -> None:
    # replicas [1, 2, 3], leader 1 died; ISR lists 3 before 2 but assignment order wins
    assert offline_leader([1, 2, 3], [1, 3, 2], live={2, 3}) == (2, [2, 3])


def test_clean_election_refuses_out_of_sync_replicas() -> None:
    # 3 is alive but was not in the ISR: without unclean election the partition stays offline
    assert offline_leader([1, 2, 3], [1, 2], live={3}) is None


def test_isr_members_outside_the_replica_list_stay_in_the_isr() -> None:
    assert offline_leader([1, 2], [1, 2, 7], live={2, 7}) == (2, [2, 7])


# --- offline election: unclean ----------------------------------------------------------------------


def test_unclean_election_takes_first_live_replica_with_isr_of_one() -> None:
    assert offline_leader([1, 2, 3], [1, 2], live={3}, unclean_allowed=True) == (3, [3])


def test_unclean_election_still_prefers_a_live_isr_member() -> None:
    assert offline_leader([1, 2, 3], [1, 3], live={2, 3}, unclean_allowed=True) == (3, [3])


def test_unclean_election_with_no_live_replica() -> None:
    assert offline_leader([1, 2], [1], live={5}, unclean_allowed=True) is None


# --- the controller's decision after broker failures ------------------------------------------------


def test_live_leader_keeps_leading_and_dead_members_leave_the_isr() -> None:
    current = LeaderAndIsr(1, 4, (1, 2, 3))
    assert offline_partition_decision(current, [1, 2, 3], {1, 3}, set(), _never) == (1, [1, 3])


def test_dead_leader_is_replaced_from_the_isr() -> None:
    current = LeaderAndIsr(1, 4, (1, 2, 3))
    assert offline_partition_decision(current, [1, 2, 3], {2, 3}, set(), lambda: False) == (2, [2, 3])


def test_leader_in_controlled_shutdown_is_replaced_too() -> None:
    current = LeaderAndIsr(1, 4, (1, 2))
    assert offline_partition_decision(current, [1, 2], {1, 2}, {1}, lambda: False) == (2, [2])


def test_nobody_eligible_writes_no_leader_and_keeps_the_last_isr() -> None:
    current = LeaderAndIsr(1, 4, (1, 2))
    assert offline_partition_decision(current, [1, 2, 3], {3}, set(), lambda: False) == (NO_LEADER, [1, 2])


def test_offline_partition_stays_offline_without_a_write() -> None:
    current = LeaderAndIsr(NO_LEADER, 5, (1, 2))
    assert offline_partition_decision(current, [1, 2, 3], {3}, set(), lambda: False) is None


def test_offline_partition_comes_back_when_an_isr_member_returns() -> None:
    current = LeaderAndIsr(NO_LEADER, 5, (1, 2))
    assert offline_partition_decision(current, [1, 2, 3], {2, 3}, set(), lambda: False) == (2, [2])


def test_unclean_topic_elects_an_out_of_sync_replica() -> None:
    current = LeaderAndIsr(1, 4, (1,))
    assert offline_partition_decision(current, [1, 2], {2}, set(), lambda: True) == (2, [2])


def test_which_partitions_a_broker_failure_touches() -> None:
    assert hit_by_broker_failure(LeaderAndIsr(1, 0, (1, 2)), {1})
    assert hit_by_broker_failure(LeaderAndIsr(1, 0, (1, 2)), {2})
    assert hit_by_broker_failure(LeaderAndIsr(NO_LEADER, 0, (1, 2)), {9})  # retried at every change
    assert not hit_by_broker_failure(LeaderAndIsr(1, 0, (1, 2)), {3})


# --- preferred election -----------------------------------------------------------------------------


def test_preferred_election() -> None:
    assert preferred_leader([2, 1], [1, 2], {1, 2}) == (2, [1, 2])
    assert preferred_leader([2, 1], [1], {1, 2}) is None  # preferred replica out of sync
    assert preferred_leader([2, 1], [1, 2], {1}) is None  # preferred replica dead
    assert preferred_leader([], [1], {1}) is None


def test_election_needed() -> None:
    state = LeaderAndIsr(1, 0, (1, 2))
    assert not election_needed(ElectionType.PREFERRED, state, [1, 2], {1, 2})
    assert election_needed(ElectionType.PREFERRED, state, [2, 1], {1, 2})
    assert not election_needed(ElectionType.UNCLEAN, state, [2, 1], {1, 2})
    assert election_needed(ElectionType.UNCLEAN, state, [2, 1], {2})


def test_auto_rebalance_criterion() -> None:
    state = LeaderAndIsr(2, 0, (1, 2))
    assert preferred_leader_imbalanced(state, [1, 2], {1, 2}, reassigning=False)
    assert not preferred_leader_imbalanced(state, [1, 2], {1, 2}, reassigning=True)
    assert not preferred_leader_imbalanced(state, [1, 2], {2}, reassigning=False)  # preferred is dead
    assert not preferred_leader_imbalanced(LeaderAndIsr(2, 0, (2,)), [1, 2], {1, 2}, reassigning=False)
    assert not preferred_leader_imbalanced(LeaderAndIsr(1, 0, (1, 2)), [1, 2], {1, 2}, reassigning=False)


# --- reassignment and controlled shutdown leaders ----------------------------------------------------


def test_reassignment_leader_comes_from_the_targets() -> None:
    assert reassignment_leader([4, 5], [1, 5, 4], {1, 4, 5}) == (4, [1, 5, 4])
    assert reassignment_leader([4, 5], [1], {1, 4, 5}) is None


def test_controlled_shutdown_leader_skips_stopping_brokers() -> None:
    assert controlled_shutdown_leader([1, 2, 3], [1, 2, 3], {1, 2, 3}, {1, 2}) == (3, [3])
    assert controlled_shutdown_leader([1, 2], [1, 2], {1, 2}, {1, 2}) is None


# --- properties -------------------------------------------------------------------------------------

brokers = st.integers(0, 7)


@st.composite
def partitions(draw: st.DrawFn) -> tuple[list[int], list[int], set[int]]:
    replicas = draw(st.lists(brokers, min_size=1, max_size=5, unique=True))
    isr = draw(st.lists(st.sampled_from(replicas), min_size=1, unique=True))
    live = draw(st.sets(brokers))
    return replicas, isr, live


@given(partitions(), st.booleans())
def test_offline_election_properties(p: tuple[list[int], list[int], set[int]], unclean: bool) -> None:
    replicas, isr, live = p
    result = offline_leader(replicas, isr, live, unclean)
    live_isr = [b for b in isr if b in live]
    if result is None:
        assert not live_isr
        assert not unclean or not any(b in live for b in replicas)
        return
    leader, new_isr = result
    assert leader in live and leader in new_isr
    assert all(b in live for b in new_isr)
    if live_isr:  # clean: the leader is the first replica, in assignment order, that is in sync
        assert leader == next(b for b in replicas if b in live_isr)
        assert sorted(new_isr) == sorted(live_isr)
    else:  # unclean: a replica that may have missed records, alone in the ISR
        assert unclean and new_isr == [leader]


@given(partitions(), st.sets(brokers), st.booleans())
def test_offline_partition_decision_properties(
    p: tuple[list[int], list[int], set[int]], shutting_down: set[int], unclean: bool
) -> None:
    replicas, isr, live = p
    current = LeaderAndIsr(isr[0], 3, tuple(isr))
    decision = offline_partition_decision(current, replicas, live, shutting_down, lambda: unclean)
    if decision is None:
        return
    leader, new_isr = decision
    if leader == NO_LEADER:
        assert new_isr == isr  # the last ISR is kept for a returning member
    else:
        assert (leader in live and leader not in shutting_down) or leader == current.leader
        assert set(new_isr) <= live and leader in new_isr


@given(partitions(), st.sets(brokers))
def test_a_leaderless_partition_keeps_a_restarted_member_only_when_no_other_is_left(
    p: tuple[list[int], list[int], set[int]], bounced: set[int]
) -> None:
    replicas, isr, live = p
    current = LeaderAndIsr(isr[0], 3, tuple(isr))
    decision = offline_partition_decision(current, replicas, live - bounced, set(), lambda: False, bounced)
    if decision is not None and decision[0] == NO_LEADER:
        others = [b for b in isr if b not in bounced]
        assert decision[1] == (others or isr)


def test_a_bounced_member_does_not_become_the_last_isr_of_a_leaderless_partition() -> None:
    """Leader 0 dead (session expired), 1 restarted: the partition waits for 0, whose log is whole,
    and 1 cannot lead it on its return; once 0 is back it leads again."""
    current = LeaderAndIsr(0, 2, (0, 1))
    assert offline_partition_decision(current, [0, 1], {2}, set(), lambda: False, {1}) == (NO_LEADER, [0])
    waiting = LeaderAndIsr(NO_LEADER, 3, (0,))
    assert offline_partition_decision(waiting, [0, 1], {1, 2}, set(), lambda: False) is None
    assert offline_partition_decision(waiting, [0, 1], {0, 1, 2}, set(), lambda: False) == (0, [0])
    # Every member restarted: the last ISR stays (Kafka's rule), one of them leads on its return.
    alone = LeaderAndIsr(1, 2, (1,))
    assert offline_partition_decision(alone, [0, 1], {2}, set(), lambda: False, {1}) == (NO_LEADER, [1])
    # Already leaderless with a member that restarted since: it leaves the ISR all the same.
    both = LeaderAndIsr(NO_LEADER, 3, (0, 1))
    assert offline_partition_decision(both, [0, 1], {2}, set(), lambda: False, {1}) == (NO_LEADER, [0])


@given(partitions())
def test_preferred_election_properties(p: tuple[list[int], list[int], set[int]]) -> None:
    replicas, isr, live = p
    result = preferred_leader(replicas, isr, live)
    assert (result is not None) == (replicas[0] in live and replicas[0] in isr)
    if result is not None:
        assert result[0] == replicas[0] and set(result[1]) <= live


def test_a_controller_request_for_an_earlier_registration_is_stale() -> None:
    assert stale_broker_epoch(5, None)  # this process has not registered yet
    assert stale_broker_epoch(5, 9)  # meant for the registration before ours
    assert not stale_broker_epoch(9, 9)
    assert not stale_broker_epoch(-1, None)  # an older request version carries no epoch


def test_brokers_registered_since_the_last_controller_took_them_in_are_bounced() -> None:
    registered = {b: BrokerRegistration(b, "h", 1, None, epoch) for b, epoch in ((1, 10), (2, 20), (3, 30))}
    assert bounced_since({1: 10, 2: 20, 3: 30}, registered) == set()
    assert bounced_since({1: 10, 2: 12, 3: 30}, registered) == {2}
    assert bounced_since({1: 10, 2: 20}, registered) == {3}  # not taken in by any controller yet
    assert bounced_since(None, registered) == set()  # nothing recorded: registrations trusted
