"""Pure unit tests of strom.spark planning and the murmur2 partitioner (no JVM, no broker)."""

from __future__ import annotations

import itertools
import random
import warnings

import pytest

with warnings.catch_warnings():
    # kafka-python loads its specs with importlib.resources' deprecated legacy API
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka.partitioner.default import murmur2 as kafka_python_murmur2

from strom.spark.partitioner import murmur2, partition_for_key
from strom.spark.planning import (
    DataLossError,
    OffsetRange,
    admit_min_rows,
    count_records,
    limit_offsets,
    plan_tasks,
    reconcile_start,
    split_range,
)


def test_murmur2_matches_kafka_python_and_java_vectors() -> None:
    rng = random.Random(7)
    for _ in range(3000):
        data = bytes(rng.getrandbits(8) for _ in range(rng.randint(0, 40)))
        assert murmur2(data) & 0xFFFFFFFF == kafka_python_murmur2(data)
    # Vectors from Kafka's own UtilsTest (signed Java ints).
    assert murmur2(b"21") == -973932308
    assert murmur2(b"foobar") == -790332482
    assert murmur2(b"a-little-bit-long-string") == -985981536


def test_partition_for_key_is_java_default_partitioner() -> None:
    for key in (b"user-1", b"user-2", b"", b"\xff" * 9):
        expected = (kafka_python_murmur2(key) & 0x7FFFFFFF) % 6
        assert partition_for_key(key, 6) == expected
    with pytest.raises(ValueError, match="positive"):
        partition_for_key(b"k", 0)


def test_limit_offsets_never_exceeds_cap_and_is_proportional() -> None:
    start = {("t", 0): 0, ("t", 1): 100, ("t", 2): 50}
    latest = {("t", 0): 1000, ("t", 1): 200, ("t", 2): 50}
    end = limit_offsets(start, latest, 110)
    assert count_records(start, end) == 110
    # One record each first (Spark's rule), then 108 shared as 999:99.
    assert end[("t", 0)] - 0 == 99
    assert end[("t", 1)] - 100 == 11
    assert end[("t", 2)] == 50


def test_limit_offsets_all_available_when_under_cap() -> None:
    start = {("t", 0): 5}
    latest = {("t", 0): 8, ("t", 1): 3}
    assert limit_offsets(start, latest, 100) == latest


@pytest.mark.parametrize("seed", range(30))
def test_limit_offsets_exact_and_bounded_random(seed: int) -> None:
    rng = random.Random(seed)
    start = {("t", p): rng.randint(0, 100) for p in range(rng.randint(1, 7))}
    latest = {tp: s + rng.randint(0, 50) for tp, s in start.items()}
    cap = rng.randint(1, 120)
    end = limit_offsets(start, latest, cap)
    waiting = sum(1 for tp in start if latest[tp] > start[tp])
    assert count_records(start, end) == min(max(cap, waiting), count_records(start, latest))
    assert all(start[tp] <= end[tp] <= latest[tp] for tp in start)
    # Spark's rule: every partition with a backlog advances.
    assert all(end[tp] > start[tp] for tp in start if latest[tp] > start[tp])


def test_limit_offsets_gives_a_small_backlog_its_record() -> None:
    """An exact proportional split would give partition 1 (1 of 31 records, cap 4) nothing until
    partition 0 drained; Spark gives it its record at once."""
    start = {("t", 0): 0, ("t", 1): 0, ("t", 2): 0}
    latest = {("t", 0): 30, ("t", 1): 1, ("t", 2): 0}
    assert limit_offsets(start, latest, 4) == {("t", 0): 3, ("t", 1): 1, ("t", 2): 0}
    # More partitions waiting than the cap: one record each, as Spark overshoots.
    assert limit_offsets(start, latest, 1) == {("t", 0): 1, ("t", 1): 1, ("t", 2): 0}


def test_admit_min_rows() -> None:
    assert admit_min_rows(10, 10, 0, 1000)
    assert not admit_min_rows(9, 10, 999, 1000)
    assert admit_min_rows(9, 10, 1000, 1000)
    assert not admit_min_rows(0, 10, 10_000, 1000)


def test_reconcile_reads_new_partitions_from_log_start() -> None:
    ranges = reconcile_start(
        {("t", 0): 5}, {("t", 0): 9, ("t", 1): 4}, {("t", 0): 0, ("t", 1): 0}, fail_on_data_loss=True
    )
    assert ranges == [OffsetRange("t", 0, 5, 9), OffsetRange("t", 1, 0, 4)]


def test_reconcile_data_loss_fails_or_skips() -> None:
    start, end, earliest = {("t", 0): 5}, {("t", 0): 20}, {("t", 0): 12}
    with pytest.raises(
        DataLossError, match=r"offset 5 of t-0.*earliest available offset is 12.*failOnDataLoss"
    ):
        reconcile_start(start, end, earliest, fail_on_data_loss=True)
    assert reconcile_start(start, end, earliest, fail_on_data_loss=False) == [OffsetRange("t", 0, 12, 20)]
    # Whole range deleted: an empty range, no error when skipping.
    assert reconcile_start(start, {("t", 0): 10}, earliest, fail_on_data_loss=False) == [
        OffsetRange("t", 0, 12, 12)
    ]


def test_reconcile_gone_partition_and_added_partition_with_deleted_head() -> None:
    with pytest.raises(DataLossError, match="t-1 is gone"):
        reconcile_start({}, {("t", 1): 3}, {}, fail_on_data_loss=True)
    assert reconcile_start({}, {("t", 1): 3}, {}, fail_on_data_loss=False) == []
    with pytest.raises(DataLossError, match="starts from 2 instead of 0"):
        reconcile_start({}, {("t", 1): 3}, {("t", 1): 2}, fail_on_data_loss=True)


def test_reconcile_offset_went_backwards() -> None:
    with pytest.raises(DataLossError, match="changed from 10 to 4"):
        reconcile_start({("t", 0): 10}, {("t", 0): 4}, {("t", 0): 0}, fail_on_data_loss=True)


def test_plan_tasks_one_per_non_empty_range_sorted() -> None:
    ranges = [OffsetRange("b", 0, 0, 5), OffsetRange("a", 1, 3, 3), OffsetRange("a", 0, 0, 2)]
    assert plan_tasks(ranges) == [OffsetRange("a", 0, 0, 2), OffsetRange("b", 0, 0, 5)]


def test_plan_tasks_min_partitions_splits_in_proportion() -> None:
    ranges = [OffsetRange("t", 0, 0, 900), OffsetRange("t", 1, 0, 100)]
    tasks = plan_tasks(ranges, min_partitions=10)
    assert len([t for t in tasks if t.partition == 0]) == 9
    assert len([t for t in tasks if t.partition == 1]) == 1
    assert sum(t.size for t in tasks) == 1000
    # Contiguous, no overlap.
    p0 = [t for t in tasks if t.partition == 0]
    assert all(a.until_offset == b.from_offset for a, b in itertools.pairwise(p0))
    assert plan_tasks(ranges, min_partitions=2) == ranges  # already enough tasks


@pytest.mark.parametrize("seed", range(30))
def test_plan_tasks_reaches_min_partitions(seed: int) -> None:
    rng = random.Random(seed)
    ranges = [OffsetRange("t", p, 0, rng.randint(50, 150)) for p in range(rng.randint(1, 6))]
    wanted = rng.randint(1, 40)
    tasks = plan_tasks(ranges, min_partitions=wanted)
    assert len(tasks) >= max(wanted, len(ranges))
    assert sum(t.size for t in tasks) == sum(r.size for r in ranges)
    three = [OffsetRange("t", 0, 0, 100), OffsetRange("t", 1, 0, 101), OffsetRange("t", 2, 0, 100)]
    assert len(plan_tasks(three, min_partitions=7)) == 7  # rounding each share alone would give 6


def test_plan_tasks_max_records_per_partition_and_tiny_ranges() -> None:
    tasks = plan_tasks([OffsetRange("t", 0, 10, 35)], max_records_per_partition=10)
    assert [(t.from_offset, t.until_offset) for t in tasks] == [(10, 18), (18, 26), (26, 35)]
    assert plan_tasks([OffsetRange("t", 0, 0, 2)], min_partitions=50) == split_range(
        OffsetRange("t", 0, 0, 2), 2
    )


def test_split_range_sizes_differ_by_at_most_one() -> None:
    parts = split_range(OffsetRange("t", 0, 7, 30), 4)
    sizes = [p.size for p in parts]
    assert sum(sizes) == 23 and max(sizes) - min(sizes) <= 1
