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
