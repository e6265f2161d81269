"""Translation rounds per CPU second, in one process: the per-record path against the columnar one.

One round's stored batches (uncompressed, 1 MiB each, as the sustained bench's producers send them) of
Avro records of one string field in Confluent's wire format, about ``--sizes`` bytes each, translated
into a fresh table of a SQL catalog (SQLite, local warehouse) in a temporary directory: by
``run_round`` (records decoded one by one: Record objects, fastavro, ``Table.from_pylist``) and by
``columnar_round`` (record framing read into numpy columns, the values decoded by polars' Avro reader),
both including the Parquet file and the catalog commit. CPU is the process's (all its threads), the
best of ``--repeat`` rounds for each.

    PYTHONPATH=src .venv/bin/python bench/lake_translate_bench.py --records 200000 --sizes 100,1024
"""

from __future__ import annotations

import argparse
import io
import json
import struct
import tempfile
import time

from fastavro import parse_schema, schemaless_writer

from strom.lake.columnar import columnar_round
from strom.lake.config_defs import catalog_settings
from strom.lake.record_columns import committed_columns
from strom.lake.round import run_round
from strom.lake.tables import LakeTables, TableRef
from strom.lake.translate import VALUE_SCHEMA_ID_PREFIX, SchemaCache
from strom.protocol.records.builder import build_batch

SCHEMA = {"type": "record", "name": "Event", "fields": [{"name": "body", "type": "string"}]}


def stored_batches(records: int, size: int) -> bytes:
    body = io.BytesIO()
    schemaless_writer(body, parse_schema(SCHEMA), {"body": "x" * (size - 8)})
    value = struct.pack(">bI", 0, 1) + body.getvalue()
    per_batch = (1 << 20) // (size + 20)
    now = int(time.time() * 1000)
    return b"".join(
        build_batch([(None, value, (), now)] * min(per_batch, records - base), base_offset=base)
        for base in range(0, records, per_batch)
    )


def one_round(columnar: bool, data: bytes, records: int) -> float:
    with tempfile.TemporaryDirectory() as directory:
        tables = LakeTables(catalog_settings({}, directory, {}))
        schemas = SchemaCache({1: ("AVRO", json.dumps(SCHEMA))}.get)
        ref = TableRef("bench", VALUE_SCHEMA_ID_PREFIX, topic_id="bench")
        started = time.process_time()
        if columnar:
            columns = committed_columns([(data, [])], 0, records)
            result = columnar_round(tables, ref, 0, columns, schemas) if columns is not None else None
            if result is None:
                raise SystemExit("the columnar path did not take the round")
        else:
            result = run_round(tables, ref, 0, [(data, [])], 0, records, schemas, False)
        cpu = time.process_time() - started
        if result.rows != records:
            raise SystemExit(f"{result.rows} rows for {records} records")
        return cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--sizes", default="100,1024")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    for size in (int(s) for s in args.sizes.split(",")):
        data = stored_batches(args.records, size)
        best = {
            name: min(one_round(name == "columnar", data, args.records) for _ in range(args.repeat))
            for name in ("per-record", "columnar")
        }
        for name, cpu in best.items():
            print(
                f"{size} B {name}: {args.records:,} rows in {cpu:.2f} CPU s = {args.records / cpu:,.0f} rows "
                f"per CPU second ({1e6 * cpu / args.records:.1f} us a row)"
            )
        ratio = best["per-record"] / best["columnar"]
        print(f"{size} B columnar / per-record: {ratio:.1f}x rows per CPU second")


if __name__ == "__main__":
    main()
