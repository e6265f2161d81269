"""The readers people use on an Iceberg topic's table, as the docs show them: pyiceberg, DuckDB (its
iceberg extension loaded from the duckdb-extension-iceberg wheel, with the avro extension it needs) and
polars. Each returns the rows' (partition, offset) and the named columns, sorted. And the catalogs the
tests' brokers write, and a read_committed consumer's view of the topic to compare the table with."""

from __future__ import annotations

import glob
import os
import time
from collections.abc import Callable
from typing import Any

import duckdb
import duckdb_extension_avro
import duckdb_extension_iceberg
import polars as pl
from confluent_kafka import Consumer
from pyiceberg.catalog import Catalog, load_catalog
from pyiceberg.exceptions import NoSuchTableError
from pyiceberg.table import Table
from sqlalchemy.exc import OperationalError

Rows = list[tuple[Any, ...]]


_SQL_CATALOGS: dict[str, Catalog] = {}


def sql_catalog(
    base: str | os.PathLike[str], warehouse: str = "", properties: dict[str, str] | None = None
) -> Catalog:
    """The SQL catalog in ``base`` (``catalog.db``, and ``warehouse`` beside it unless one is given, with
    the file IO's ``properties``: an ``s3://`` warehouse's endpoint and keys), opened once.

    Raises:
        NoSuchTableError: no catalog there yet.
    """
    key = os.fspath(base)
    warehouse = warehouse or f"file://{key}/warehouse"
    catalog = _SQL_CATALOGS.get(key + warehouse)
    if catalog is not None:
        return catalog
    if not os.path.exists(os.path.join(key, "catalog.db")):
        raise NoSuchTableError(f"no catalog in {key} yet")
    for attempt in range(50):
        try:
            catalog = load_catalog(
                "strom",
                type="sql",
                uri=f"sqlite:///{key}/catalog.db",
                warehouse=warehouse,
                **(properties or {}),
            )
            break
        except OperationalError:
            # pyiceberg takes SQLite's "database is locked" (the broker committing) for missing catalog
            # tables and tries to create them: open it again.
            if attempt == 49:
                raise
            time.sleep(0.2)
    assert catalog is not None
    _SQL_CATALOGS[key + warehouse] = catalog
    return catalog


def sql_catalog_table(log_dir: str, name: str) -> Table:
    """A table of the broker's default catalog (SQLite in its first log dir, local warehouse beside it).

    Raises:
        NoSuchTableError: no such table, or no catalog yet.
    """
    return sql_catalog(os.path.join(log_dir, "iceberg")).load_table(("strom", name))


def rows_or_none(load: Callable[[], Table], columns: list[str]) -> Rows:
    """`with_pyiceberg` of the table ``load`` returns; no rows while there is no such table, or while
    it lacks one of ``columns`` (made, its schema not yet evolved by the first round of those rows)."""
    try:
        table = load()
    except NoSuchTableError:
        return []
    present = {f.name for f in table.refresh().schema().fields}
    if not set(columns) <= present:
        return []
    return with_pyiceberg(table, columns)


def committed_offsets(bootstrap: str, topic: str, count: int, timeout_s: float = 90) -> list[tuple[int, int]]:
    """(partition, offset) of every record a read_committed consumer sees, sorted."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"{topic}-check",
            "enable.auto.commit": False,  # each call reads from the start
            "auto.offset.reset": "earliest",
            "isolation.level": "read_committed",
        }
    )
    consumer.subscribe([topic])
    seen: list[tuple[int, int]] = []
    deadline = time.monotonic() + timeout_s
    try:
        while len(seen) < count and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                seen.append((msg.partition(), msg.offset()))
    finally:
        consumer.close()
    return sorted(seen)


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
