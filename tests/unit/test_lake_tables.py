"""Iceberg topics' tables on a real SQL catalog (SQLite) and local warehouse: the exactly-once append
with each partition's next offset in the snapshot summary, conflicting writers, schema evolution, and a
whole translation round with its dead letters."""

from __future__ import annotations

import io
import json
import struct
import threading
from dataclasses import replace
from pathlib import Path

import pyarrow as pa
from fastavro import parse_schema, schemaless_writer
from pyiceberg.exceptions import CommitFailedException
from sqlalchemy.exc import OperationalError

from strom.lake.columns import KEY_VALUE_SCHEMA
from strom.lake.config_defs import catalog_settings
from strom.lake.round import run_round
from strom.lake.tables import LakeTables, TableRef
from strom.lake.translate import KEY_VALUE, VALUE_SCHEMA_ID_PREFIX, SchemaCache
from strom.protocol.records.builder import build_batch


def lake_tables(tmp_path: Path) -> LakeTables:
    return LakeTables(catalog_settings({}, str(tmp_path), {}))


def key_value_rows(partition: int, first: int, count: int) -> pa.Table:
    return pa.Table.from_pylist(
        [
            {
                "partition": partition,
                "offset": o,
                "timestamp": 1_700_000_000_000_000,
                "headers": [],
                "key": None,
                "value": b"v",
            }
            for o in range(first, first + count)
        ],
        schema=KEY_VALUE_SCHEMA,
    )


def test_appends_record_each_partitions_next_offset_and_never_repeat_rows(tmp_path: Path) -> None:
    tables = lake_tables(tmp_path)
    ref = TableRef("orders.v1", KEY_VALUE)
    assert tables.next_offsets(ref) == {}
    assert tables.append(ref, 0, 10, key_value_rows(0, 0, 10)) == 10
    assert tables.append(ref, 1, 4, key_value_rows(1, 0, 4)) == 4
    # A deposed leader's round overlapping what the table holds adds only the rows after it.
    other = lake_tables(tmp_path)
    assert other.append(ref, 0, 15, key_value_rows(0, 5, 10)) == 15
    assert tables.append(ref, 0, 12, key_value_rows(0, 10, 2)) == 15  # already there: nothing appended
    assert tables.next_offsets(ref) == {0: 15, 1: 4}
    assert table_pairs(tables, ref) == [(0, o) for o in range(15)] + [(1, o) for o in range(4)]
    spec = tables.table(ref).spec()
    assert [f.name for f in spec.fields] == ["timestamp_hour"]


V1 = {"type": "record", "name": "Order", "fields": [{"name": "id", "type": "int"}]}
V2 = {
    "type": "record",
    "name": "Order",
    "fields": [{"name": "id", "type": "long"}, {"name": "note", "type": ["null", "string"], "default": None}],
}
V3_INCOMPATIBLE = {"type": "record", "name": "Order", "fields": [{"name": "id", "type": "string"}]}


def _wire(schema_id: int, schema: dict[str, object], value: dict[str, object]) -> bytes:
    out = io.BytesIO()
    schemaless_writer(out, parse_schema(schema), value)
    return struct.pack(">bI", 0, schema_id) + out.getvalue()


def test_a_round_evolves_the_schema_and_writes_dead_letters(tmp_path: Path) -> None:
    tables = lake_tables(tmp_path)
    schemas = SchemaCache(
        {
            1: ("AVRO", json.dumps(V1)),
            2: ("AVRO", json.dumps(V2)),
            3: ("AVRO", json.dumps(V3_INCOMPATIBLE)),
        }.get
    )
    values = [
        _wire(1, V1, {"id": 1}),
        _wire(2, V2, {"id": 2**40, "note": "big"}),
        b"not avro",
        _wire(3, V3_INCOMPATIBLE, {"id": "x"}),
    ]
    batch = build_batch([(None, v, (), 1_700_000_000_000) for v in values], base_offset=0)
    result = run_round(
        tables, TableRef("orders", VALUE_SCHEMA_ID_PREFIX), 0, [(batch, [])], 0, 4, schemas, False
    )
    assert (result.next_offset, result.rows, result.dead) == (4, 2, 2)
    main = tables.table(TableRef("orders", VALUE_SCHEMA_ID_PREFIX)).scan().to_arrow().sort_by("offset")
    assert main["id"].to_pylist() == [1, 2**40]
    assert main["note"].to_pylist() == [None, "big"]
    assert main.schema.field("id").type == pa.int64()
    dead = (
        tables.table(TableRef("orders", VALUE_SCHEMA_ID_PREFIX, dlq=True)).scan().to_arrow().sort_by("offset")
    )
    assert dead["offset"].to_pylist() == [2, 3]
    assert dead["value"].to_pylist()[0] == b"not avro"
    assert "evolve" in dead["reason"].to_pylist()[1]
    # The same round again (a restarted broker) adds nothing to either table.
    again = run_round(
        tables, TableRef("orders", VALUE_SCHEMA_ID_PREFIX), 0, [(batch, [])], 0, 4, schemas, False
    )
    assert again.next_offset == 4
    assert tables.table(TableRef("orders", VALUE_SCHEMA_ID_PREFIX)).scan().to_arrow().num_rows == 2
    assert tables.table(TableRef("orders", VALUE_SCHEMA_ID_PREFIX, dlq=True)).scan().to_arrow().num_rows == 2


def test_records_of_an_earlier_version_still_fit_after_a_widening(tmp_path: Path) -> None:
    tables = lake_tables(tmp_path)
    schemas = SchemaCache({1: ("AVRO", json.dumps(V1)), 2: ("AVRO", json.dumps(V2))}.get)
    newer = build_batch([(None, _wire(2, V2, {"id": 2**40, "note": None}), (), 1)], base_offset=0)
    older = build_batch([(None, _wire(1, V1, {"id": 7}), (), 2)], base_offset=1)
    first = run_round(
        tables, TableRef("late", VALUE_SCHEMA_ID_PREFIX), 0, [(newer, [])], 0, 1, schemas, False
    )
    second = run_round(
        tables, TableRef("late", VALUE_SCHEMA_ID_PREFIX), 0, [(older, [])], 1, 2, schemas, False
    )
    assert (first.rows, second.rows, second.dead) == (1, 1, 0)
    table = tables.table(TableRef("late", VALUE_SCHEMA_ID_PREFIX)).scan().to_arrow().sort_by("offset")
    assert table["id"].to_pylist() == [2**40, 7]
    assert tables.next_offsets(TableRef("late", VALUE_SCHEMA_ID_PREFIX)) == {0: 2}


def racing_writers(
    tmp_path: Path, ref: TableRef, end: int, step: int, hold: threading.Event | None = None
) -> list[threading.Thread]:
    """Three started threads, each a broker of its own appending one partition's rows up to ``end``,
    ``step`` rows per commit. With ``hold``, partition 0's writer waits for it (at most 120 s) before
    its last commit, so that whatever sets it happens between two of that writer's commits."""

    def write(partition: int) -> None:
        tables = lake_tables(tmp_path)
        first, stale = 0, False
        while first < end:
            if hold is not None and partition == 0 and first + step >= end:
                hold.wait(120)
            try:
                if stale:  # carry on from the offset the table records
                    first, stale = tables.next_offsets(ref).get(partition, 0), False
                    continue
                tables.append(ref, partition, first + step, key_value_rows(partition, first, step))
            except (FileNotFoundError, CommitFailedException, OperationalError):
                # Snapshot expiry removed a file of the snapshot this append planned on, or the
                # maintainer, which here runs without a pause, won every attempt or held SQLite's lock
                # past its timeout: the translator starts again from the table after a failed round.
                stale = True
                continue
            first += step

    threads = [threading.Thread(target=write, args=(p,)) for p in range(3)]
    for t in threads:
        t.start()
    return threads


def table_pairs(tables: LakeTables, ref: TableRef) -> list[tuple[int, int]]:
    scanned = tables.table(ref).scan().to_arrow()
    return sorted(zip(scanned["partition"].to_pylist(), scanned["offset"].to_pylist(), strict=True))


def test_writers_of_different_partitions_racing_keep_each_others_offsets(tmp_path: Path) -> None:
    ref = TableRef("raced", KEY_VALUE)
    lake_tables(tmp_path).table(ref)
    for t in racing_writers(tmp_path, ref, 40, 4):
        t.join()
    tables = lake_tables(tmp_path)
    assert tables.next_offsets(ref) == {0: 40, 1: 40, 2: 40}
    assert table_pairs(tables, ref) == [(p, o) for p in range(3) for o in range(40)]


def test_a_round_of_dead_letters_only_moves_the_tables_offset(tmp_path: Path) -> None:
    tables = lake_tables(tmp_path)
    main = TableRef("undecodable", VALUE_SCHEMA_ID_PREFIX)
    schemas = SchemaCache({1: ("AVRO", json.dumps(V1))}.get)
    dead = build_batch([(None, v, (), 1_700_000_000_000) for v in (b"not avro", b"nor this")], base_offset=0)
    result = run_round(tables, main, 0, [(dead, [])], 0, 2, schemas, False)
    assert (result.next_offset, result.rows, result.dead) == (2, 0, 2)
    assert tables.next_offsets(main) == {0: 2}  # a restart starts after them
    assert tables.table(main).scan().to_arrow().num_rows == 0
    good = build_batch([(None, _wire(1, V1, {"id": 7}), (), 1_700_000_000_000)], base_offset=2)
    assert run_round(tables, main, 0, [(good, [])], 2, 3, schemas, False).rows == 1
    assert tables.next_offsets(main) == {0: 3}
    assert tables.table(main).scan().to_arrow()["id"].to_pylist() == [7]
    assert tables.table(replace(main, dlq=True)).scan().to_arrow().num_rows == 2
