"""An Iceberg topic of Protobuf values over TCP: confluent-kafka's ProtobufSerializer against Strom's
registry (the message imports a file registered as a reference, and a well-known type), two compatible
versions whose second adds columns; a value naming a message the schema lacks and a value whose bytes
do not parse go to the dead-letter table; pyiceberg and DuckDB read the same typed rows."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.protobuf import ProtobufSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from strom.lake.protobuf_wire import encode_indexes
from strom.testing import BrokerProcess
from tests.integration.iceberg_readers import committed_offsets, sql_catalog_table, with_duckdb
from tests.integration.test_iceberg_topics import create_topic, table_rows, wait_until
from tests.integration.test_registry_formats import ADDRESS_PROTO, ORDER_PROTO_V1, message_class

# Compatible: two fields added.
ORDER_PROTO_V2 = ORDER_PROTO_V1.replace(
    "  oneof", "  repeated string items = 6;\n  optional string note = 7;\n  oneof"
)


def order_classes(tmp_path: Path) -> tuple[Any, Any]:
    """The message classes of ``shop.Order`` in its two versions (protoc's descriptors, no modules)."""
    classes = []
    for version, text in (("v1", ORDER_PROTO_V1), ("v2", ORDER_PROTO_V2)):
        (tmp_path / version).mkdir()
        files = {"address.proto": ADDRESS_PROTO, "order.proto": text}
        classes.append(message_class(tmp_path / version, files, "order.proto", "shop.Order"))
    return classes[0], classes[1]


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    proc = BrokerProcess(
        tmp_path_factory.mktemp("iceberg-protobuf") / "data", {"strom.iceberg.translation.interval.ms": "100"}
    )
    proc.start()
    try:
        yield proc
    finally:
        proc.stop()


def test_protobuf_values_become_typed_columns_that_evolve(broker: BrokerProcess, tmp_path: Path) -> None:
    topic = "orders-pb"
    create_topic(broker, topic, "value_schema_id_prefix")
    assert broker.http_url is not None
    registry = SchemaRegistryClient({"url": broker.http_url})
    order_v1, order_v2 = order_classes(tmp_path)
    context = SerializationContext(topic, MessageField.VALUE)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": True})
    first = ProtobufSerializer(order_v1, registry)
    for i in range(20):
        order = order_v1(id=i, card=f"c{i}")
        order.to.city = "Oslo"
        order.at.seconds = 1_700_000_000 + i
        producer.produce(topic, first(order, context))
    second = ProtobufSerializer(order_v2, registry)
    for i in range(20, 40):
        producer.produce(topic, second(order_v2(id=i, voucher=f"v{i}", items=["tea"], note=f"n{i}"), context))
    valid = first(order_v1(id=99), context)
    no_such_message = valid[:5] + encode_indexes([3]) + valid[6:]
    cut_short = valid[:6] + b"\x0a\xff"  # a length-delimited field longer than what follows
    producer.produce(topic, no_such_message, partition=0)
    producer.produce(topic, cut_short, partition=1)
    assert producer.flush(30) == 0

    wait_until(lambda: len(table_rows(broker, topic, [])) >= 40, 90, "every record in the table")
    wait_until(lambda: len(table_rows(broker, topic + "~dlq", [])) >= 2, 60, "the dead letters")
    columns = ["id", "to", "at", "card", "voucher", "items", "note"]
    rows = table_rows(broker, topic, columns)
    dead = table_rows(broker, topic + "~dlq", ["value", "reason"])
    assert sorted([(p, o) for p, o, *_ in rows] + [(p, o) for p, o, *_ in dead]) == committed_offsets(
        broker.bootstrap, topic, 42
    )
    by_id = {r[2]: r[3:] for r in rows}
    at = dt.datetime(2023, 11, 14, 22, 13, 23, tzinfo=dt.UTC)
    assert by_id[3] == ({"city": "Oslo", "zip": ""}, at, "c3", None, None, None)  # before the new columns
    assert by_id[25] == (None, None, None, "v25", ["tea"], "n25")
    reasons = {bytes(r[2]): r[3] for r in dead}
    assert "message index 3 is not in the schema" in reasons[no_such_message]
    assert "does not decode" in reasons[cut_short]

    table = sql_catalog_table(str(broker.data_dir / "logs"), topic)
    types = {f.name: str(f.field_type) for f in table.refresh().schema().fields}
    assert (types["id"], types["at"], types["items"]) == ("long", "timestamptz", "list<string>")
    assert types["to"].startswith("struct<")
    scalar_columns = ["id", "card", "voucher", "note"]
    assert with_duckdb(table, scalar_columns) == table_rows(broker, topic, scalar_columns)
