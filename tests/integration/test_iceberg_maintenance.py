"""An Iceberg topic's table maintenance on one broker, over TCP with confluent-kafka: many small commits
are compacted into fewer files with every record still exactly once (pyiceberg and DuckDB read the same
rows); snapshots older than the retention are expired and the files only they named deleted; a broker
killed with SIGKILL after that resumes from the table's offsets (kept in a table property, which expiry
does not remove) without writing a record twice. Deleting a topic drops its tables (topic and
dead-letter), and the topic created again starts from offset 0; with ``strom.iceberg.delete=false`` the
table stays, and is moved aside when the topic is created again. The console's topic page shows each
partition's translation lag (in headless Chromium too)."""

from __future__ import annotations

import re
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient
from pyiceberg.exceptions import NoSuchTableError
from pyiceberg.table import Table
from selenium.webdriver.common.by import By

from strom.lake import offsets
from strom.lake.tables import TOPIC_ID_KEY
from strom.testing import BrokerProcess
from tests.browser import chromium, screenshot
from tests.integration.iceberg_readers import committed_offsets, sql_catalog_table, with_duckdb
from tests.integration.test_iceberg_topics import (
    PARTITIONS,
    V1,
    create_topic,
    produce_avro,
    table_rows,
    wait_until,
)

TOPIC = "sensor-readings"
BURSTS = 12
PER_BURST = 20
MIN_FILES = 4
HOUR_MS = int(time.time()) // 3600 * 3600 * 1000  # the start of the hour this module was loaded in


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    proc = BrokerProcess(
        tmp_path_factory.mktemp("iceberg-maintenance") / "data",
        {"strom.iceberg.translation.interval.ms": "100"},
    )
    proc.start()
    try:
        yield proc
    finally:
        proc.stop()


def _produce_values(broker: BrokerProcess, topic: str, values: list[str]) -> None:
    """The values spread over the partitions in turn."""
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    for i, value in enumerate(values):
        producer.produce(topic, value.encode(), partition=i % PARTITIONS)
    assert producer.flush(30) == 0


def _produce(broker: BrokerProcess, first: int, count: int) -> None:
    """Records all timestamped in the same hour (one table partition), whenever the test runs."""
    producer = Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": True})
    for i in range(first, first + count):
        producer.produce(
            TOPIC, value=f"reading-{i}".encode(), partition=i % PARTITIONS, timestamp=HOUR_MS + i
        )
    assert producer.flush(30) == 0


def _table(broker: BrokerProcess, name: str = TOPIC) -> Table:
    return sql_catalog_table(str(broker.data_dir / "logs"), name).refresh()


def _live_files(table: Table) -> set[str]:
    return {task.file.file_path for task in table.scan().plan_files()}


def _on_disk(uri: str) -> bool:
    return Path(urlparse(uri).path).exists()


def test_compaction_and_expiry_keep_every_record_once_across_a_restart(broker: BrokerProcess) -> None:
    create_topic(
        broker,
        TOPIC,
        "key_value",
        {
            "strom.iceberg.target.lag.ms": "100",
            "strom.iceberg.compaction.interval.ms": "1500",
            "strom.iceberg.compaction.min.files": str(MIN_FILES),
            "strom.iceberg.snapshot.retention.ms": "1000",
        },
    )
    first_files: set[str] = set()
    first_manifest_list = ""
    for burst in range(BURSTS):  # one commit or more per burst: many small files
        _produce(broker, burst * PER_BURST, PER_BURST)
        expected = (burst + 1) * PER_BURST
        wait_until(lambda n=expected: len(table_rows(broker, TOPIC, [])) >= n, 60, f"{expected} rows")
        if burst == 0:
            table = _table(broker)
            first_files = _live_files(table)
            snapshot = table.current_snapshot()
            assert snapshot is not None
            first_manifest_list = snapshot.manifest_list
    total = BURSTS * PER_BURST

    def compacted_and_expired() -> bool:
        table = _table(broker)
        files = _live_files(table)
        return len(table.metadata.snapshots) == 1 and len(files) < MIN_FILES

    wait_until(compacted_and_expired, 90, "the small files compacted and old snapshots expired")
    table = _table(broker)
    assert not first_files & _live_files(table)  # the first commits' files were rewritten ...
    assert not any(_on_disk(path) for path in first_files)  # ... and deleted once no snapshot named them
    assert not _on_disk(first_manifest_list)
    rows = table_rows(broker, TOPIC, ["value"])
    assert [(p, o) for p, o, _ in rows] == committed_offsets(broker.bootstrap, TOPIC, total)
    assert sorted(v for *_, v in rows) == sorted(f"reading-{i}".encode() for i in range(total))
    assert with_duckdb(table, ["value"]) == rows
    recorded = offsets.recorded(table.metadata.properties, [])
    assert recorded == dict.fromkeys(range(PARTITIONS), total // PARTITIONS)

    broker.kill()  # after expiry: the restarted broker resumes from the table property
    broker.start()
    _produce(broker, total, PER_BURST * 3)
    total += PER_BURST * 3
    wait_until(lambda: len(table_rows(broker, TOPIC, [])) >= total, 90, "every record in the table")
    wait_until(lambda: len(_table(broker).metadata.snapshots) == 1, 60, "the new snapshots expired")
    rows = table_rows(broker, TOPIC, ["value"])
    assert [(p, o) for p, o, _ in rows] == committed_offsets(broker.bootstrap, TOPIC, total)
    assert sorted(v for *_, v in rows) == sorted(f"reading-{i}".encode() for i in range(total))


def _exists(broker: BrokerProcess, name: str) -> bool:
    try:
        _table(broker, name)
    except NoSuchTableError:
        return False
    return True


def _delete_and_create_again(broker: BrokerProcess, topic: str, mode: str) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.delete_topics([topic])[topic].result(30)

    def created() -> bool:
        try:
            create_topic(broker, topic, mode)
        except KafkaException as exc:  # still being deleted
            assert exc.args[0].code() == KafkaError.TOPIC_ALREADY_EXISTS, exc
            return False
        return True

    wait_until(created, 60, f"{topic} created again")


def test_a_deleted_topics_tables_are_dropped_and_it_starts_again_at_offset_0(broker: BrokerProcess) -> None:
    topic = "shipments"
    create_topic(broker, topic, "value_schema_id_prefix")
    produce_avro(broker, topic, V1, [{"id": i, "item": f"old-{i}"} for i in range(10)])
    raw = Producer({"bootstrap.servers": broker.bootstrap})
    raw.produce(topic, b"no schema", partition=0)
    assert raw.flush(30) == 0
    wait_until(lambda: len(table_rows(broker, topic, [])) == 10, 60, "the first records in the table")
    wait_until(lambda: len(table_rows(broker, topic + "~dlq", [])) == 1, 60, "the dead letter")
    old_files = _live_files(_table(broker, topic)) | _live_files(_table(broker, topic + "~dlq"))

    _delete_and_create_again(broker, topic, "value_schema_id_prefix")
    wait_until(lambda: not _exists(broker, topic + "~dlq"), 60, "the dead-letter table dropped")
    # A purge drops the catalog entry first and deletes the files after it.
    wait_until(lambda: not any(_on_disk(path) for path in old_files), 60, "the old tables' files deleted")
    produce_avro(broker, topic, V1, [{"id": i, "item": f"new-{i}"} for i in range(6)])
    wait_until(lambda: len(table_rows(broker, topic, [])) >= 6, 60, "the new topic's records")
    rows = table_rows(broker, topic, ["item"])
    assert [(p, o) for p, o, _ in rows] == committed_offsets(broker.bootstrap, topic, 6)
    assert sorted(item for *_, item in rows) == sorted(f"new-{i}" for i in range(6))
    assert not _exists(broker, topic + "~dlq")


def test_a_kept_table_is_moved_aside_when_its_topic_is_created_again(broker: BrokerProcess) -> None:
    topic = "returns"
    create_topic(broker, topic, "key_value", {"strom.iceberg.delete": "false"})
    _produce_values(broker, topic, [f"old-{i}" for i in range(6)])
    wait_until(lambda: len(table_rows(broker, topic, [])) == 6, 60, "the first records in the table")
    old_id = _table(broker, topic).properties[TOPIC_ID_KEY]

    _delete_and_create_again(broker, topic, "key_value")
    _produce_values(broker, topic, [f"new-{i}" for i in range(3)])
    wait_until(lambda: _exists(broker, f"{topic}~{old_id}"), 60, "the old table moved aside")
    wait_until(lambda: len(table_rows(broker, topic, [])) >= 3, 60, "the new topic's records")
    assert sorted(v for *_, v in table_rows(broker, topic, ["value"])) == [b"new-0", b"new-1", b"new-2"]
    kept = table_rows(broker, f"{topic}~{old_id}", ["value"])
    assert sorted(v for *_, v in kept) == [f"old-{i}".encode() for i in range(6)]


def console_lag(http_url: str | None, topic: str) -> dict[int, list[str]]:
    """Partition → its row's cells in the console's Iceberg translation lag table (records not in the
    table, seconds behind, next offset in the table, rows, dead letters, translated by), from the
    topic page over HTTP."""
    with urllib.request.urlopen(f"{http_url}/ui/topics/{topic}", timeout=30) as answer:
        found = re.search(r'<table id="lake-lag">.*?<tbody>(.*?)</tbody>', answer.read().decode())
    if found is None:
        return {}
    cells = [re.findall(r"<td>(.*?)</td>", row) for row in found.group(1).split("</tr>") if row]
    return {int(c[0]): c[1:] for c in cells}


def _console_lag(broker: BrokerProcess, topic: str) -> dict[int, int]:
    """Partition → records not in the table (-1: unknown), from the console's topic page."""
    lag = console_lag(broker.http_url, topic)
    return {p: int(cells[0]) if cells[0].isdigit() else -1 for p, cells in lag.items()}


def test_the_console_shows_each_partitions_translation_lag(broker: BrokerProcess) -> None:
    topic = "slow-lane"
    create_topic(broker, topic, "key_value", {"strom.iceberg.target.lag.ms": "600000"})
    _produce_values(broker, topic, [f"first-{i}" for i in range(6)])  # each partition's first round
    wait_until(lambda: len(table_rows(broker, topic, [])) == 6, 60, "the first rounds' commits")
    _produce_values(broker, topic, [f"waiting-{i}" for i in range(9)])  # the next commits: 10 min away
    wait_until(
        lambda: _console_lag(broker, topic) == dict.fromkeys(range(PARTITIONS), 3),
        60,
        "3 records of lag per partition on the page",
    )
    assert len(table_rows(broker, topic, [])) == 6
    with chromium() as driver:  # as a person sees it
        d: Any = driver
        d.get(f"{broker.http_url}/ui/topics/{topic}")
        rows = [r.text.split()[:2] for r in d.find_elements(By.CSS_SELECTOR, "#lake-lag tbody tr")]
        assert rows == [[str(p), "3"] for p in range(PARTITIONS)], rows
        screenshot(d, "topic-lake-lag")
