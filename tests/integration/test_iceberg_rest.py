"""An Iceberg topic whose broker writes through a REST catalog (SeaweedFS's ``weed mini``, data files in
its S3 table bucket): every record once in the table across kill -9 of the broker, as pyiceberg and
polars read it through the same catalog."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from confluent_kafka import Producer
from pyiceberg.catalog import load_catalog

from strom.testing import BrokerProcess
from tests.integration.iceberg_readers import Rows, committed_offsets, rows_or_none, with_polars
from tests.integration.iceberg_rest_server import IcebergRestServer
from tests.integration.test_iceberg_topics import create_topic, wait_until
from tests.object_stores import serving

TOPIC = "clicks"


@pytest.fixture(scope="module")
def rest_catalog(tmp_path_factory: pytest.TempPathFactory) -> Iterator[IcebergRestServer]:
    with serving(IcebergRestServer(Path(tmp_path_factory.mktemp("weed-mini")))) as server:
        yield server


def _rows(server: IcebergRestServer, columns: list[str]) -> Rows:
    catalog = load_catalog("strom", type="rest", **server.catalog_properties())
    return rows_or_none(lambda: catalog.load_table(("strom", TOPIC)), columns)


def _produce(broker: BrokerProcess, topic: str, first: int, count: int) -> None:
    producer = Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": True})
    for i in range(first, first + count):
        producer.produce(topic, value=f"record-{i}".encode(), key=str(i).encode())
    assert producer.flush(30) == 0


def across_kill_9(broker: BrokerProcess, topic: str, rows: Callable[[list[str]], Rows]) -> Rows:
    """A ``key_value`` topic of 300 records, the broker killed with SIGKILL after the first commit:
    every record once in the table (``rows`` reads it), as a read_committed consumer sees the topic.
    The table's (partition, offset, value) rows."""
    create_topic(broker, topic, "key_value")
    _produce(broker, topic, 0, 150)
    wait_until(lambda: len(rows([])) > 0, 60, "the first commit")
    broker.kill()
    broker.start()
    _produce(broker, topic, 150, 150)
    wait_until(lambda: len(rows([])) >= 300, 90, "every record in the table")
    time.sleep(1.0)  # more commit intervals: nothing may arrive twice
    found = rows(["value"])
    assert [(p, o) for p, o, _ in found] == committed_offsets(broker.bootstrap, topic, 300)
    assert sorted(v for *_, v in found) == sorted(f"record-{i}".encode() for i in range(300))
    return found


def test_rest_catalog_on_seaweedfs_survives_kill_9(rest_catalog: IcebergRestServer, tmp_path: Path) -> None:
    broker = BrokerProcess(
        tmp_path / "data", {"strom.iceberg.translation.interval.ms": "100", **rest_catalog.broker_settings()}
    )
    broker.start()
    try:
        rows = across_kill_9(broker, TOPIC, lambda columns: _rows(rest_catalog, columns))
        catalog = load_catalog("strom", type="rest", **rest_catalog.catalog_properties())
        table = catalog.load_table(("strom", TOPIC))
        assert table.metadata_location.startswith("s3://")
        assert with_polars(table, ["value"], rest_catalog.polars_storage_options()) == rows
    finally:
        broker.stop()
