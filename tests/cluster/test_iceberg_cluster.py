"""An Iceberg topic on a 3-broker cluster (ZooKeeper, three broker processes, one SQL catalog they
share): Avro records under three compatible schema versions from confluent-kafka's AvroSerializer; the
leader of a partition is killed with SIGKILL twice during the run, and the new leaders resume from the
table's offsets. The table holds every committed record exactly once with typed columns, DuckDB,
pyiceberg and polars read the same rows, and the undecodable record is in the dead-letter table."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from strom.testing.cluster import LocalCluster
from tests.cluster.conftest import partitions_of, wait_until
from tests.integration.iceberg_readers import (
    committed_offsets,
    rows_or_none,
    sql_catalog,
    with_duckdb,
    with_polars,
)
from tests.integration.test_iceberg_topics import V1, V2, V3

TOPIC = "orders"


def lake_rows(catalog_dir: Path, name: str, columns: list[str]) -> list[tuple[Any, ...]]:
    return rows_or_none(lambda: sql_catalog(catalog_dir).load_table(("strom", name)), columns)


def _produce(cluster: LocalCluster, schema: dict[str, Any], values: list[dict[str, Any]]) -> None:
    live = next(b for b in cluster.brokers.values() if b.proc is not None)
    assert live.http_url is not None
    serializer = AvroSerializer(SchemaRegistryClient({"url": live.http_url}), json.dumps(schema))
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "enable.idempotence": True})
    for value in values:
        producer.produce(TOPIC, serializer(value, SerializationContext(TOPIC, MessageField.VALUE)))
    assert producer.flush(60) == 0


def _kill_leader_of(cluster: LocalCluster, partition: int) -> int:
    leader = partitions_of(cluster.bootstrap, TOPIC)[partition][0]
    cluster.brokers[leader].kill()
    wait_until(
        lambda: partitions_of(cluster.bootstrap, TOPIC)[partition][0] not in (-1, leader), 60, "a new leader"
    )
    return leader


def lake_cluster(make_cluster: Callable[..., Any], tmp_path: Path, brokers: int) -> tuple[LocalCluster, Path]:
    """A cluster whose brokers share one SQL catalog (SQLite) and warehouse, in the directory returned."""
    catalog_dir = tmp_path / "shared-catalog"
    catalog_dir.mkdir()
    cluster: LocalCluster = make_cluster(
        brokers,
        **{
            "strom.iceberg.catalog.uri": f"sqlite:///{catalog_dir}/catalog.db",
            "strom.iceberg.warehouse": str(catalog_dir / "warehouse"),
            "strom.iceberg.translation.interval.ms": "100",
        },
    )
    return cluster, catalog_dir


def test_leader_killed_twice_changes_nothing_in_the_table(
    make_cluster: Callable[..., Any], tmp_path: Path
) -> None:
    cluster, catalog_dir = lake_cluster(make_cluster, tmp_path, 3)
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    configs = {
        "strom.iceberg.mode": "value_schema_id_prefix",
        "strom.iceberg.target.lag.ms": "300",
        "min.insync.replicas": "2",
    }
    for future in admin.create_topics([NewTopic(TOPIC, 3, 3, config=configs)]).values():
        future.result(30)

    _produce(cluster, V1, [{"id": i, "item": f"a{i}"} for i in range(100)])
    wait_until(lambda: len(lake_rows(catalog_dir, TOPIC, [])) > 0, 60, "the first commit")
    first = _kill_leader_of(cluster, 0)
    _produce(cluster, V2, [{"id": i, "item": f"b{i}", "qty": 2} for i in range(100, 200)])
    cluster.brokers[first].start()
    cluster.wait_for_brokers(3)
    wait_until(lambda: len(lake_rows(catalog_dir, TOPIC, [])) >= 150, 90, "rows after the first kill")
    _kill_leader_of(cluster, 1)
    _produce(cluster, V3, [{"id": 2**40 + i, "item": f"c{i}", "qty": 3, "note": "n"} for i in range(100)])
    bad = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
    bad.produce(TOPIC, b"\x00\x00\x00\x7f\xffnot a registered schema", partition=2)
    assert bad.flush(60) == 0

    expected = 300
    wait_until(lambda: len(lake_rows(catalog_dir, TOPIC, [])) >= expected, 120, "every record in the table")
    wait_until(lambda: len(lake_rows(catalog_dir, TOPIC + "~dlq", [])) >= 1, 90, "the dead letter")
    time.sleep(1.5)  # a few more commit intervals: nothing may arrive twice

    columns = ["id", "item", "qty", "note"]
    rows = lake_rows(catalog_dir, TOPIC, columns)
    table = sql_catalog(catalog_dir).load_table(("strom", TOPIC))
    assert with_duckdb(table, columns) == rows
    assert with_polars(table, columns) == rows
    positions = [(p, o) for p, o, *_ in rows]
    assert len(set(positions)) == len(positions) == expected
    dead = lake_rows(catalog_dir, TOPIC + "~dlq", ["reason"])
    assert len(dead) == 1 and "not in the registry" in dead[0][2]
    assert sorted(positions + [(p, o) for p, o, *_ in dead]) == committed_offsets(
        cluster.bootstrap, TOPIC, expected + 1
    )
    by_id = {r[2]: r[3:] for r in rows}
    assert by_id[7] == ("a7", None, None)
    assert by_id[150] == ("b150", 2, None)
    assert by_id[2**40 + 9] == ("c9", 3, "n")
