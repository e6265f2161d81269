"""One translation round of one partition, blocking (run on a worker thread): committed records of the
batches read, rows per mode, schema evolution, then the dead-letter table's append and the table's.

The dead-letter table is appended first. Both appends record the round's end as the partition's next
offset in their own table (tables.py), so each table holds each record at most once, and the translator
resumes from the topic table's offset: every dead letter below it is already in the dead-letter table.
Rows that Arrow cannot take (a value out of its column's range) become dead letters as well.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import pyarrow as pa

from strom.lake.columns import Row
from strom.lake.records import committed_records
from strom.lake.tables import LakeTables, SchemaRefused, TableRef
from strom.lake.translate import KEY_VALUE, SchemaCache, SchemaKey, Translation, dead_row, translate
from strom.protocol.records.record import Record
from strom.storage.transaction_index import AbortedTxn

Chunk = tuple[bytes, list[AbortedTxn]]


@dataclass(frozen=True)
class RoundResult:
    next_offset: int  # where the next round starts
    rows: int  # rows appended to the table
    dead: int  # rows appended to the dead-letter table
    waiting_for: int | None  # an unknown schema id the round stopped at
    # Schema ids the round needs and was not given (worker.py): nothing was committed; look them up and
    # run the round again.
    missing: frozenset[int] = frozenset()


def run_round(
    tables: LakeTables,
    main: TableRef,
    partition: int,
    chunks: Sequence[Chunk],
    start: int,
    end: int,
    schemas: SchemaCache | None,
    give_up_waiting: bool,
) -> RoundResult:
    records, position = read_records(chunks, start, end)
    return write_records(tables, main, partition, records, position, schemas, give_up_waiting)


def read_records(chunks: Sequence[Chunk], start: int, end: int) -> tuple[list[Record], int]:
    """The committed records of ``chunks`` in ``[start, end)``, and the offset after the last whole batch."""
    records: list[Record] = []
    position = start
    for data, aborted in chunks:
        read = committed_records(data, aborted, position, end)
        records.extend(read.records)
        position = read.next_offset
    return records, position


def write_records(
    tables: LakeTables,
    main: TableRef,
    partition: int,
    records: Sequence[Record],
    position: int,
    schemas: SchemaCache | None,
    give_up_waiting: bool,
) -> RoundResult:
    """Translate ``records`` and append them (dead letters first), recording ``position`` (or where the
    translation stopped) as the partition's next offset."""
    mode = main.mode
    translation = translate(mode, partition, records, schemas, give_up_waiting)
    if translation.next_offset is not None:
        position = translation.next_offset
    dlq = replace(main, dlq=True)
    if mode != KEY_VALUE and schemas is not None:
        _evolve(tables, main, translation, schemas, partition, records)
    rows, dead = _to_arrow(tables.arrow_schema(main), translation.rows, partition, records)
    translation.dead.extend(dead)
    written_dead = 0
    if translation.dead:
        dead_table = pa.Table.from_pylist(
            sorted(translation.dead, key=lambda r: r["offset"]), schema=tables.arrow_schema(dlq)
        )
        tables.append(dlq, partition, position, dead_table)
        written_dead = dead_table.num_rows
    # Even without rows: the offset moves past dead letters, so that a restart does not read them again.
    tables.append(
        main, partition, position, rows if rows is not None else tables.arrow_schema(main).empty_table()
    )
    return RoundResult(
        position, rows.num_rows if rows is not None else 0, written_dead, translation.waiting_for
    )


def _evolve(
    tables: LakeTables,
    main: TableRef,
    translation: Translation,
    schemas: SchemaCache,
    partition: int,
    records: Sequence[Record],
) -> None:
    """Merge each schema's columns into the table; rows of a schema that cannot be merged become dead."""
    refused: dict[SchemaKey, str] = {}
    for key in sorted(set(translation.row_schemas)):
        try:
            tables.evolve(main, schemas.columns(key))
        except SchemaRefused as exc:
            refused[key] = f"schema {key[0]} does not evolve the table: {exc}"
    if not refused:
        return
    by_offset = {r.offset: r for r in records}
    kept: list[Row] = []
    kept_keys: list[SchemaKey] = []
    for row, key in zip(translation.rows, translation.row_schemas, strict=True):
        if key in refused:
            record = by_offset[row["offset"]]
            translation.dead.append(dead_row(partition, record, refused[key]))
        else:
            kept.append(row)
            kept_keys.append(key)
    translation.rows, translation.row_schemas = kept, kept_keys


def _to_arrow(
    schema: pa.Schema, rows: list[Row], partition: int, records: Sequence[Record]
) -> tuple[pa.Table | None, list[Row]]:
    if not rows:
        return None, []
    try:
        return pa.Table.from_pylist(rows, schema=schema), []
    except (pa.ArrowException, TypeError, ValueError, OverflowError):
        pass
    by_offset = {r.offset: r for r in records}
    good: list[Row] = []
    dead: list[Row] = []
    for row in rows:
        try:
            pa.Table.from_pylist([row], schema=schema)
        except (pa.ArrowException, TypeError, ValueError, OverflowError) as exc:
            record = by_offset[row["offset"]]
            dead.append(
                dead_row(partition, record, f"the decoded value does not fit the table's columns: {exc}")
            )
            continue
        good.append(row)
    return pa.Table.from_pylist(good, schema=schema) if good else None, dead
