"""JSON Schema and Protobuf through a real broker's registry, judged by confluent-kafka's own
JSONSerializer / JSONDeserializer and ProtobufSerializer / ProtobufDeserializer (unmodified):
references across subjects, evolution refused and accepted, and the REST API's answers."""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.schema_registry import Schema, SchemaReference, SchemaRegistryClient
from confluent_kafka.schema_registry.error import SchemaRegistryError
from confluent_kafka.schema_registry.json_schema import JSONDeserializer, JSONSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from strom.testing import BrokerProcess
from tests.integration.registry_http import call

_groups = itertools.count()

ADDRESS = {
    "type": "object",
    "properties": {"city": {"type": "string"}, "zip": {"type": "string"}},
    "required": ["city"],
}
ORDER_V1 = {
    "type": "object",
    "properties": {"id": {"type": "integer"}, "to": {"$ref": "address.json"}},
    "required": ["id", "to"],
    "additionalProperties": False,
}
ORDER_V2 = {  # a closed model may gain an optional property: old data never carried it
    **ORDER_V1,
    "properties": {**ORDER_V1["properties"], "note": {"type": "string"}},
}


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    proc = BrokerProcess(
        tmp_path_factory.mktemp("formats") / "data", {"group.initial.rebalance.delay.ms": "0"}
    )
    proc.start()
    try:
        yield proc
    finally:
        proc.stop()


def client(broker: BrokerProcess) -> SchemaRegistryClient:
    assert broker.http_url is not None
    return SchemaRegistryClient({"url": broker.http_url})


def produce(broker: BrokerProcess, topic: str, serialize: Callable[..., Any], values: list[Any]) -> None:
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    for value in values:
        producer.produce(topic, serialize(value, SerializationContext(topic, MessageField.VALUE)))
    assert producer.flush(30) == 0


def consume(broker: BrokerProcess, topic: str, count: int, deserialize: Callable[..., Any]) -> list[Any]:
    consumer = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": f"g-{next(_groups)}",
            "auto.offset.reset": "earliest",
        }
    )
    consumer.subscribe([topic])
    out: list[Any] = []
    try:
        for _ in range(60):
            if len(out) >= count:
                break
            msg = consumer.poll(0.5)
            if msg is None or msg.error():
                continue
            out.append(deserialize(msg.value(), SerializationContext(topic, MessageField.VALUE)))
    finally:
        consumer.close()
    return out


def test_schema_types_lists_every_format(broker: BrokerProcess) -> None:
    assert broker.http_url is not None
    assert call(broker.http_url, "GET", "/schemas/types")[2] == ["AVRO", "JSON"]


def test_json_schema_with_references_produce_consume_and_evolve(broker: BrokerProcess) -> None:
    url, registry = broker.http_url, client(broker)
    assert url is not None
    address_id = registry.register_schema("address", Schema(json.dumps(ADDRESS), "JSON"))
    refs = [SchemaReference("address.json", "address", 1)]
    v1 = Schema(json.dumps(ORDER_V1), "JSON", refs)
    serializer = JSONSerializer(v1, registry)
    orders = [{"id": 1, "to": {"city": "Oslo"}}, {"id": 2, "to": {"city": "Bergen", "zip": "5003"}}]
    produce(broker, "orders-json", serializer, orders)
    latest = registry.get_latest_version("orders-json-value")
    assert (latest.version, latest.schema.schema_type) == (1, "JSON")
    assert [(r.name, r.subject, r.version) for r in latest.schema.references] == [
        ("address.json", "address", 1)
    ]
    assert json.loads(latest.schema.schema_str) == ORDER_V1

    # Evolution accepted: an optional property added to the closed model.
    produce(
        broker,
        "orders-json",
        JSONSerializer(Schema(json.dumps(ORDER_V2), "JSON", refs), registry),
        [{"id": 3, "to": {"city": "Tromsø"}, "note": "fragile"}],
    )
    assert registry.get_versions("orders-json-value") == [1, 2]
    values = consume(broker, "orders-json", 3, JSONDeserializer(None, schema_registry_client=registry))
    assert values == [*orders, {"id": 3, "to": {"city": "Tromsø"}, "note": "fragile"}]

    # Evolution refused: removing a property from a closed model (old data carries it).
    with pytest.raises(SchemaRegistryError) as refused:
        without_id = {
            **ORDER_V2,
            "properties": {k: v for k, v in ORDER_V2["properties"].items() if k != "id"},
        }
        registry.register_schema(
            "orders-json-value", Schema(json.dumps({**without_id, "required": ["to"]}), "JSON", refs)
        )
    assert (refused.value.http_status_code, refused.value.error_code) == (409, 409)
    assert "PROPERTY_REMOVED_FROM_CLOSED_CONTENT_MODEL" in refused.value.error_message
    # ...and an optional property with a type added to an open model (strict rules).
    open_v1 = {"type": "object", "properties": {"a": {"type": "string"}}}
    registry.register_schema("open-json", Schema(json.dumps(open_v1), "JSON"))
    open_v2 = {"type": "object", "properties": {"a": {"type": "string"}, "b": {"type": "integer"}}}
    status, _, body = call(
        url,
        "POST",
        "/compatibility/subjects/open-json/versions/latest?verbose=true",
        {"schema": json.dumps(open_v2), "schemaType": "JSON"},
    )
    assert status == 200 and body["is_compatible"] is False
    assert body["messages"][0].startswith("OPTIONAL_PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL at #/properties/b")

    # The referenced version knows who uses it and cannot be deleted while it is used.
    order_ids = sorted(registry.get_version("orders-json-value", v).schema_id for v in (1, 2))
    assert call(url, "GET", "/subjects/address/versions/1/referencedby")[2] == order_ids
    assert call(url, "DELETE", "/subjects/address/versions/1")[2]["error_code"] == 42206
    assert registry.get_schema(address_id).schema_type == "JSON"


def test_json_schema_canonical_text_normalize_and_invalid(broker: BrokerProcess) -> None:
    url = broker.http_url
    assert url is not None
    spaced = '{ "type": "object", "properties": { "b": {"type": "string"}, "a": {"type": "integer"} } }'
    reordered = '{"properties": {"a": {"type": "integer"}, "b": {"type": "string"}}, "type": "object"}'
    first = call(url, "POST", "/subjects/canon/versions", {"schema": spaced, "schemaType": "JSON"})[2]["id"]
    again = call(
        url, "POST", "/subjects/canon/versions", {"schema": spaced.replace(" ", ""), "schemaType": "JSON"}
    )
    assert again[2] == {"id": first}
    assert call(url, "GET", f"/schemas/ids/{first}")[2] == {
        "schema": '{"type":"object","properties":{"b":{"type":"string"},"a":{"type":"integer"}}}',
        "schemaType": "JSON",
    }
    normalized = [
        call(
            url, "POST", "/subjects/canon-n/versions?normalize=true", {"schema": text, "schemaType": "JSON"}
        )[2]
        for text in (spaced, reordered)
    ]
    assert normalized[0] == normalized[1] and call(url, "GET", "/subjects/canon-n/versions")[2] == [1]
    status, _, body = call(
        url, "POST", "/subjects/bad/versions", {"schema": '{"type": "objekt"}', "schemaType": "JSON"}
    )
    assert (status, body["error_code"]) == (422, 42201)
