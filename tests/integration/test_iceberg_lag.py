"""``/metrics``' translation lag while a round is in flight, over HTTP from a real broker process: the
test holds the SQL catalog's write lock (SQLite's RESERVED lock; the broker's catalog waits up to ten
minutes for it, through the URI's ``timeout``), so the round of the first records is held at its
commit; records produced meanwhile count in ``strom_iceberg_translation_lag_records`` at once, and
the seconds count the oldest waiting record's wait; released, the table takes them all and the gauges
fall to 0. ``strom topics describe`` shows the same lag, from the partition's leader, meanwhile and
after."""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Producer

from strom.testing import BrokerProcess
from strom.testing.metrics import scrape, value
from tests.integration.strom_cli import strom
from tests.integration.test_iceberg_topics import create_topic, table_rows, wait_until

TOPIC = "slow-commits"


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    catalog = tmp_path / "data" / "logs" / "iceberg" / "catalog.db"
    proc = BrokerProcess(
        tmp_path / "data",
        {
            "strom.iceberg.translation.interval.ms": "100",
            "strom.iceberg.catalog.uri": f"sqlite:///{catalog}?timeout=600",
        },
    )
    proc.start()
    try:
        yield proc
    finally:
        proc.stop()


def _produce(broker: BrokerProcess, count: int) -> None:
    producer = Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": True})
    for i in range(count):
        producer.produce(TOPIC, value=f"v{i}".encode(), partition=0)
    assert producer.flush(30) == 0


def _lag(broker: BrokerProcess) -> tuple[float, float]:
    """Partition 0's lag gauges: records, seconds."""
    assert broker.http_url is not None
    samples = scrape(broker.http_url)
    labels = {"topic": TOPIC, "partition": "0"}
    return (
        value(samples, "strom_iceberg_translation_lag_records", **labels),
        value(samples, "strom_iceberg_translation_lag_seconds", **labels),
    )


def _described(broker: BrokerProcess) -> tuple[int, int, float]:
    """Partition 0's line of ``strom topics describe``: the offset in the table, the lag in records and
    seconds."""
    out = "\n".join(strom(broker.bootstrap, "topics", "describe", TOPIC))
    found = re.search(
        r"\tPartition: 0\t.*\tInTable: (\d+)\tIcebergLag: (\d+) records, ([\d.]+) s$", out, re.M
    )
    assert found is not None, out
    return int(found.group(1)), int(found.group(2)), float(found.group(3))


def test_the_lag_gauges_count_the_records_behind_a_round_in_flight(broker: BrokerProcess) -> None:
    create_topic(broker, TOPIC, "key_value", {"strom.iceberg.target.lag.ms": "100"})
    _produce(broker, 10)
    wait_until(lambda: len(table_rows(broker, TOPIC, [])) == 10, 60, "the first records in the table")
    wait_until(lambda: _lag(broker) == (0.0, 0.0), 60, "no lag once they are in")
    log_dir = broker.data_dir / "logs"
    warehouse = log_dir / "iceberg" / "warehouse"
    before = set(warehouse.rglob("*.parquet"))

    lock = sqlite3.connect(log_dir / "iceberg" / "catalog.db", isolation_level=None)
    try:
        lock.execute("BEGIN IMMEDIATE")  # the broker's next catalog commit waits for this lock
        _produce(broker, 50)
        wait_until(lambda: bool(set(warehouse.rglob("*.parquet")) - before), 60, "a round at its commit")
        _produce(broker, 50)  # while that round waits
        wait_until(lambda: _lag(broker)[0] == 100, 60, "the 100 records not in the table counted")
        wait_until(lambda: _lag(broker)[1] >= 1.0, 60, "the oldest of them a second behind")
        in_table, records, seconds = _described(broker)
        assert (in_table, records) == (10, 100) and seconds >= 1.0
        assert len(table_rows(broker, TOPIC, [])) == 10  # the round is still held
    finally:
        lock.execute("ROLLBACK")
        lock.close()

    wait_until(lambda: len(table_rows(broker, TOPIC, [])) == 110, 90, "every record in the table")
    wait_until(lambda: _lag(broker) == (0.0, 0.0), 60, "no lag left")
    assert _described(broker) == (110, 0, 0.0)
