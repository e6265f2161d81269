"""The readers people use on an Iceberg topic's table, as the docs show them: pyiceberg, DuckDB (its
iceberg extension loaded from the duckdb-extension-iceberg wheel, with the avro extension it needs) and
polars. Each returns the rows' (partition, offset) and the named columns, sorted."""

from __future__ import annotations

import glob
import os
from typing import Any

import duckdb
import duckdb_extension_avro
import duckdb_extension_iceberg
import polars as pl
from pyiceberg.catalog import load_catalog
from pyiceberg.exceptions import NoSuchTableError
from pyiceberg.table import Table

Rows = list[tuple[Any, ...]]


def sql_catalog_table(log_dir: str, name: str) -> Table:
    """A table of the broker's default catalog (SQLite in its first log dir, local warehouse beside it).

    Raises:
        NoSuchTableError: no such table, or no catalog yet.
    """
    base = os.path.join(log_dir, "iceberg")
    if not os.path.exists(os.path.join(base, "catalog.db")):
        raise NoSuchTableError(f"no catalog in {log_dir} yet")
    catalog = load_catalog(
        "strom", type="sql", uri=f"sqlite:///{base}/catalog.db", warehouse=f"file://{base}/warehouse"
    )
    return catalog.load_table(("strom", name))


def with_pyiceberg(table: Table, columns: list[str]) -> Rows:
    data = table.refresh().scan(selected_fields=("partition", "offset", *columns)).to_arrow()
    return sorted(zip(*(data[c].to_pylist() for c in ("partition", "offset", *columns)), strict=True))


def _extension(module: Any, name: str) -> str:
    [path] = glob.glob(
        os.path.join(os.path.dirname(module.__file__), "extensions", "*", f"{name}.duckdb_extension")
    )
    return path


def with_duckdb(table: Table, columns: list[str]) -> Rows:
    con = duckdb.connect(config={"autoinstall_known_extensions": False, "autoload_known_extensions": False})
    try:
        con.execute(f"LOAD '{_extension(duckdb_extension_avro, 'avro')}'")
        con.execute(f"LOAD '{_extension(duckdb_extension_iceberg, 'iceberg')}'")
        names = ", ".join(f'"{c}"' for c in ("partition", "offset", *columns))
        location = table.refresh().metadata_location
        rows = con.execute(f"SELECT {names} FROM iceberg_scan('{location}')").fetchall()
    finally:
        con.close()
    return sorted(rows)


def with_polars(table: Table, columns: list[str], storage_options: dict[str, str] | None = None) -> Rows:
    # Plan with pyiceberg (installed) rather than the optional polars_iceberg plugin, without a warning.
    os.environ.setdefault("POLARS_ICEBERG_PLANNER", "pyiceberg")
    frame = (
        pl.scan_iceberg(table.refresh(), storage_options=storage_options)
        .select(["partition", "offset", *columns])
        .collect()
    )
    return sorted(frame.rows())
