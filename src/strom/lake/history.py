"""Reading an Iceberg topic's tables for a range of offsets: the history half of a read that takes the
rest from the log (strom.spark's ``strom.iceberg.history``). Blocking; no writes.

Theory of operation. A reader *pins* the topic table once per plan (`pin`): it loads the table and
takes its current snapshot together with each partition's next offset as that same metadata records it
(`tables.recorded_offsets`, i.e. strom.lake.offsets). Every record of a partition below that offset that
the translator kept is a row of the pinned snapshot, exactly once; what is at or after it comes from the
log. The dead-letter table is pinned after the topic table: the translator appends dead letters before
the rows of the same round, so its snapshot, loaded later, holds every dead letter below the topic
table's offsets.

`read_rows` scans one partition's offsets ``[from, until)`` of a pinned snapshot (files pruned by the
offset column's statistics), sorted by offset. Rows below a pinned offset never change afterwards (the
translator only adds rows past it; a compaction rewrites files, not rows), so when the pinned snapshot
was expired in between, the current snapshot is read instead, with the same result.

That holds for the same table only. A topic deleted and created again gets a new table under the same
name (the earlier one dropped, or moved aside), whose offsets start at 0 again: reading its rows for
the earlier topic's offsets would mix two topics. So a pin also records the table's identity, its
uuid and the id of the topic it belongs to (the table property ``strom.topic-id``), and `read_rows`
checks the uuid before it reads; `check_same` compares two pins of a topic (a streaming query's plans).
Both raise `TableChanged`.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass, replace

import pyarrow as pa
from pyiceberg.catalog import Catalog, load_catalog
from pyiceberg.exceptions import NoSuchTableError
from pyiceberg.table import Table

from strom.lake.config_defs import CATALOG_NAME, NAMESPACE
from strom.lake.tables import DLQ_SUFFIX, TOPIC_ID_KEY, recorded_offsets

_catalogs: dict[tuple[tuple[str, str], ...], Catalog] = {}
_catalogs_lock = threading.Lock()


class TableChanged(RuntimeError):
    """The table a read planned on was replaced by another of the same name (its topic deleted and
    created again): its rows are not the planned topic's."""


@dataclass(frozen=True)
class TablePin:
    """What one plan reads from a topic's tables: the snapshots and the offsets the topic table holds,
    and which tables those are."""

    snapshot_id: int | None
    next_offsets: dict[int, int]
    dlq_snapshot_id: int | None = None
    table_uuid: str | None = None
    topic_id: str | None = None  # the table's ``strom.topic-id`` (None: a table without one)
    dlq_uuid: str | None = None


def check_same(topic: str, earlier: TablePin, later: TablePin) -> None:
    """Raises `TableChanged` when ``later`` pins another table of ``topic`` than ``earlier`` did (a table
    that had none yet, or has none any more, is no change: nothing of it was read)."""
    if earlier.table_uuid is None or later.table_uuid is None:
        return
    if (earlier.table_uuid, earlier.topic_id) != (later.table_uuid, later.topic_id):
        raise TableChanged(
            f"table {NAMESPACE}.{topic} is not the one this read planned on (table {earlier.table_uuid} of "
            f"topic id {earlier.topic_id}, now {later.table_uuid} of topic id {later.topic_id}): the topic "
            "was deleted and created again, and its offsets started over"
        )


def catalog(properties: Mapping[str, str]) -> Catalog:
    """The catalog of these pyiceberg properties, opened once per process."""
    key = tuple(sorted(properties.items()))
    with _catalogs_lock:
        found = _catalogs.get(key)
        if found is None:
            found = _catalogs[key] = load_catalog(CATALOG_NAME, **dict(properties))
        return found


def _load(properties: Mapping[str, str], name: str) -> Table | None:
    try:
        return catalog(properties).load_table((NAMESPACE, name))
    except NoSuchTableError:
        return None


def pin(properties: Mapping[str, str], topic: str, with_dead_letters: bool) -> TablePin:
    """The topic table's current snapshot and next offsets (none for a topic without a table yet), and,
    with ``with_dead_letters``, the dead-letter table's snapshot loaded after it."""
    table = _load(properties, topic)
    if table is None or table.current_snapshot() is None:
        return TablePin(None, {})
    snapshot = table.current_snapshot()
    assert snapshot is not None
    pinned = TablePin(
        snapshot.snapshot_id,
        recorded_offsets(table),
        table_uuid=str(table.metadata.table_uuid),
        topic_id=table.metadata.properties.get(TOPIC_ID_KEY),
    )
    if not with_dead_letters:
        return pinned
    dlq = _load(properties, topic + DLQ_SUFFIX)
    dlq_snapshot = dlq.current_snapshot() if dlq is not None else None
    if dlq is None or dlq_snapshot is None:
        return pinned
    return replace(pinned, dlq_snapshot_id=dlq_snapshot.snapshot_id, dlq_uuid=str(dlq.metadata.table_uuid))


def read_rows(
    properties: Mapping[str, str],
    table_name: str,
    snapshot_id: int,
    partition: int,
    from_offset: int,
    until_offset: int,
    table_uuid: str | None = None,
) -> pa.Table:
    """The rows of ``partition`` with offsets in ``[from_offset, until_offset)``, in offset order, of the
    table ``table_uuid`` (as pinned; None: whichever table has the name).

    Raises:
        NoSuchTableError: no table of that name any more.
        TableChanged: the table of that name is not ``table_uuid``.
    """
    table = _load(properties, table_name)
    if table is None:
        raise NoSuchTableError(f"table {NAMESPACE}.{table_name} is gone")
    found = str(table.metadata.table_uuid)
    if table_uuid is not None and found != table_uuid:
        owner = table.metadata.properties.get(TOPIC_ID_KEY)
        raise TableChanged(
            f"table {NAMESPACE}.{table_name} is not the one this read planned on (table {table_uuid}, now "
            f"{found} of topic id {owner}): the topic was deleted and created again, and its offsets "
            "started over"
        )
    if table.metadata.snapshot_by_id(snapshot_id) is None:  # expired since the plan: see the docstring
        current = table.current_snapshot()
        if current is None:
            raise NoSuchTableError(f"table {NAMESPACE}.{table_name} has no snapshot")
        snapshot_id = current.snapshot_id
    # Quoted: ``partition`` and ``offset`` would otherwise not parse as column names.
    condition = f'"partition" = {partition} and "offset" >= {from_offset} and "offset" < {until_offset}'
    rows = table.scan(row_filter=condition, snapshot_id=snapshot_id).to_arrow()
    return rows.sort_by("offset")
