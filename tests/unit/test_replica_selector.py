"""KIP-392's choice of the replica a consumer reads from (strom.broker.replication.replica_selector)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from strom._util.errors import ConfigError
from strom.broker.config import BrokerConfig
from strom.broker.replication.replica_selector import (
    LEADER_SELECTOR,
    RACK_AWARE_SELECTOR,
    ReplicaView,
    check_selector,
    preferred_read_replica,
    select_rack_aware,
)

LEADER = ReplicaView(0, "R1", 0, 100, 0)


def view(broker: int, rack: str | None, leo: int = 100, behind_ms: int = 0, **kw: object) -> ReplicaView:
    return ReplicaView(broker, rack, 0, leo, behind_ms, **kw)  # type: ignore[arg-type]


def choose(rack: str | None, followers: list[ReplicaView], offset: int = 50) -> int:
    return preferred_read_replica(RACK_AWARE_SELECTOR, rack, LEADER, followers, offset)


def test_follower_in_the_client_rack_is_preferred() -> None:
    assert choose("R2", [view(1, "R2"), view(2, "R3")]) == 1
    assert choose("R3", [view(1, "R2"), view(2, "R3")]) == 2


def test_leader_when_it_is_in_the_client_rack_or_nobody_is() -> None:
    followers = [view(1, "R2"), view(2, "R1")]
    assert choose("R1", followers) == -1  # the leader is in R1: no redirection even if a follower is too
    assert choose("R9", followers) == -1
    assert choose("", followers) == -1
    assert choose(None, followers) == -1


def test_only_in_sync_live_replicas_holding_the_offset_are_candidates() -> None:
    assert choose("R2", [view(1, "R2", in_sync=False)]) == -1
    assert choose("R2", [view(1, "R2", alive=False)]) == -1
    assert choose("R2", [view(1, "R2", leo=49)], offset=50) == -1
    assert choose("R2", [view(1, "R2", leo=50)], offset=50) == 1  # its log end offset: it can answer
    assert choose("R2", [ReplicaView(1, "R2", 60, 100, 0)], offset=50) == -1  # below its log start


def test_most_caught_up_then_most_recently_caught_up_then_lowest_id() -> None:
    assert choose("R2", [view(1, "R2", leo=90), view(2, "R2", leo=95)]) == 2
    assert choose("R2", [view(1, "R2", behind_ms=500), view(2, "R2", behind_ms=10)]) == 2
    assert choose("R2", [view(2, "R2"), view(1, "R2")]) == 1


def test_no_selector_or_the_leader_selector_never_redirects() -> None:
    followers = [view(1, "R2")]
    assert preferred_read_replica(None, "R2", LEADER, followers, 0) == -1
    assert preferred_read_replica(LEADER_SELECTOR, "R2", LEADER, followers, 0) == -1


def test_selector_config_is_checked() -> None:
    assert check_selector(None) is None
    assert check_selector("") is None
    assert check_selector(RACK_AWARE_SELECTOR) == RACK_AWARE_SELECTOR
    with pytest.raises(ValueError, match="unknown class"):
        check_selector("com.example.Nearest")
    assert BrokerConfig({"replica.selector.class": RACK_AWARE_SELECTOR}).get("replica.selector.class")
    assert BrokerConfig({}).get("replica.selector.class") is None
    with pytest.raises(ConfigError, match=r"replica\.selector\.class"):
        BrokerConfig({"replica.selector.class": "Nearest"})


replicas = st.lists(
    st.builds(
        ReplicaView,
        st.integers(1, 6),
        st.sampled_from(["R1", "R2", "R3", None]),
        st.integers(0, 20),
        st.integers(0, 120),
        st.integers(0, 1000),
        st.booleans(),
        st.booleans(),
    ),
    max_size=6,
    unique_by=lambda r: r.broker_id,
)


@given(replicas, st.sampled_from(["R1", "R2", "R3", ""]), st.integers(0, 120))
def test_a_chosen_replica_is_an_eligible_follower_in_the_client_rack(
    followers: list[ReplicaView], rack: str, offset: int
) -> None:
    chosen = choose(rack, followers, offset)
    if chosen == -1:
        # the leader serves: it is in the rack, or no eligible follower is
        eligible = [
            f
            for f in followers
            if f.rack == rack and f.in_sync and f.alive and f.log_start_offset <= offset <= f.log_end_offset
        ]
        assert rack in ("", LEADER.rack) or not eligible
        return
    picked = next(f for f in followers if f.broker_id == chosen)
    assert picked.rack == rack != LEADER.rack
    assert picked.in_sync and picked.alive and picked.log_start_offset <= offset <= picked.log_end_offset
    same = [f for f in followers if f.rack == rack and f.in_sync and f.alive]
    assert all(
        f.log_end_offset <= picked.log_end_offset
        for f in same
        if f.log_start_offset <= offset <= f.log_end_offset
    )


def test_select_rack_aware_is_kafkas_rule_on_candidates() -> None:
    assert select_rack_aware("R2", LEADER, [view(1, "R2")]).broker_id == 1
    assert select_rack_aware("R2", LEADER, []) is LEADER
