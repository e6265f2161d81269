"""JSON Schema and Protobuf on a 3-broker cluster: confluent-kafka's ProtobufSerializer registers (with
a reference) through a broker that is not the registry writer, ProtobufDeserializer reads through
another, a refused evolution is relayed from the writer, and every broker serves the same schemas."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.schema_registry import Schema, SchemaReference, SchemaRegistryClient
from confluent_kafka.schema_registry.error import SchemaRegistryError
from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer, ProtobufSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from strom.testing.cluster import LocalCluster
from tests.cluster.conftest import wait_until
from tests.integration.registry_http import call
from tests.integration.test_registry_formats import ADDRESS_PROTO, ORDER_PROTO_V1, message_class

_groups = itertools.count()


def test_protobuf_and_json_schema_through_every_broker(make_cluster: Any, tmp_path: Path) -> None:
    cluster: LocalCluster = make_cluster(3, offsets_topic_replication_factor="2")
    urls = [str(cluster.brokers[i].http_url) for i in sorted(cluster.brokers)]
    order = message_class(
        tmp_path, {"address.proto": ADDRESS_PROTO, "order.proto": ORDER_PROTO_V1}, "order.proto", "shop.Order"
    )
    context = SerializationContext("orders-pb", MessageField.VALUE)
    serialize = ProtobufSerializer(order, SchemaRegistryClient({"url": urls[1]}))
    value = order(id=9, card="4111")
    value.to.city = "Oslo"
    producer = Producer({"bootstrap.servers": cluster.bootstrap})
    payload = wait_until(lambda: serialize(value, context), timeout_s=60, what="the first registration")
    producer.produce("orders-pb", payload)
    assert producer.flush(30) == 0

    reader = SchemaRegistryClient({"url": urls[2]})
    deserialize = ProtobufDeserializer(order, {}, schema_registry_client=reader)
    consumer = Consumer(
        {
            "bootstrap.servers": cluster.bootstrap,
            "group.id": f"g{next(_groups)}",
            "auto.offset.reset": "earliest",
        }
    )
    consumer.subscribe(["orders-pb"])
    got = None
    try:
        for _ in range(120):
            message = consumer.poll(0.5)
            if message is not None and not message.error():
                got = deserialize(message.value(), context)
                break
    finally:
        consumer.close()
    assert got is not None and (got.id, got.to.city, got.card) == (9, "Oslo", "4111")

    refs = [SchemaReference("address.proto", "address.proto", 1)]
    changed = ORDER_PROTO_V1.replace("int64 id = 1", "double id = 1")
    with pytest.raises(SchemaRegistryError) as refused:  # refused by the writer, relayed by broker 2
        reader.register_schema("orders-pb-value", Schema(changed, "PROTOBUF", refs))
    assert refused.value.http_status_code == 409
    assert "FIELD_SCALAR_KIND_CHANGED" in refused.value.error_message

    closed = {"type": "object", "properties": {"a": {"type": "string"}}, "additionalProperties": False}
    json_id = SchemaRegistryClient({"url": urls[0]}).register_schema(
        "j-value", Schema(json.dumps(closed), "JSON")
    )
    narrower = {"type": "object", "properties": {}, "additionalProperties": False}
    verdict = call(
        urls[2],
        "POST",
        "/compatibility/subjects/j-value/versions/latest?verbose=true",
        {"schema": json.dumps(narrower), "schemaType": "JSON"},
    )[2]
    assert verdict["is_compatible"] is False
    assert verdict["messages"][0].startswith("PROPERTY_REMOVED_FROM_CLOSED_CONTENT_MODEL")

    order_id = reader.get_latest_version("orders-pb-value").schema_id

    def same_everywhere() -> bool:
        answers = [
            (
                call(u, "GET", f"/schemas/ids/{order_id}?format=serialized")[2],
                call(u, "GET", f"/schemas/ids/{json_id}")[2],
            )
            for u in urls
        ]
        return answers[0] == answers[1] == answers[2] and "schema" in answers[0][0]

    wait_until(same_everywhere, what="the same schemas on every broker")
