"""Iceberg topics' table maintenance and lifecycle on a real SQL catalog (SQLite) and local warehouse:
compaction and snapshot expiry racing the writers of three partitions keep every row exactly once and
each partition's next offset; a table of an earlier topic of the same name is moved aside; a deleted
topic's tables are dropped and never written again."""

from __future__ import annotations

import contextlib
import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest
from pyiceberg.exceptions import CommitFailedException
from pyiceberg.table import FileScanTask
from tests.unit.test_lake_tables import key_value_rows, lake_tables, racing_writers, table_pairs

from strom.lake.maintenance import MaintenanceSettings, maintain
from strom.lake.tables import NUM_RETRIES, StaleTopic, TableRef
from strom.lake.translate import KEY_VALUE

SETTINGS = MaintenanceSettings(min_files=3, target_file_bytes=64 * 1024 * 1024, snapshot_retention_ms=0)


def test_compaction_and_expiry_racing_writers_keep_rows_and_offsets(tmp_path: Path) -> None:
    ref = TableRef("busy", KEY_VALUE)
    lake_tables(tmp_path).table(ref)
    compacted = threading.Event()  # a rewrite committed while a writer had a commit still to make
    writers = racing_writers(tmp_path, ref, 60, 3, hold=compacted)
    maintainer = lake_tables(tmp_path)
    rewritten = 0
    while any(t.is_alive() for t in writers):
        # A pass whose every attempt lost to the writers fails; the broker's maintainer tries again later.
        with contextlib.suppress(CommitFailedException):
            done = maintain(maintainer, ref, SETTINGS, int(time.time() * 1000)).rewritten_files
            rewritten += done
            if done:
                compacted.set()
        time.sleep(0.01)
    assert compacted.is_set(), "no compaction committed while the writers ran"
    for t in writers:
        t.join()
    rewritten += maintain(maintainer, ref, SETTINGS, int(time.time() * 1000) + 1).rewritten_files
    assert rewritten >= SETTINGS.min_files
    assert table_pairs(lake_tables(tmp_path), ref) == [(p, o) for p in range(3) for o in range(60)]
    table = maintainer.table(ref)
    assert len(table.metadata.snapshots) == 1
    assert len(list(table.scan().plan_files())) < SETTINGS.min_files  # 60 appends: 60 files at first
    assert maintainer.next_offsets(ref) == {0: 60, 1: 60, 2: 60}


def test_an_earlier_topics_table_is_moved_aside_and_a_deleted_topics_never_comes_back(tmp_path: Path) -> None:
    tables = lake_tables(tmp_path)
    old = TableRef("reborn", KEY_VALUE, topic_id="A")
    tables.append(old, 0, 5, key_value_rows(0, 0, 5))
    new = TableRef("reborn", KEY_VALUE, topic_id="B")
    with pytest.raises(StaleTopic):
        tables.table(new)  # not before it is claimed
    tables.claim(new)
    assert tables.next_offsets(new) == {}  # the topic created again starts from offset 0
    assert table_pairs(lake_tables(tmp_path), TableRef("reborn~A", KEY_VALUE)) == [(0, o) for o in range(5)]
    tables.append(new, 0, 2, key_value_rows(0, 0, 2))
    with pytest.raises(StaleTopic):
        tables.append(old, 0, 9, key_value_rows(0, 5, 4))  # a deposed writer of the earlier topic
    assert tables.drop(new) and not tables.exists(new)
    with pytest.raises(StaleTopic):
        tables.append(new, 0, 4, key_value_rows(0, 2, 2))  # a round still in flight at the deletion
    assert not tables.exists(new)


def test_a_deleted_topics_table_moved_aside_before_the_deletion_was_seen_is_dropped(tmp_path: Path) -> None:
    # A broker that leads the topic created again, and never translated the deleted one, moves the
    # deleted topic's table aside; the broker that sees the deletion drops it there.
    old = TableRef("reborn", KEY_VALUE, topic_id="A")
    lake_tables(tmp_path).append(old, 0, 5, key_value_rows(0, 0, 5))
    new = TableRef("reborn", KEY_VALUE, topic_id="B")
    lake_tables(tmp_path).claim(new)
    aside = TableRef("reborn~A", KEY_VALUE)
    files = [Path(task.file.file_path.removeprefix("file://")) for task in tables_scan(tmp_path, aside)]
    assert files and all(path.exists() for path in files)
    assert lake_tables(tmp_path).drop(old)
    assert not lake_tables(tmp_path).exists(aside)
    assert not any(path.exists() for path in files)


def tables_scan(tmp_path: Path, ref: TableRef) -> list[FileScanTask]:
    return list(lake_tables(tmp_path).table(ref).scan().plan_files())


def _files_in(tmp_path: Path) -> set[Path]:
    return {p for p in (tmp_path / "iceberg" / "warehouse").rglob("*") if p.is_file()}


def test_a_refused_commits_files_are_removed_once_old_and_the_moved_aside_tables_stay(tmp_path: Path) -> None:
    tables = lake_tables(tmp_path)
    old = TableRef("orphans", KEY_VALUE, topic_id="A")
    tables.append(old, 0, 4, key_value_rows(0, 0, 4))
    new = TableRef("orphans", KEY_VALUE, topic_id="B")
    tables.claim(new)  # the earlier topic's table, moved aside, keeps its location: the new one's too
    tables.append(new, 0, 3, key_value_rows(0, 0, 3))
    kept = _files_in(tmp_path)
    stale = tables.table(new)
    tables.append(new, 0, 6, key_value_rows(0, 3, 3))
    # a writer whose snapshot another commit replaced: refused
    with pytest.raises(CommitFailedException), stale.transaction() as txn:
        txn.set_properties({NUM_RETRIES: "0"})
        txn.append(key_value_rows(0, 3, 3))
    written = _files_in(tmp_path)
    now = int(time.time() * 1000)

    settings = replace(SETTINGS, snapshot_retention_ms=-1, orphan_file_age_ms=60_000)
    assert maintain(tables, new, settings, now).deleted_orphans == []  # none older than a minute yet
    removed = maintain(tables, new, replace(settings, orphan_file_age_ms=0), now + 1_000).deleted_orphans
    assert removed and {Path(p) for p in removed} <= written - kept  # only what the refused commit wrote
    left = _files_in(tmp_path)
    assert kept <= left and written - left == {Path(p) for p in removed}
    assert table_pairs(lake_tables(tmp_path), new) == [(0, o) for o in range(6)]
    assert table_pairs(lake_tables(tmp_path), TableRef("orphans~A", KEY_VALUE)) == [(0, o) for o in range(4)]
