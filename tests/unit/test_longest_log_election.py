"""When every ISR member of a leaderless partition restarted: the controller waits for all of them (the
kept ISR and the members dropped from it for restarting) and elects the furthest log, by latest leader
epoch, then log end offset (strom.cluster.election.longest_log_leader)."""

from __future__ import annotations

from strom.cluster.election import (
    LeaderAndIsr,
    longest_log_leader,
    next_restarted,
    offline_partition_decision,
    trusted_isr,
    waiting_for_log_ends,
)
from strom.cluster.zk_paths import PartitionStateDoc

NEVER = lambda: False  # noqa: E731  (unclean election not allowed)


def test_the_furthest_log_leads_once_every_candidate_answered() -> None:
    state = LeaderAndIsr(-1, 4, (1,), restarted=(2,))
    restarted = {1, 2}
    assert longest_log_leader(state, [1, 2], {1, 2}, restarted, {2: (3, 4320)}) is None  # 1 not answered
    assert longest_log_leader(state, [1, 2], {1, 2}, restarted, {1: (3, 4110), 2: (3, 4320)}) == (2, [2])
    # The leader epoch first: a longer log of an older epoch loses.
    assert longest_log_leader(state, [1, 2], {1, 2}, restarted, {1: (4, 10), 2: (3, 4320)}) == (1, [1])
    # Equal logs: replica order.
    assert longest_log_leader(state, [2, 1], {1, 2}, restarted, {1: (3, 5), 2: (3, 5)}) == (2, [2])


def test_it_waits_for_every_candidate_and_for_members_that_did_not_restart() -> None:
    state = LeaderAndIsr(-1, 4, (1,), restarted=(2,))
    assert longest_log_leader(state, [1, 2], {1}, {1, 2}, {1: (3, 9)}) is None  # broker 2 not back
    # Broker 1 did not restart: its log may be whole, nothing is elected by length.
    assert longest_log_leader(state, [1, 2], {1, 2}, {2}, {1: (3, 9), 2: (3, 9)}) is None
    # One candidate alone leads (Kafka's last ISR member) without an answer.
    assert longest_log_leader(LeaderAndIsr(-1, 4, (1,)), [1, 2], {1}, {1}, {}) == (1, [1])


def test_restarted_members_are_recorded_until_a_leader_is_elected() -> None:
    current = LeaderAndIsr(-1, 4, (1, 2), restarted=(3,))
    assert next_restarted(current, -1, {2}, [1, 2, 3]) == (2, 3)
    assert next_restarted(current, -1, {4}, [1, 2, 3]) == (3,)  # not an ISR member
    assert next_restarted(current, 1, {2}, [1, 2, 3]) == ()
    assert next_restarted(current, -1, (), [1, 2]) == ()  # a reassignment removed broker 3


def test_seed_8239_in_the_decision() -> None:
    """ISR [1, 2], leader 1 gone, broker 2 restarted: wait for broker 1 (leader -1, ISR [1], broker 2
    recorded). Broker 1 comes back restarted too: recorded, still no leader until both answered."""
    first = offline_partition_decision(LeaderAndIsr(1, 3, (1, 2)), [1, 2], {0}, (), NEVER, {2})
    assert first == (-1, [1])
    kept = LeaderAndIsr(-1, 4, (1,), restarted=(2,))
    # Broker 1 seen restarted (not live in this first pass): the decision writes, to record it.
    assert offline_partition_decision(kept, [1, 2], {0, 2}, (), NEVER, {1}) == (-1, [1])
    both = LeaderAndIsr(-1, 5, (1,), restarted=(1, 2))
    assert offline_partition_decision(both, [1, 2], {0, 1, 2}, (), NEVER) is None
    answered = {1: (3, 4110), 2: (3, 4320)}
    assert offline_partition_decision(both, [1, 2], {0, 1, 2}, (), NEVER, log_ends=answered) == (2, [2])


def test_a_whole_member_still_leads_before_restarted_ones() -> None:
    state = LeaderAndIsr(-1, 4, (1, 2), restarted=(1,))
    assert offline_partition_decision(state, [1, 2], {1, 2}, (), NEVER) == (2, [2])


def test_the_state_znode_carries_restarted_replicas_only_when_there_are_some() -> None:
    doc = PartitionStateDoc(-1, 5, (1,), 3, (), (1, 2))
    assert PartitionStateDoc.decode(doc.encode()) == doc
    assert b"restarted" not in PartitionStateDoc(0, 5, (0, 1), 3).encode()


def test_answers_awaited_come_before_an_unclean_election() -> None:
    """With unclean election on, a partition whose candidates are all back waits for their answers
    instead of taking the first live replica."""
    both = LeaderAndIsr(-1, 5, (3,), restarted=(2, 3))
    always = lambda: True  # noqa: E731
    assert waiting_for_log_ends(both, [3, 2], {2, 3}, {2, 3}, {3: (1, 5)}) == [2]
    assert offline_partition_decision(both, [3, 2], {2, 3}, (), always) is None
    # A candidate away: nothing to wait for by answers, the unclean election may run.
    assert waiting_for_log_ends(both, [3, 2], {3}, {2, 3}, {}) == []
    assert offline_partition_decision(both, [3, 2], {3, 1}, (), always) == (3, [3])


def test_preferred_and_reassignment_choices_skip_restarted_members() -> None:
    both = LeaderAndIsr(-1, 5, (3, 1), restarted=(3,))
    assert trusted_isr(both) == [1]
