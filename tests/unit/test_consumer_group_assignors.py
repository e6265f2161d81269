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


def _racks(by_partition: dict[int, set[str]]) -> assignors.PartitionRacks:
    """One topic ``t``: partition -> the racks of its replicas."""
    return lambda topic, p: by_partition.get(p, set()) if topic == "t" else set()


def _in_rack(
    result: dict[str, Assignment], members: dict[str, str | None], racks: assignors.PartitionRacks
) -> int:
    return sum(1 for m, a in result.items() for t, ps in a.items() for p in ps if members[m] in racks(t, p))


def test_uniform_gives_members_the_partitions_of_their_rack() -> None:
    members = {"m1": "a", "m2": "b", "m3": "c"}
    racks = _racks({p: {"abc"[p % 3]} for p in range(6)})
    subs = {m: {"t"} for m in members}
    result = assignors.uniform(subs, {"t": 6}, {}, members, racks)
    assert {m: sorted(a["t"]) for m, a in result.items()} == {"m1": [0, 3], "m2": [1, 4], "m3": [2, 5]}
    # Partitions with replicas in two racks count for both.
    racks = _racks({p: {"a", "b"} if p < 4 else {"c"} for p in range(6)})
    result = assignors.uniform(subs, {"t": 6}, {}, members, racks)
    assert _counts(result) == {"m1": 2, "m2": 2, "m3": 2}
    assert _in_rack(result, members, racks) == 6


def test_uniform_moves_partitions_into_their_racks_once_then_is_sticky() -> None:
    members = {"m1": "a", "m2": "b", "m3": "c"}
    racks = _racks({p: {"abc"[p // 3]} for p in range(9)})
    subs = {m: {"t"} for m in members}
    blind = assignors.uniform(subs, {"t": 9}, {})  # as assigned before the members named racks
    assert _in_rack(blind, members, racks) < 9
    aware = assignors.uniform(subs, {"t": 9}, blind, members, racks)
    assert _in_rack(aware, members, racks) == 9 and _counts(aware) == {"m1": 3, "m2": 3, "m3": 3}
    assert assignors.uniform(subs, {"t": 9}, aware, members, racks) == aware


def test_balance_comes_before_racks() -> None:
    # Every replica in rack a: the member in rack b still gets its share.
    members: dict[str, str | None] = {"m1": "a", "m2": "b"}
    racks = _racks({p: {"a"} for p in range(6)})
    result = assignors.uniform({m: {"t"} for m in members}, {"t": 6}, {}, members, racks)
    assert _counts(result) == {"m1": 3, "m2": 3}
    # Four partitions in rack a, two in b, one member without a rack: within one of each other, with
    # the rack-b member on both rack-b partitions and the rack-a member on rack-a ones only.
    members = {"m1": "a", "m2": "b", "m3": None}
    racks = _racks({p: {"a"} if p < 4 else {"b"} for p in range(6)})
    result = assignors.uniform({m: {"t"} for m in members}, {"t": 6}, {}, members, racks)
    assert _counts(result) == {"m1": 2, "m2": 2, "m3": 2}
    assert result["m2"]["t"] == {4, 5} and result["m1"]["t"] <= {0, 1, 2, 3}


def test_uniform_without_racks_is_unchanged() -> None:
    subs = {f"m{i}": {"t"} for i in range(3)}
    racks = _racks({p: {"a"} for p in range(7)})
    plain = assignors.uniform(subs, {"t": 7}, {})
    assert assignors.uniform(subs, {"t": 7}, {}, dict.fromkeys(subs), racks) == plain
    members = {"m0": "a", "m1": "b", "m2": "c"}
    assert assignors.uniform(subs, {"t": 7}, {}, members, assignors.no_racks) == plain
