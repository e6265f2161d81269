"""An Iceberg topic in the default SQL catalog with an ``s3://`` warehouse: the data files go to a bucket
of a real S3 server (SeaweedFS), reached through the object store's ``rsm.config.*`` settings
(endpoint, region, keys), while the catalog stays SQLite in the broker's data dir. Every record is in
the table once, across kill -9 of the broker, as pyiceberg and polars read it; the table's metadata
and every data file it names are objects in the bucket, under the warehouse's prefix."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from pyiceberg.catalog import Catalog
from pyiceberg.table import Table

from strom.broker.tiered.config_defs import RSM_PREFIX, plugin_settings
from strom.lake.config_defs import s3_properties
from strom.testing import BrokerProcess
from strom.testing.seaweedfs_process import SeaweedS3Process
from tests.integration.iceberg_readers import rows_or_none, sql_catalog, with_polars
from tests.integration.test_iceberg_rest import across_kill_9
from tests.object_stores import new_bucket, object_keys, seaweedfs

__all__ = ["seaweedfs"]  # the module-scoped S3 server fixture

TOPIC = "page-views"
PREFIX = "lake"


@pytest.fixture
def bucket(seaweedfs: SeaweedS3Process) -> str:
    return new_bucket(seaweedfs)


def _catalog(broker: BrokerProcess, server: SeaweedS3Process, bucket: str) -> Catalog:
    """The broker's catalog as a reader opens it: its SQLite file, and the bucket's S3 settings."""
    rsm = plugin_settings(server.rsm_config(bucket), RSM_PREFIX)
    base = broker.data_dir / "logs" / "iceberg"
    return sql_catalog(base, f"s3://{bucket}/{PREFIX}", s3_properties(rsm))


@pytest.fixture
def broker(seaweedfs: SeaweedS3Process, bucket: str, tmp_path: Path) -> Iterator[BrokerProcess]:
    settings = {
        "strom.iceberg.translation.interval.ms": "100",
        "strom.iceberg.warehouse": f"s3://{bucket}/{PREFIX}",
        **seaweedfs.rsm_config(bucket),
    }
    proc = BrokerProcess(tmp_path / "data", settings)
    proc.start()
    try:
        yield proc
    finally:
        proc.stop()


def test_sql_catalog_with_an_s3_warehouse(
    broker: BrokerProcess, seaweedfs: SeaweedS3Process, bucket: str
) -> None:
    def load() -> Table:
        return _catalog(broker, seaweedfs, bucket).load_table(("strom", TOPIC))

    rows = across_kill_9(broker, TOPIC, lambda columns: rows_or_none(load, columns))
    table = load()
    assert with_polars(table, ["value"], seaweedfs.polars_storage_options()) == rows

    keys = set(object_keys(seaweedfs, bucket, PREFIX + "/"))
    location = f"s3://{bucket}/"
    assert table.metadata_location.startswith(location + PREFIX + "/")
    assert table.metadata_location[len(location) :] in keys
    files = [task.file.file_path for task in table.scan().plan_files()]
    assert files and all(f.startswith(location + PREFIX + "/") and f.endswith(".parquet") for f in files)
    assert {f[len(location) :] for f in files} <= keys
    assert not list((broker.data_dir / "logs" / "iceberg").rglob("*.parquet"))  # nothing local
