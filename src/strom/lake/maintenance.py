"""A table's maintenance through pyiceberg: small-file compaction, snapshot expiry, and the deletion of
the files only expired snapshots named. Blocking: the broker runs it on a worker thread.

**Compaction** (compaction.py decides which files). Each group of small files of one table partition is
read (with the table's current schema: columns added later are null in older files) and written back
as one file sorted by partition and offset, in one ``overwrite`` snapshot that deletes the group's
files and adds the new one: the same rows, no row twice, none lost. The commit carries the table's
next offsets in its summary as well (offsets.py; the table property, their authority, is left as it
is). Like the translator's append it requires the table's current snapshot to be the one read: if the
translator (or anyone) committed meanwhile, the catalog refuses the commit, and the group is planned
again on the new snapshot. A refused attempt leaves its written file unreferenced (an orphan).

**Expiry.** The snapshots older than the retention, except the current one, are removed from the
table's metadata; then every data file, manifest and manifest list that only they named is deleted.
The next offsets live in a table property (offsets.py), so expiry never loses where translation
resumes. A reader that planned a scan on an expired snapshot may find its files gone: the retention is
the longest read it supports.

**Orphan files** (compaction.py decides which). After expiry the table's location is listed (through
the table's pyarrow file system: a directory, or a bucket's prefix), then the files every snapshot
still kept names are gathered from a fresh load, with the current metadata file, the metadata log and
statistics files; a listed file none of them names, older than the bound, is deleted. Listing first
makes a commit landing in between harmless: its files are either too young or named. A table moved
aside for a topic created again (``<table>~<topic id>``, tables.py) keeps its location, which the new
table is given too: the tables named ``<table>~...`` whose locations share the table's count as kept.
Another table pointed into the location by hand is not known, and its files would be removed.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

from pyarrow.fs import FileSelector, FileType
from pyiceberg.exceptions import CommitFailedException, NoSuchTableError
from pyiceberg.expressions import AlwaysTrue
from pyiceberg.io.pyarrow import ArrowScan, PyArrowFileIO, _dataframe_to_data_files
from pyiceberg.manifest import ManifestFile
from pyiceberg.table import FileScanTask, Table
from pyiceberg.table.snapshots import Snapshot

from strom.lake import offsets
from strom.lake.compaction import (
    DataFileInfo,
    expired_snapshots,
    orphans,
    plan_rewrites,
    shares_location,
    unreferenced,
)
from strom.lake.config_defs import NAMESPACE
from strom.lake.tables import COMMIT_ATTEMPTS, LakeTables, TableRef, recorded_offsets

log = logging.getLogger(__name__)

# A pass stops after this many rewrites; the next pass goes on (bounds one pass's time and memory).
MAX_REWRITES_PER_PASS = 16


@dataclass(frozen=True)
class MaintenanceSettings:
    min_files: int  # strom.iceberg.compaction.min.files
    target_file_bytes: int  # strom.iceberg.compaction.target.file.bytes
    snapshot_retention_ms: int  # strom.iceberg.snapshot.retention.ms (-1: keep all)
    orphan_file_age_ms: int = -1  # strom.iceberg.orphan.file.age.ms (-1: keep orphans)


@dataclass
class MaintenanceResult:
    rewritten_files: int = 0  # small files replaced
    written_files: int = 0  # files written in their place
    expired_snapshots: int = 0
    deleted_files: list[str] = field(default_factory=list)
    deleted_orphans: list[str] = field(default_factory=list)


def maintain(
    tables: LakeTables, ref: TableRef, settings: MaintenanceSettings, now_ms: int
) -> MaintenanceResult:
    """One maintenance pass over one table, if it exists: compaction, expiry, then orphan removal."""
    result = MaintenanceResult()
    if not tables.exists(ref):
        return result
    for _ in range(MAX_REWRITES_PER_PASS):
        rewritten = _rewrite_one_group(tables, ref, settings)
        if rewritten is None:
            break
        result.rewritten_files += rewritten[0]
        result.written_files += rewritten[1]
    if settings.snapshot_retention_ms >= 0:
        result.expired_snapshots, result.deleted_files = _expire(tables, ref, settings, now_ms)
    if settings.orphan_file_age_ms >= 0:
        result.deleted_orphans = _remove_orphans(tables, ref, settings.orphan_file_age_ms, now_ms)
    return result


def _rewrite_one_group(
    tables: LakeTables, ref: TableRef, settings: MaintenanceSettings
) -> tuple[int, int] | None:
    """Rewrite the first group of small files as one file; (files removed, files added), or None."""
    for attempt in range(COMMIT_ATTEMPTS):
        table = tables.table(ref)
        if table.current_snapshot() is None:
            return None
        spec_id = table.metadata.default_spec_id
        tasks = {t.file.file_path: t for t in table.scan().plan_files() if not t.delete_files}
        infos = [
            DataFileInfo((t.file.spec_id, t.file.partition), path, t.file.file_size_in_bytes)
            for path, t in sorted(tasks.items())
            if t.file.spec_id == spec_id  # files of an earlier spec would be written under the new one
        ]
        groups = plan_rewrites(infos, settings.min_files, settings.target_file_bytes)
        if not groups:
            return None
        group = [tasks[f.path] for f in groups[0]]
        try:
            return len(group), _commit_rewrite(table, group)
        except CommitFailedException:
            if attempt == COMMIT_ATTEMPTS - 1:
                raise
            time.sleep(min(0.05 * (attempt + 1), 0.5))
    return None


def _commit_rewrite(table: Table, group: list[FileScanTask]) -> int:
    rows = ArrowScan(table.metadata, table.io, table.schema(), AlwaysTrue()).to_table(group)
    rows = rows.sort_by([("partition", "ascending"), ("offset", "ascending")])
    summary = {offsets.SUMMARY_KEY: offsets.render(recorded_offsets(table))}
    written = 0
    with (
        table.transaction() as txn,
        txn.update_snapshot(snapshot_properties=summary).overwrite() as overwrite,
    ):
        for task in group:
            overwrite.delete_data_file(task.file)
        for data_file in _dataframe_to_data_files(
            txn.table_metadata, rows, table.io, write_uuid=overwrite.commit_uuid
        ):
            overwrite.append_data_file(data_file)
            written += 1
    return written


def _expire(
    tables: LakeTables, ref: TableRef, settings: MaintenanceSettings, now_ms: int
) -> tuple[int, list[str]]:
    for attempt in range(COMMIT_ATTEMPTS):
        table = tables.table(ref)
        current = table.current_snapshot()
        snapshots = table.metadata.snapshots
        ids = expired_snapshots(
            ((s.snapshot_id, s.timestamp_ms) for s in snapshots),
            current.snapshot_id if current is not None else None,
            now_ms,
            settings.snapshot_retention_ms,
        )
        if not ids:
            return 0, []
        gone = set(ids)
        try:
            table.maintenance.expire_snapshots().by_ids(ids).commit()
        except CommitFailedException:
            if attempt == COMMIT_ATTEMPTS - 1:
                raise
            time.sleep(min(0.05 * (attempt + 1), 0.5))
            continue
        manifests: dict[str, list[str]] = {}
        expired = [p for s in snapshots if s.snapshot_id in gone for p in _files(table, s, manifests, False)]
        kept = [p for s in snapshots if s.snapshot_id not in gone for p in _files(table, s, manifests, True)]
        deleted = unreferenced(expired, kept)
        for path in deleted:
            try:
                table.io.delete(path)
            except Exception as exc:  # an orphan is harmless: say so and go on
                log.warning("%s: could not delete %s: %r", ref.name, path, exc)
        return len(ids), deleted
    return 0, []


def _remove_orphans(tables: LakeTables, ref: TableRef, min_age_ms: int, now_ms: int) -> list[str]:
    """Delete the table's orphan files older than ``min_age_ms``; their paths (without scheme)."""
    table = tables.table(ref)
    io = table.io
    if not isinstance(io, PyArrowFileIO):
        return []  # another FileIO: no listing to go by
    scheme, netloc, root = io.parse_location(table.location())
    fs = io.fs_by_scheme(scheme, netloc)
    listed = [
        (info.path, info.mtime_ns // 1_000_000)
        for info in fs.get_file_info(FileSelector(root, recursive=True, allow_not_found=True))
        if info.type == FileType.File and info.mtime_ns is not None
    ]
    referenced = {io.parse_location(p)[2] for t in _sharing(tables, ref, root) for p in _reachable(t)}
    found = orphans(listed, referenced, now_ms, min_age_ms)
    deleted = []
    for path in found:
        try:
            fs.delete_file(path)
            deleted.append(path)
        except Exception as exc:  # still an orphan: the next pass tries again
            log.warning("%s: could not delete orphan %s: %r", ref.name, path, exc)
    return deleted


def _sharing(tables: LakeTables, ref: TableRef, root: str) -> Iterator[Table]:
    """The table, loaded now, and its moved-aside tables (``<name>~...``) whose locations share its."""
    yield tables.table(ref)
    catalog = tables.catalog()
    for identifier in catalog.list_tables(NAMESPACE):
        if not identifier[-1].startswith(ref.name + "~"):
            continue
        try:
            other = catalog.load_table(identifier)
        except NoSuchTableError:
            continue  # dropped meanwhile: its files are no one's
        if shares_location(PyArrowFileIO.parse_location(other.location())[2], root):
            yield other


def _reachable(table: Table) -> Iterator[str]:
    """Every file the table's metadata names: its metadata files, statistics, and each kept snapshot's
    manifest list, manifests and data files (those its manifests record as deleted too)."""
    metadata = table.metadata
    yield table.metadata_location
    yield from (entry.metadata_file for entry in metadata.metadata_log)
    yield from (s.statistics_path for s in metadata.statistics)
    yield from (s.statistics_path for s in metadata.partition_statistics)
    manifests: dict[str, list[str]] = {}
    for snapshot in metadata.snapshots:
        yield from _files(table, snapshot, manifests, False)


def _files(table: Table, snapshot: Snapshot, cache: dict[str, list[str]], live_only: bool) -> Iterator[str]:
    """The manifest list, manifests and data files ``snapshot`` names (``live_only``: the data files it
    reads; else also those its manifests record as deleted)."""
    yield snapshot.manifest_list
    for manifest in snapshot.manifests(table.io):
        yield manifest.manifest_path
        yield from _data_files(table, manifest, cache, live_only)


def _data_files(
    table: Table, manifest: ManifestFile, cache: dict[str, list[str]], live_only: bool
) -> list[str]:
    key = f"{live_only}:{manifest.manifest_path}"
    paths = cache.get(key)
    if paths is None:
        entries = manifest.fetch_manifest_entry(table.io, discard_deleted=live_only)
        paths = cache[key] = [e.data_file.file_path for e in entries]
    return paths
