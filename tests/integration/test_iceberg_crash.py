"""SIGKILL of a broker inside a translation round, between the data-file write and the catalog commit,
over TCP with confluent-kafka: the test holds the SQL catalog's write lock (SQLite's RESERVED lock:
readers go on, the commit waits), sees the round's Parquet file appear unreferenced, kills the broker,
releases the lock, and after the restart every committed record is in the table exactly once. The
killed round's file, named by no snapshot, is an orphan: the background maintenance deletes it once
it is older than ``strom.iceberg.orphan.file.age.ms``, and every file the table names stays."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlparse

import pytest
from confluent_kafka import Producer

from strom.testing import BrokerProcess
from tests.integration.iceberg_readers import committed_offsets, sql_catalog_table
from tests.integration.test_iceberg_topics import create_topic, table_rows, wait_until

TOPIC = "payments"
ORPHAN_AGE_MS = 20_000  # above any round's write-to-commit time on a loaded machine


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    proc = BrokerProcess(tmp_path / "data", {"strom.iceberg.translation.interval.ms": "100"})
    proc.start()
    try:
        yield proc
    finally:
        proc.stop()


def _produce(broker: BrokerProcess, first: int, count: int) -> None:
    producer = Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": True})
    for i in range(first, first + count):
        producer.produce(TOPIC, value=f"payment-{i}".encode())
    assert producer.flush(30) == 0


def test_sigkill_between_the_data_file_write_and_the_commit_loses_and_doubles_nothing(
    broker: BrokerProcess,
) -> None:
    configs = {
        "strom.iceberg.target.lag.ms": "100",
        "strom.iceberg.compaction.interval.ms": "300",
        "strom.iceberg.orphan.file.age.ms": str(ORPHAN_AGE_MS),
    }
    create_topic(broker, TOPIC, "key_value", configs)
    _produce(broker, 0, 50)
    wait_until(lambda: len(table_rows(broker, TOPIC, [])) == 50, 60, "the first records in the table")
    log_dir = str(broker.data_dir / "logs")
    table = sql_catalog_table(log_dir, TOPIC)
    location = Path(urlparse(table.location()).path)

    def data_files() -> set[Path]:
        return set(location.rglob("*.parquet"))

    before = data_files()
    lock = sqlite3.connect(Path(log_dir) / "iceberg" / "catalog.db", isolation_level=None)
    try:
        lock.execute("BEGIN IMMEDIATE")  # the broker's catalog commit now waits for this lock
        _produce(broker, 50, 50)
        wait_until(lambda: bool(data_files() - before), 60, "the round's data file, its commit held")
        broker.kill()
    finally:
        lock.execute("ROLLBACK")
        lock.close()
    written = data_files() - before
    live = {Path(urlparse(t.file.file_path).path) for t in table.refresh().scan().plan_files()}
    assert written and not written & live  # the round wrote its file and never committed it
    assert len(table_rows(broker, TOPIC, [])) == 50

    broker.start()
    wait_until(lambda: len(table_rows(broker, TOPIC, [])) >= 100, 90, "every record in the table")
    rows = table_rows(broker, TOPIC, ["value"])
    assert [(p, o) for p, o, _ in rows] == committed_offsets(broker.bootstrap, TOPIC, 100)
    assert sorted(v for *_, v in rows) == sorted(f"payment-{i}".encode() for i in range(100))

    wait_until(lambda: not any(path.exists() for path in written), 120, "the orphan deleted")
    live = {Path(urlparse(t.file.file_path).path) for t in table.refresh().scan().plan_files()}
    assert live and all(path.exists() for path in live)
    assert len(table_rows(broker, TOPIC, [])) == 100
