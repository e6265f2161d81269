"""The server-side assignors of KIP-848 consumer groups: balance, stickiness, eligibility, ranges."""

from __future__ import annotations

from strom.coordinator.consumer import assignors
from strom.coordinator.consumer.records import Assignment


def _counts(result: dict[str, Assignment]) -> dict[str, int]:
    return {m: sum(len(ps) for ps in a.values()) for m, a in result.items()}


def _all(result: dict[str, Assignment]) -> list[tuple[str, int]]:
    return sorted((t, p) for a in result.values() for t, ps in a.items() for p in ps)


def test_uniform_balances_every_partition_once() -> None:
    subs = {f"m{i}": {"a", "b"} for i in range(3)}
    result = assignors.uniform(subs, {"a": 5, "b": 5}, {})
    assert _all(result) == [("a", p) for p in range(5)] + [("b", p) for p in range(5)]
    assert sorted(_counts(result).values()) == [3, 3, 4]


def test_uniform_is_sticky_when_a_member_joins() -> None:
    topics = {"t": 12}
    before = assignors.uniform({"m1": {"t"}, "m2": {"t"}}, topics, {})
    after = assignors.uniform({"m1": {"t"}, "m2": {"t"}, "m3": {"t"}}, topics, before)
    assert _counts(after) == {"m1": 4, "m2": 4, "m3": 4}
    # The old members keep 4 of their 6 each: only what the newcomer needs moves.
    for member in ("m1", "m2"):
        assert after[member]["t"] <= before[member]["t"]


def test_uniform_is_sticky_when_a_member_leaves() -> None:
    topics = {"t": 9}
    before = assignors.uniform({"m1": {"t"}, "m2": {"t"}, "m3": {"t"}}, topics, {})
    after = assignors.uniform({"m1": {"t"}, "m2": {"t"}}, topics, before)
    assert before["m1"]["t"] <= after["m1"]["t"] and before["m2"]["t"] <= after["m2"]["t"]
    assert sorted(_counts(after).values()) == [4, 5]


def test_uniform_gives_partitions_only_to_subscribers() -> None:
    subs = {"m1": {"a"}, "m2": {"a", "b"}, "m3": {"b"}}
    result = assignors.uniform(subs, {"a": 4, "b": 4}, {})
    assert "b" not in result["m1"] and "a" not in result["m3"]
    assert len(_all(result)) == 8
    assert max(_counts(result).values()) - min(_counts(result).values()) <= 1


def test_range_gives_contiguous_co_partitioned_ranges() -> None:
    subs = {"m2": {"a", "b"}, "m1": {"a", "b"}}
    result = assignors.range_assign(subs, {"a": 5, "b": 5}, {})
    assert result["m1"] == {"a": frozenset({0, 1, 2}), "b": frozenset({0, 1, 2})}
    assert result["m2"] == {"a": frozenset({3, 4}), "b": frozenset({3, 4})}


def test_choose_prefers_what_members_name_then_the_default() -> None:
    assert assignors.choose(["uniform", "range"], [None, None]) == "uniform"
    assert assignors.choose(["uniform", "range"], ["range", None, "range", "uniform"]) == "range"
    assert assignors.short_name("org.apache.kafka.coordinator.group.assignor.RangeAssignor") == "range"
    assert assignors.short_name("sticky") is None
