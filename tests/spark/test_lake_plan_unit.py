"""The seam arithmetic and options of a read across an Iceberg table and the log (pure)."""

from __future__ import annotations

import pytest

from strom.spark.errors import KafkaOptionError
from strom.spark.lake_plan import lake_earliest, parse_lake_options, split_at_seams
from strom.spark.planning import DataLossError, OffsetRange

TP = ("t", 0)


def split(start: int, end: int, log_start: int, seam: int | None, fail: bool = True) -> tuple[list, list]:
    seams = {} if seam is None else {TP: seam}
    return split_at_seams({TP: start}, {TP: end}, {TP: log_start}, seams, fail_on_data_loss=fail)


def test_table_below_the_seam_log_from_it() -> None:
    assert split(0, 150, 100, 100) == ([OffsetRange("t", 0, 0, 100)], [OffsetRange("t", 0, 100, 150)])
    # The log still has records the table has too: they are read once, from the table.
    assert split(0, 150, 80, 100) == ([OffsetRange("t", 0, 0, 100)], [OffsetRange("t", 0, 100, 150)])
    assert split(120, 150, 100, 100) == ([], [OffsetRange("t", 0, 120, 150)])
    assert split(10, 60, 100, 100) == ([OffsetRange("t", 0, 10, 60)], [])
    assert split(100, 100, 100, 100) == ([], [])


def test_a_gap_between_table_and_log_is_data_loss() -> None:
    with pytest.raises(DataLossError, match="Cannot fetch offsets 50 to 79 of t-0"):
        split(0, 150, 80, 50)
    assert split(0, 150, 80, 50, fail=False) == (
        [OffsetRange("t", 0, 0, 50)],
        [OffsetRange("t", 0, 80, 150)],
    )
    # A range that ends before the gap loses nothing.
    assert split(0, 40, 80, 50) == ([OffsetRange("t", 0, 0, 40)], [])


def test_partitions_without_a_seam_read_the_log_as_before() -> None:
    assert split(5, 30, 5, None) == ([], [OffsetRange("t", 0, 5, 30)])
    with pytest.raises(DataLossError):
        split(0, 30, 5, None)


def test_a_gone_partition_or_offsets_backwards_are_data_loss() -> None:
    with pytest.raises(DataLossError, match="is gone"):
        split_at_seams({TP: 0}, {TP: 10}, {}, {TP: 5}, fail_on_data_loss=True)
    with pytest.raises(DataLossError, match="changed from 20 to 10"):
        split(20, 10, 0, 5)


def test_earliest_starts_at_zero_where_the_table_has_rows() -> None:
    resolved = {("t", 0): 100, ("t", 1): 7, ("u", 0): 3}
    assert lake_earliest(resolved, {("t", 0), ("u", 0)}, {("t", 0): 120, ("t", 1): 9}) == {
        ("t", 0): 0,
        ("t", 1): 7,  # not asked to start at earliest
        ("u", 0): 3,  # no table rows
    }


def test_options() -> None:
    assert parse_lake_options({}) is None
    assert parse_lake_options({"strom.iceberg.history": "false"}) is None
    with pytest.raises(KafkaOptionError, match=r"strom\.iceberg\.catalog\.uri"):
        parse_lake_options({"strom.iceberg.history": "true"})
    with pytest.raises(KafkaOptionError, match=r"catalog\.type"):
        parse_lake_options(
            {
                "strom.iceberg.history": "true",
                "strom.iceberg.catalog.uri": "x",
                "strom.iceberg.catalog.type": "hive",
            }
        )
    rest = parse_lake_options(
        {
            "strom.iceberg.history": "true",
            "strom.iceberg.catalog.type": "rest",
            "strom.iceberg.catalog.uri": "http://127.0.0.1:8181",
            "strom.iceberg.warehouse": "s3://warehouse",
            "strom.iceberg.catalog.property.rest.sigv4-enabled": "true",
        }
    )
    assert rest is not None
    assert rest.catalog == {
        "type": "rest",
        "uri": "http://127.0.0.1:8181",
        "warehouse": "s3://warehouse",
        "rest.sigv4-enabled": "true",
    }
