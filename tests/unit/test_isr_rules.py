"""The leader's replication rules as pure functions (strom.broker.replication.isr_rules): examples and
properties."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from strom.broker.replication.isr_rules import (
    FollowerState,
    can_join_isr,
    high_watermark_bound,
    out_of_sync_replicas,
    record_fetch,
    replication_outcome,
    under_min_isr,
)
from strom.protocol.errors import ErrorCode
from strom.storage.config import effective_min_isr


def test_effective_min_isr_is_capped_by_the_replicas_and_at_least_one() -> None:
    assert effective_min_isr(2, 3) == 2
    assert effective_min_isr(5, 3) == 3
    assert effective_min_isr(2, 1) == 1
    assert effective_min_isr(0, 3) == 1
    assert effective_min_isr(2, 0) == 1


@given(st.integers(0, 6), st.integers(0, 6), st.integers(1, 8))  # the setting is at least 1
def test_under_min_isr_is_the_isr_below_the_effective_min(isr_size: int, replicas: int, setting: int) -> None:
    expected = replicas > 0 and isr_size < effective_min_isr(setting, replicas)
    assert under_min_isr(isr_size, replicas, setting) == expected


def test_a_follower_at_the_leaders_end_is_caught_up_now() -> None:
    state = FollowerState(last_caught_up_ms=0)
    record_fetch(state, fetch_offset=10, log_start_offset=3, leader_leo=10, now_ms=500)
    assert (state.log_end_offset, state.log_start_offset, state.last_caught_up_ms) == (10, 3, 500)
    assert (state.last_fetch_leader_leo, state.last_fetch_ms) == (10, 500)


def test_a_follower_reaching_the_end_of_the_previous_fetch_was_caught_up_then() -> None:
    state = FollowerState(last_caught_up_ms=0)
    record_fetch(state, fetch_offset=5, log_start_offset=0, leader_leo=10, now_ms=100)
    assert state.last_caught_up_ms == 0  # behind the leader's end, and no previous fetch
    record_fetch(state, fetch_offset=10, log_start_offset=0, leader_leo=20, now_ms=300)
    assert state.last_caught_up_ms == 100  # it had everything the leader had at its previous fetch
    record_fetch(state, fetch_offset=15, log_start_offset=0, leader_leo=30, now_ms=400)
    assert state.last_caught_up_ms == 100  # not at 20 (the end at its previous fetch): no news


def test_out_of_sync_replicas_are_those_not_caught_up_for_longer_than_the_lag() -> None:
    followers = {1: FollowerState(last_caught_up_ms=1000), 2: FollowerState(last_caught_up_ms=4000)}
    assert out_of_sync_replicas([0, 1, 2], 0, followers, now_ms=11_000, lag_max_ms=10_000) == []
    assert out_of_sync_replicas([0, 1, 2], 0, followers, now_ms=11_001, lag_max_ms=10_000) == [1]
    assert out_of_sync_replicas([0, 1, 2, 3], 0, followers, now_ms=20_000, lag_max_ms=10_000) == [1, 2]


def test_joining_the_isr_needs_the_high_watermark_and_the_epoch_start() -> None:
    assert can_join_isr(follower_leo=10, high_watermark=10, leader_epoch_start_offset=8)
    assert not can_join_isr(follower_leo=9, high_watermark=10, leader_epoch_start_offset=8)
    # committed records may lie between the high watermark and the start of this leader's epoch
    assert not can_join_isr(follower_leo=10, high_watermark=10, leader_epoch_start_offset=12)


def test_high_watermark_bound_is_the_smallest_log_end_offset_of_the_isr() -> None:
    followers = {1: FollowerState(log_end_offset=7), 2: FollowerState(log_end_offset=4)}
    assert high_watermark_bound(0, 9, [0], followers) == 9
    assert high_watermark_bound(0, 9, [0, 1], followers) == 7
    assert high_watermark_bound(0, 9, [0, 1, 2], followers) == 4
    assert high_watermark_bound(0, 9, [0, 3], followers) == -1  # replica 3 has not fetched yet
    assert high_watermark_bound(0, 9, [0, 1], {1: FollowerState()}) == -1


@given(st.integers(0, 100), st.lists(st.integers(0, 100), max_size=5))
def test_high_watermark_bound_never_passes_a_member(leader_leo: int, ends: list[int]) -> None:
    followers = {i + 1: FollowerState(log_end_offset=e) for i, e in enumerate(ends)}
    bound = high_watermark_bound(0, leader_leo, [0, *followers], followers)
    assert bound == min([leader_leo, *ends])


def test_replication_outcome() -> None:
    assert replication_outcome(10, 10, isr_size=2, min_isr=2) == ErrorCode.NONE
    assert replication_outcome(9, 10, isr_size=2, min_isr=2) is None  # waiting
    assert replication_outcome(9, 10, isr_size=1, min_isr=2) == ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND
    # as Kafka's check: the high watermark passed the batch, but the ISR shrank below the minimum
    assert replication_outcome(10, 10, isr_size=1, min_isr=2) == ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND
