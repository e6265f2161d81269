"""What a table's maintenance does, decided from its file and snapshot lists. Pure.

**Small-file compaction.** Each commit of the translator adds at least one data file per hour of record
timestamps it covers, so a short ``strom.iceberg.target.lag.ms`` makes many small files. A data file
smaller than ``strom.iceberg.compaction.target.file.bytes`` is small; the small files of one table
partition (one hour; one partition spec) are packed, in the order given, into groups of at most that
many bytes together, and a group of at least ``strom.iceberg.compaction.min.files`` files is rewritten
as one (`plan_rewrites`). Files are never merged across table partitions.

**Snapshot expiry.** A snapshot older than ``strom.iceberg.snapshot.retention.ms`` is expired, except
the current one (`expired_snapshots`); -1 keeps them all. The files only expired snapshots name are
then deleted (`unreferenced`).

**Orphan files.** A file in the table's location that no snapshot still kept names (nor the table's
current or logged metadata files) is an orphan: written by a commit the catalog refused, or by a
writer killed between writing a round's files and committing them. It is deleted once older than
``strom.iceberg.orphan.file.age.ms`` (`orphans`), Iceberg's own rule for its orphan-file removal: a
younger file may belong to a commit still under way, which will name it. -1 keeps them all. The
locations compared are paths without their scheme (``bucket/key``, ``/dir/file``).
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class DataFileInfo:
    """One live data file of the table: its table partition (spec id and partition values), path, size."""

    partition: Hashable
    path: str
    size_bytes: int


def plan_rewrites(
    files: Sequence[DataFileInfo], min_files: int, target_file_bytes: int
) -> list[list[DataFileInfo]]:
    """The groups of small files to rewrite, each into one file of its table partition."""
    by_partition: dict[Hashable, list[DataFileInfo]] = {}
    for f in files:
        if f.size_bytes < target_file_bytes:
            by_partition.setdefault(f.partition, []).append(f)
    groups: list[list[DataFileInfo]] = []
    for small in by_partition.values():
        group: list[DataFileInfo] = []
        total = 0
        for f in small:
            if group and total + f.size_bytes > target_file_bytes:
                groups.append(group)
                group, total = [], 0
            group.append(f)
            total += f.size_bytes
        groups.append(group)
    return [g for g in groups if len(g) >= max(min_files, 2)]


def expired_snapshots(
    snapshots: Iterable[tuple[int, int]], current_id: int | None, now_ms: int, retention_ms: int
) -> list[int]:
    """The ids of the snapshots (id, timestamp ms) to expire: older than the retention, not current."""
    if retention_ms < 0:
        return []
    horizon = now_ms - retention_ms
    return [sid for sid, ts in snapshots if ts < horizon and sid != current_id]


def unreferenced(expired: Iterable[str], kept: Iterable[str]) -> list[str]:
    """The files (data files, manifests, manifest lists) expired snapshots name and kept ones do not."""
    keep = set(kept)
    return sorted({path for path in expired if path not in keep})


def orphans(
    listed: Iterable[tuple[str, int]], referenced: Iterable[str], now_ms: int, min_age_ms: int
) -> list[str]:
    """The ``listed`` files (path, modification time in ms) no ``referenced`` path names that are older
    than ``min_age_ms``; none when it is -1."""
    if min_age_ms < 0:
        return []
    keep = set(referenced)
    horizon = now_ms - min_age_ms
    return sorted(path for path, mtime_ms in listed if mtime_ms < horizon and path not in keep)


def shares_location(a: str, b: str) -> bool:
    """Whether one table location holds the other (the same directory, or one below the other)."""
    a, b = a.rstrip("/") + "/", b.rstrip("/") + "/"
    return a.startswith(b) or b.startswith(a)
