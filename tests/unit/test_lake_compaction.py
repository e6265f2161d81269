"""Iceberg table maintenance's pure decisions: which small files are rewritten together, which snapshots
expire, which files only expired snapshots name; and the next offsets, which the table property keeps
through expiry."""

from __future__ import annotations

from strom.lake import compaction, offsets
from strom.lake.compaction import DataFileInfo, expired_snapshots, plan_rewrites, unreferenced


def _files(partition: str, *sizes: int) -> list[DataFileInfo]:
    return [DataFileInfo(partition, f"{partition}/{i}.parquet", size) for i, size in enumerate(sizes)]


def test_small_files_of_one_partition_are_grouped_up_to_the_target_size() -> None:
    files = [*_files("h1", 10, 10, 10, 500, 10), *_files("h2", 10, 10), *_files("h3", 60, 60, 10)]
    groups = plan_rewrites(files, min_files=3, target_file_bytes=100)
    paths = [[f.path for f in g] for g in groups]
    # h1: the 500-byte file is not small; h2 has too few small files; h3's 60+60 exceed the target.
    assert paths == [["h1/0.parquet", "h1/1.parquet", "h1/2.parquet", "h1/4.parquet"]]
    assert plan_rewrites(files, min_files=2, target_file_bytes=100)[1:] == [
        _files("h2", 10, 10),
        [DataFileInfo("h3", "h3/1.parquet", 60), DataFileInfo("h3", "h3/2.parquet", 10)],
    ]


def test_one_file_is_never_rewritten_alone() -> None:
    assert plan_rewrites(_files("h", 1), min_files=1, target_file_bytes=100) == []


def test_snapshots_older_than_the_retention_expire_but_never_the_current_one() -> None:
    snapshots = [(1, 1_000), (2, 2_000), (3, 3_000), (4, 9_500)]
    assert expired_snapshots(snapshots, 4, now_ms=10_000, retention_ms=7_500) == [1, 2]
    assert expired_snapshots(snapshots, 2, now_ms=100_000, retention_ms=0) == [1, 3, 4]
    assert expired_snapshots(snapshots, 4, now_ms=100_000, retention_ms=-1) == []


def test_only_files_no_kept_snapshot_names_are_deleted() -> None:
    expired = ["m1.avro", "a.parquet", "b.parquet", "list1.avro"]
    kept = ["m1.avro", "b.parquet", "c.parquet", "list2.avro"]
    assert unreferenced(expired, kept) == ["a.parquet", "list1.avro"]


def test_next_offsets_come_from_the_table_property_before_any_summary() -> None:
    summaries = [{offsets.SUMMARY_KEY: offsets.render({0: 3})}]
    properties = {offsets.PROPERTY_KEY: offsets.render({0: 7, 1: 2})}
    assert offsets.recorded(properties, summaries) == {0: 7, 1: 2}
    # A table written before the property: its summaries decide; expired ones are simply absent.
    assert offsets.recorded({}, summaries) == {0: 3}
    assert offsets.recorded({}, []) == {}


def test_orphans_are_unnamed_files_older_than_the_bound() -> None:
    listed = [("t/data/a.parquet", 1_000), ("t/data/b.parquet", 1_000), ("t/data/young.parquet", 9_500),
              ("t/metadata/v1.metadata.json", 500), ("t/metadata/v2.metadata.json", 2_000)]  # fmt: skip
    named = ["t/data/a.parquet", "t/metadata/v2.metadata.json"]
    assert compaction.orphans(listed, named, now_ms=10_000, min_age_ms=5_000) == [
        "t/data/b.parquet",
        "t/metadata/v1.metadata.json",
    ]
    assert compaction.orphans(listed, named, now_ms=10_000, min_age_ms=0) == [
        "t/data/b.parquet",
        "t/data/young.parquet",
        "t/metadata/v1.metadata.json",
    ]
    assert compaction.orphans(listed, named, now_ms=10_000, min_age_ms=-1) == []


def test_table_locations_share_when_one_holds_the_other() -> None:
    assert compaction.shares_location("b/w/strom.db/t", "b/w/strom.db/t/")
    assert compaction.shares_location("b/w/strom.db/t", "b/w/strom.db/t/old")
    assert compaction.shares_location("b/w/strom.db/t/old", "b/w/strom.db/t")
    assert not compaction.shares_location("b/w/strom.db/t", "b/w/strom.db/t~dlq")
    assert not compaction.shares_location("b/w/strom.db/t~dlq", "b/w/strom.db/t")
