"""An Iceberg topic whose broker writes through a REST catalog (SeaweedFS's ``weed mini``, data files in
its S3 table bucket): every record once in the table across kill -9 of the broker, as pyiceberg and
polars read it through the same catalog."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Producer
from pyiceberg.catalog import load_catalog

from strom.testing import BrokerProcess
from tests.integration.iceberg_readers import committed_offsets, rows_or_none, with_polars
from tests.integration.iceberg_rest_server import IcebergRestServer
from tests.integration.test_iceberg_topics import create_topic, wait_until
from tests.object_stores import serving

TOPIC = "clicks"


@pytest.fixture(scope="module")
def rest_catalog(tmp_path_factory: pytest.TempPathFactory) -> Iterator[IcebergRestServer]:
    with serving(IcebergRestServer(Path(tmp_path_factory.mktemp("weed-mini")))) as server:
        yield server


def _rows(server: IcebergRestServer, columns: list[str]) -> list[tuple[object, ...]]:
    catalog = load_catalog("strom", type="rest", **server.catalog_properties())
    return rows_or_none(lambda: catalog.load_table(("strom", TOPIC)), columns)


def _produce(broker: BrokerProcess, first: int, count: int) -> None:
    producer = Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": True})
    for i in range(first, first + count):
        producer.produce(TOPIC, value=f"click-{i}".encode(), key=str(i).encode())
    assert producer.flush(30) == 0


def test_rest_catalog_on_seaweedfs_survives_kill_9(rest_catalog: IcebergRestServer, tmp_path: Path) -> None:
    broker = BrokerProcess(
        tmp_path / "data", {"strom.iceberg.translation.interval.ms": "100", **rest_catalog.broker_settings()}
    )
    broker.start()
    try:
        create_topic(broker, TOPIC, "key_value")
        _produce(broker, 0, 150)
        wait_until(lambda: len(_rows(rest_catalog, [])) > 0, 60, "the first commit")
        broker.kill()
        broker.start()
        _produce(broker, 150, 150)
        wait_until(lambda: len(_rows(rest_catalog, [])) >= 300, 90, "every record in the table")
        time.sleep(1.0)  # more commit intervals: nothing may arrive twice
        rows = _rows(rest_catalog, ["value"])
        assert [(p, o) for p, o, _ in rows] == committed_offsets(broker.bootstrap, TOPIC, 300)
        assert sorted(v for *_, v in rows) == sorted(f"click-{i}".encode() for i in range(300))
        catalog = load_catalog("strom", type="rest", **rest_catalog.catalog_properties())
        table = catalog.load_table(("strom", TOPIC))
        assert table.metadata_location.startswith("s3://")
        assert with_polars(table, ["value"], rest_catalog.polars_storage_options()) == rows
    finally:
        broker.stop()
