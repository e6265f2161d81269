"""Iceberg topics on one broker with the default SQL catalog, over TCP with confluent-kafka: Avro
values under three compatible schema versions (AvroSerializer) become typed columns, read the same by
pyiceberg, DuckDB and polars; every committed record once, aborted transactions left out; a value
without a schema goes to the dead-letter table; kill -9 of the broker mid-run changes nothing;
``key_value`` keeps keys, values and headers as bytes; JSON Schema values (JSONSerializer) become typed
columns too, and a new schema version adds columns."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.schema_registry.json_schema import JSONSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from strom.testing import BrokerProcess
from tests.integration.iceberg_readers import (
    committed_offsets,
    rows_or_none,
    sql_catalog_table,
    with_duckdb,
    with_polars,
)

V1 = {
    "type": "record",
    "name": "Order",
    "namespace": "shop",
    "fields": [{"name": "id", "type": "int"}, {"name": "item", "type": "string"}],
}
V2 = {
    "type": "record",
    "name": "Order",
    "namespace": "shop",
    "fields": [*V1["fields"], {"name": "qty", "type": "int", "default": 1}],
}
V3 = {  # id widened from int to long: a compatible promotion
    "type": "record",
    "name": "Order",
    "namespace": "shop",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "item", "type": "string"},
        {"name": "qty", "type": "int", "default": 1},
        {"name": "note", "type": ["null", "string"], "default": None},
    ],
}
PARTITIONS = 3


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    proc = BrokerProcess(
        tmp_path_factory.mktemp("iceberg") / "data",
        {"strom.iceberg.translation.interval.ms": "100", "group.initial.rebalance.delay.ms": "0"},
    )
    proc.start()
    try:
        yield proc
    finally:
        proc.stop()


def create_topic(broker: BrokerProcess, topic: str, mode: str, configs: dict[str, str] | None = None) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    configs = {"strom.iceberg.mode": mode, "strom.iceberg.target.lag.ms": "300", **(configs or {})}
    for future in admin.create_topics([NewTopic(topic, PARTITIONS, 1, config=configs)]).values():
        future.result(30)


def wait_until(check: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.3)


def produce_avro(
    broker: BrokerProcess, topic: str, schema: dict[str, Any], values: list[dict[str, Any]]
) -> None:
    assert broker.http_url is not None
    serializer = AvroSerializer(SchemaRegistryClient({"url": broker.http_url}), json.dumps(schema))
    producer = Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": True})
    for value in values:
        context = SerializationContext(topic, MessageField.VALUE)
        producer.produce(topic, serializer(value, context), key=str(value["id"]).encode())
    assert producer.flush(30) == 0


def produce_aborted(broker: BrokerProcess, topic: str, values: list[bytes]) -> None:
    producer = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": f"{topic}-aborting"})
    producer.init_transactions(30)
    producer.begin_transaction()
    for value in values:
        producer.produce(topic, value)
    producer.flush(30)
    producer.abort_transaction(30)


def table_rows(broker: BrokerProcess, name: str, columns: list[str]) -> list[tuple[Any, ...]]:
    return rows_or_none(lambda: sql_catalog_table(str(broker.data_dir / "logs"), name), columns)


def test_avro_topic_in_three_schema_versions_survives_kill_9(broker: BrokerProcess) -> None:
    topic = "orders"
    create_topic(broker, topic, "value_schema_id_prefix")
    v1 = [{"id": i, "item": f"a{i}"} for i in range(60)]
    v2 = [{"id": i, "item": f"b{i}", "qty": i % 5} for i in range(60, 120)]
    produce_avro(broker, topic, V1, v1)
    produce_avro(broker, topic, V2, v2)
    produce_aborted(broker, topic, [b"aborted-1", b"aborted-2", b"aborted-3"])
    wait_until(lambda: len(table_rows(broker, topic, [])) > 0, 60, "the first commit")
    broker.kill()  # mid-run: whatever was committed stays, the rest is translated again
    broker.start()
    v3 = [{"id": 2**33 + i, "item": f"c{i}", "qty": 7, "note": f"n{i}"} for i in range(60)]
    produce_avro(broker, topic, V3, v3)
    bad = Producer({"bootstrap.servers": broker.bootstrap})
    bad.produce(topic, b"no schema here", partition=1)
    assert bad.flush(30) == 0
    expected = 180
    wait_until(lambda: len(table_rows(broker, topic, [])) >= expected, 90, "every record in the table")
    wait_until(lambda: len(table_rows(broker, topic + "~dlq", [])) >= 1, 60, "the dead letter")
    time.sleep(1.0)  # one more commit interval: nothing may arrive twice

    columns = ["id", "item", "qty", "note"]
    rows = table_rows(broker, topic, columns)
    table = sql_catalog_table(str(broker.data_dir / "logs"), topic)
    assert with_duckdb(table, columns) == rows
    assert with_polars(table, columns) == rows
    positions = [(p, o) for p, o, *_ in rows]
    assert len(set(positions)) == len(positions) == expected
    consumed = committed_offsets(broker.bootstrap, topic, expected + 1)
    dead = table_rows(broker, topic + "~dlq", ["value", "reason"])
    assert sorted(positions + [(p, o) for p, o, *_ in dead]) == consumed
    by_id = {r[2]: r[3:] for r in rows}
    assert by_id[5] == ("a5", None, None)  # V1: later fields null
    assert by_id[61] == ("b61", 1, None)
    assert by_id[2**33 + 3] == ("c3", 7, "n3")
    assert [(r[2], "prefix" in r[3]) for r in dead] == [(b"no schema here", True)]
    types = {f.name: str(f.field_type) for f in table.refresh().schema().fields}
    assert types["id"] == "long" and types["timestamp"] == "timestamptz"


def test_key_value_topic_keeps_bytes_and_headers(broker: BrokerProcess) -> None:
    topic = "raw-events"
    create_topic(broker, topic, "key_value")
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(90):
        producer.produce(
            topic, value=f"value-{i}".encode(), key=f"key-{i}".encode(), headers=[("source", b"test")]
        )
    assert producer.flush(30) == 0
    wait_until(lambda: len(table_rows(broker, topic, [])) >= 90, 60, "every record in the table")
    rows = table_rows(broker, topic, ["key", "value", "headers"])
    assert sorted(r[3] for r in rows) == sorted(f"value-{i}".encode() for i in range(90))
    assert all(r[2] == r[3].replace(b"value", b"key") for r in rows)
    assert all(r[4] == [{"key": "source", "value": b"test"}] for r in rows)
    assert [(p, o) for p, o, *_ in rows] == committed_offsets(broker.bootstrap, topic, 90)


JSON_V1 = {
    "type": "object",
    "properties": {"id": {"type": "integer"}, "item": {"type": "string"}},
    "required": ["id"],
}
JSON_V2 = {  # adds two columns: a number and an object
    "type": "object",
    "properties": {
        **JSON_V1["properties"],
        "qty": {"type": "integer"},
        "where": {"type": "object", "properties": {"lat": {"type": "number"}, "lon": {"type": "number"}}},
    },
    "required": ["id"],
}


def test_json_schema_values_become_columns_that_evolve(broker: BrokerProcess) -> None:
    topic = "orders-json"
    create_topic(broker, topic, "value_schema_id_prefix")
    assert broker.http_url is not None
    registry = SchemaRegistryClient({"url": broker.http_url})
    registry.set_compatibility(subject_name=f"{topic}-value", level="NONE")
    producer = Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": True})
    context = SerializationContext(topic, MessageField.VALUE)
    first = JSONSerializer(json.dumps(JSON_V1), registry)
    for i in range(20):
        producer.produce(topic, first({"id": i, "item": f"a{i}"}, context))
    second = JSONSerializer(json.dumps(JSON_V2), registry)
    for i in range(20, 40):
        producer.produce(
            topic, second({"id": i, "item": f"b{i}", "qty": i, "where": {"lat": 1.5, "lon": i}}, context)
        )
    undecodable = first({"id": 99, "item": "x"}, context)[:5] + b"{not json"
    producer.produce(topic, undecodable, partition=0)
    assert producer.flush(30) == 0
    wait_until(lambda: len(table_rows(broker, topic, [])) >= 40, 60, "every record in the table")
    wait_until(lambda: len(table_rows(broker, topic + "~dlq", [])) >= 1, 60, "the dead letter")
    rows = table_rows(broker, topic, ["id", "item", "qty", "where"])
    dead = table_rows(broker, topic + "~dlq", ["value", "reason"])
    assert sorted([(p, o) for p, o, *_ in rows] + [(p, o) for p, o, *_ in dead]) == committed_offsets(
        broker.bootstrap, topic, 41
    )
    by_id = {r[2]: r[3:] for r in rows}
    assert by_id[3] == ("a3", None, None)  # written before the columns existed
    assert by_id[25] == ("b25", 25, {"lat": 1.5, "lon": 25.0})
    assert [(r[2], "decode" in r[3]) for r in dead] == [(undecodable, True)]
    table = sql_catalog_table(str(broker.data_dir / "logs"), topic)
    types = {f.name: str(f.field_type) for f in table.refresh().schema().fields}
    assert (types["id"], types["qty"]) == ("long", "long") and types["where"].startswith("struct<")
