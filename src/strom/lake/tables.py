"""The catalog and its tables through pyiceberg: creation, schema evolution, the exactly-once append.

Blocking throughout (catalog calls, Parquet writes): the broker calls it from worker threads. Each
thread opens its own catalog client (`LakeTables.catalog`).

**Exactly once.** `append` re-reads the table, takes the partition's recorded next offset from the
table (offsets.py: its property ``strom.next-offsets``), keeps only the rows at or after it, and
appends them in one commit with the property and the new snapshot's summary recording ``end`` for the
partition (the other partitions' offsets carried over); with no row left to append (a round of dead
letters only), the snapshot adds no file but still moves the offset. pyiceberg
commits with the requirement that the table's current snapshot is still the one read, and the catalog
checks it atomically (SQL: a conditional update of the metadata location; REST: the server's check):
if a broker leading another partition, or a deposed leader of this one, committed meanwhile, the
append fails and is tried again from the re-read. Rows never land twice, and the summary never
claims rows that are not in the table. A failed attempt may leave data files no snapshot names
(orphans, which the maintenance removes: maintenance.py).

**Lifecycle.** A table records the id of the topic it was made for (the table property
``strom.topic-id``; a `TableRef` names the id it expects). A leader starting to translate a partition
first `claim`s the topic's tables: a table of an earlier topic of the same name (deleted and created
again, so its offsets start at 0 again) is renamed ``<table>~<its topic id>`` out of the way, and the
new topic's table starts empty. Deleting a topic whose ``strom.iceberg.delete`` is true drops its
tables (`drop`) and refuses, on this broker, any later write or creation for that topic id: a round
still in flight cannot bring the table back.

**Schema evolution.** A value schema's columns are merged into the table's schema by name
(``union_by_name``: new columns added, int to long and float to double widened); a schema whose
columns cannot be merged (a type changed otherwise) is reported back, and its records become dead letters.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace

import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.catalog import Catalog, load_catalog
from pyiceberg.exceptions import (
    CommitFailedException,
    NoSuchTableError,
    ResolveError,
    TableAlreadyExistsError,
    ValidationError,
)
from pyiceberg.table import Table
from pyiceberg.transforms import HourTransform

from strom.lake import offsets
from strom.lake.columns import DLQ_SCHEMA, KEY_VALUE_SCHEMA, META_FIELDS, PARTITION_NAME, PARTITION_SOURCE
from strom.lake.config_defs import CATALOG_NAME, NAMESPACE, CatalogSettings
from strom.lake.translate import KEY_VALUE

DLQ_SUFFIX = "~dlq"
SQLITE_FILE = "sqlite:///"
# pyiceberg retries a conflicting append by re-applying it on the newer snapshot, keeping its summary:
# that would carry over another partition's stale next offset. Off: a conflict comes back to `append`,
# which re-reads the offsets first.
NUM_RETRIES = "commit.retry.num-retries"
# Set on every table the translator writes: no retry (above); the catalog deletes old metadata files
# past the newest 100 (a commit per partition per target lag would otherwise pile them up).
TABLE_PROPERTIES = {
    NUM_RETRIES: "0",
    "write.metadata.delete-after-commit.enabled": "true",
    "write.metadata.previous-versions-max": "100",
}
COMMIT_ATTEMPTS = 20


TOPIC_ID_KEY = "strom.topic-id"


class SchemaRefused(ValueError):
    """A value schema's columns cannot be merged into the table's schema."""


class StaleTopic(RuntimeError):
    """The table belongs to another topic id than the writer's: the writer's topic was deleted."""


@dataclass(frozen=True)
class TableRef:
    """One table of a topic: the topic's own or its dead-letter table."""

    topic: str
    mode: str
    dlq: bool = False
    topic_id: str = ""  # the topic's id (text), when the writer knows it: checked against the table's

    @property
    def name(self) -> str:
        return self.topic + DLQ_SUFFIX if self.dlq else self.topic

    @property
    def identifier(self) -> tuple[str, str]:
        return (NAMESPACE, self.name)

    def topic_tables(self) -> list[TableRef]:
        """The topic's tables: its own, and its dead-letter table unless the mode has no dead letters
        (``key_value``; a catalog may not even take a table name with ``~``)."""
        main = replace(self, dlq=False)
        return [main] if self.mode == KEY_VALUE else [main, replace(self, dlq=True)]

    def initial_schema(self) -> pa.Schema:
        if self.dlq:
            return DLQ_SCHEMA
        return KEY_VALUE_SCHEMA if self.mode == KEY_VALUE else pa.schema(list(META_FIELDS))


class LakeTables:
    def __init__(self, settings: CatalogSettings) -> None:
        self.settings = settings
        self._local = threading.local()
        self._namespace_made = False
        self._dropped: set[str] = set()  # ids of deleted topics: their tables are never written again

    def catalog(self) -> Catalog:
        catalog: Catalog | None = getattr(self._local, "catalog", None)
        if catalog is None:
            uri = self.settings.properties.get("uri", "")
            if self.settings.kind == "sql" and uri.startswith(SQLITE_FILE):
                os.makedirs(os.path.dirname(uri[len(SQLITE_FILE) :]) or ".", exist_ok=True)
            catalog = self._local.catalog = load_catalog(CATALOG_NAME, **self.settings.properties)
        if not self._namespace_made:
            catalog.create_namespace_if_not_exists(NAMESPACE)
            self._namespace_made = True
        return catalog

    def table(self, ref: TableRef) -> Table:
        """The table, created (partitioned by the hour of the record timestamp) if it does not exist.

        Raises:
            StaleTopic: ``ref``'s topic was deleted, or the table belongs to another topic id.
        """
        if ref.topic_id in self._dropped:
            raise StaleTopic(f"topic {ref.topic} (id {ref.topic_id}) was deleted")
        catalog = self.catalog()
        wanted = dict(TABLE_PROPERTIES, **({TOPIC_ID_KEY: ref.topic_id} if ref.topic_id else {}))
        try:
            table = catalog.load_table(ref.identifier)
        except NoSuchTableError:
            pass
        else:
            owner = table.metadata.properties.get(TOPIC_ID_KEY)
            if ref.topic_id and owner is not None and owner != ref.topic_id:
                raise StaleTopic(f"table {ref.name} belongs to topic id {owner}, not {ref.topic_id}")
            if wanted.items() <= table.metadata.properties.items():
                return table
            with table.transaction() as txn:  # a table made elsewhere: no retry that keeps a stale summary
                txn.set_properties(wanted)
            return catalog.load_table(ref.identifier)
        try:
            with (
                catalog.create_table_transaction(
                    ref.identifier, ref.initial_schema(), properties=wanted
                ) as txn,
                txn.update_spec() as spec,
            ):
                spec.add_field(PARTITION_SOURCE, HourTransform(), PARTITION_NAME)
        except (TableAlreadyExistsError, CommitFailedException):
            pass  # another broker (or thread) made it first
        return catalog.load_table(ref.identifier)

    def exists(self, ref: TableRef) -> bool:
        return self.catalog().table_exists(ref.identifier)

    def claim(self, ref: TableRef) -> None:
        """Move a table of an earlier topic of the same name out of the way: renamed
        ``<table>~<its topic id>``, its rows and offsets kept there."""
        catalog = self.catalog()
        try:
            owner = catalog.load_table(ref.identifier).metadata.properties.get(TOPIC_ID_KEY)
        except NoSuchTableError:
            return
        if owner is None or owner == ref.topic_id or not ref.topic_id:
            return
        if owner in self._dropped:  # its topic's deletion here has not dropped it yet
            with contextlib.suppress(NoSuchTableError):
                catalog.purge_table(ref.identifier)
            return
        with contextlib.suppress(NoSuchTableError, TableAlreadyExistsError):  # another broker moved it
            catalog.rename_table(ref.identifier, (NAMESPACE, f"{ref.name}~{owner}"))

    def forbid(self, topic_id: str) -> bool:
        """Refuse, from now on, every write and creation of a table for the deleted topic ``topic_id``;
        whether it was not refused yet."""
        known = topic_id in self._dropped
        self._dropped.add(topic_id)
        return not known

    def dropped(self) -> frozenset[str]:
        """The deleted topic ids refused so far (`forbid`)."""
        return frozenset(self._dropped)

    def drop(self, ref: TableRef) -> bool:
        """Drop the table of the deleted topic ``ref.topic_id`` and its files, and refuse any later
        write for that id; a table of another topic id is left alone. The table may also have been
        moved aside by a broker that translates the topic created again and had not seen the deletion
        (`claim`): that one is dropped too. Whether a table was dropped."""
        self.forbid(ref.topic_id)
        catalog = self.catalog()
        dropped = False
        for identifier in (ref.identifier, (NAMESPACE, f"{ref.name}~{ref.topic_id}")):
            try:
                owner = catalog.load_table(identifier).metadata.properties.get(TOPIC_ID_KEY)
                if owner is None or owner == ref.topic_id:
                    catalog.purge_table(identifier)
                    dropped = True
            except NoSuchTableError:
                continue
        return dropped

    def next_offsets(self, ref: TableRef) -> dict[int, int]:
        """Each partition's next offset as the table records it ({} for a table without any)."""
        return recorded_offsets(self.table(ref))

    def evolve(self, ref: TableRef, fields: Sequence[pa.Field]) -> None:
        """Merge ``fields`` into the table's schema, unless it has them already.

        Raises:
            SchemaRefused: the fields cannot be merged (a column's type changed otherwise than widened).
            CommitFailedException: still conflicting after `COMMIT_ATTEMPTS` attempts.
        """
        for attempt in range(COMMIT_ATTEMPTS):
            table = self.table(ref)
            current = table.schema().as_arrow()
            if all(_contains(current, f) for f in fields):
                return
            try:
                with table.update_schema() as update:
                    update.union_by_name(pa.schema(list(fields)))
                return
            except CommitFailedException:
                if attempt == COMMIT_ATTEMPTS - 1:
                    raise
                time.sleep(min(0.05 * (attempt + 1), 0.5))
            except (ValidationError, ResolveError, ValueError, TypeError) as exc:
                raise SchemaRefused(str(exc)) from exc

    def arrow_schema(self, ref: TableRef) -> pa.Schema:
        return self.table(ref).schema().as_arrow()

    def append(self, ref: TableRef, partition: int, end: int, rows: pa.Table) -> int:
        """Append the rows not yet in the table and record ``end`` as the partition's next offset;
        returns the partition's next offset as the table then records it.

        Raises:
            CommitFailedException: still conflicting after `COMMIT_ATTEMPTS` attempts.
        """
        for attempt in range(COMMIT_ATTEMPTS):
            table = self.table(ref)
            current = recorded_offsets(table)
            recorded = current.get(partition)
            if recorded is not None and recorded >= end:
                return recorded  # another leader got here first
            keep = rows if recorded is None else rows.filter(pc.greater_equal(rows["offset"], recorded))
            rendered = offsets.render(offsets.merged(current, partition, end))
            summary = {offsets.SUMMARY_KEY: rendered}
            try:
                with table.transaction() as txn:  # one commit: the rows and the offsets they bring
                    txn.set_properties({offsets.PROPERTY_KEY: rendered})
                    if keep.num_rows:
                        txn.append(
                            keep.cast(_aligned(keep.schema, table.schema().as_arrow())),
                            snapshot_properties=summary,
                        )
                    else:
                        # No row (dead letters, aborted records or markers only): a snapshot without
                        # files, so that the offsets move under the same check as an append's.
                        with txn.update_snapshot(snapshot_properties=summary).fast_append():
                            pass
                return end
            except CommitFailedException:
                if attempt == COMMIT_ATTEMPTS - 1:
                    raise
                time.sleep(min(0.05 * (attempt + 1), 0.5))
        raise AssertionError("unreachable")


def recorded_offsets(table: Table) -> dict[int, int]:
    """Each partition's next offset as ``table``, as loaded, records it (offsets.py): every row below
    it is in the table's current snapshot and in every later one (a compaction rewrites files, not rows)."""
    return offsets.recorded(table.metadata.properties, _summaries(table))


def _summaries(table: Table) -> Iterator[dict[str, str]]:
    """The snapshot summaries from the current snapshot back through its ancestors (those not expired)."""
    metadata = table.metadata
    snapshot = table.current_snapshot()
    while snapshot is not None:
        yield snapshot.summary.additional_properties if snapshot.summary is not None else {}
        parent = snapshot.parent_snapshot_id
        snapshot = metadata.snapshot_by_id(parent) if parent is not None else None


def _contains(schema: pa.Schema, wanted: pa.Field) -> bool:
    index = schema.get_field_index(wanted.name)
    return index >= 0 and _covers(schema.field(index).type, wanted.type)


_WIDER = {pa.int32(): pa.int64(), pa.float32(): pa.float64()}


def _covers(have: pa.DataType, want: pa.DataType) -> bool:
    """Whether a column of type ``have`` takes values of type ``want`` as they are: the same type up to
    large/small strings and lists (pyiceberg reads its schema as the large forms), or a wider one (a
    record of an earlier schema version after the column was widened), struct fields by name."""
    have, want = _normal(have), _normal(want)
    if have == want or _WIDER.get(want) == have:
        return True
    if pa.types.is_struct(want) and pa.types.is_struct(have):
        names = {have.field(i).name: have.field(i).type for i in range(have.num_fields)}
        return all(
            want.field(i).name in names and _covers(names[want.field(i).name], want.field(i).type)
            for i in range(want.num_fields)
        )
    if pa.types.is_list(want) and pa.types.is_list(have):
        return _covers(have.value_type, want.value_type)
    if pa.types.is_map(want) and pa.types.is_map(have):
        return _covers(have.key_type, want.key_type) and _covers(have.item_type, want.item_type)
    return False


def _normal(t: pa.DataType) -> pa.DataType:
    if pa.types.is_large_string(t):
        return pa.string()
    if pa.types.is_large_binary(t):
        return pa.binary()
    if pa.types.is_large_list(t) or pa.types.is_list(t):
        return pa.list_(_normal(t.value_type))
    if pa.types.is_struct(t):
        return pa.struct([pa.field(t.field(i).name, _normal(t.field(i).type)) for i in range(t.num_fields)])
    if pa.types.is_map(t):
        return pa.map_(_normal(t.key_type), _normal(t.item_type))
    return t


def _aligned(have: pa.Schema, table: pa.Schema) -> pa.Schema:
    """``have`` with each column's type as the table has it (the rows were built before a widening)."""
    fields = []
    for f in have:
        index = table.get_field_index(f.name)
        fields.append(pa.field(f.name, table.field(index).type) if index >= 0 else f)
    return pa.schema(fields)
