"""JSON Schema and Protobuf through a real broker's registry, judged by confluent-kafka's own
JSONSerializer / JSONDeserializer and ProtobufSerializer / ProtobufDeserializer (unmodified):
references across subjects, evolution refused and accepted, and the REST API's answers."""

from __future__ import annotations

import base64
import itertools
import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc_tools
import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.schema_registry import Schema, SchemaReference, SchemaRegistryClient
from confluent_kafka.schema_registry.error import SchemaRegistryError
from confluent_kafka.schema_registry.json_schema import JSONDeserializer, JSONSerializer
from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer, ProtobufSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from google.protobuf.descriptor_pb2 import FileDescriptorProto, FileDescriptorSet
from google.protobuf.descriptor_pool import DescriptorPool
from google.protobuf.message_factory import GetMessageClass
from grpc_tools import protoc

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


ADDRESS_PROTO = 'syntax = "proto3";\npackage geo;\nmessage Address { string city = 1; string zip = 2; }\n'
ORDER_PROTO_V1 = """syntax = "proto3";
package shop;
import "address.proto";
import "google/protobuf/timestamp.proto";
message Order {
  int64 id = 1;
  geo.Address to = 2;
  google.protobuf.Timestamp at = 3;
  oneof payment { string card = 4; string voucher = 5; }
}
"""
# Compatible: a field added (number 6), a field renamed (voucher → coupon), int64 → uint64 (same wire group).
ORDER_PROTO_V2 = (
    ORDER_PROTO_V1.replace("int64 id = 1", "uint64 id = 1")
    .replace("voucher = 5", "coupon = 5")
    .replace("  oneof", "  repeated string items = 6;\n  oneof")
)


def message_class(tmp_path: Path, files: dict[str, str], main: str, name: str) -> Any:
    """A message class built by protoc's own descriptors in a private pool (no generated modules)."""
    for file_name, text in files.items():
        (tmp_path / file_name).write_text(text)
    out = tmp_path / "set.pb"
    well_known = os.path.join(os.path.dirname(grpc_tools.__file__), "_proto")
    args = [
        "protoc",
        f"-I{tmp_path}",
        f"-I{well_known}",
        "--include_imports",
        f"--descriptor_set_out={out}",
        main,
    ]
    assert protoc.main(args) == 0
    pool = DescriptorPool()
    for file in FileDescriptorSet.FromString(out.read_bytes()).file:
        pool.Add(file)
    return GetMessageClass(pool.FindMessageTypeByName(name))


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
    assert call(broker.http_url, "GET", "/schemas/types")[2] == ["AVRO", "JSON", "PROTOBUF"]


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


def test_protobuf_with_references_produce_consume_and_evolve(broker: BrokerProcess, tmp_path: Path) -> None:
    url, registry = broker.http_url, client(broker)
    assert url is not None
    (tmp_path / "v1").mkdir()
    (tmp_path / "v2").mkdir()
    order_v1 = message_class(
        tmp_path / "v1",
        {"address.proto": ADDRESS_PROTO, "order.proto": ORDER_PROTO_V1},
        "order.proto",
        "shop.Order",
    )
    order_v2 = message_class(
        tmp_path / "v2",
        {"address.proto": ADDRESS_PROTO, "order.proto": ORDER_PROTO_V2},
        "order.proto",
        "shop.Order",
    )
    first = order_v1(id=1, card="4111")
    first.to.city = "Oslo"
    first.at.seconds = 1_700_000_000
    second = order_v1(id=2, voucher="SPRING")
    produce(broker, "orders-pb", ProtobufSerializer(order_v1, registry), [first, second])

    # The serializer registered the import as its own subject and referenced it.
    latest = registry.get_latest_version("orders-pb-value")
    assert (latest.version, latest.schema.schema_type) == (1, "PROTOBUF")
    assert [(r.name, r.subject, r.version) for r in latest.schema.references] == [
        ("address.proto", "address.proto", 1)
    ]
    assert "  .geo.Address to = 2;" in latest.schema.schema_str
    assert 'import "google/protobuf/timestamp.proto";' in latest.schema.schema_str

    third = order_v2(id=3, coupon="AUTUMN", items=["tea", "cups"])
    third.to.city = "Bergen"
    produce(broker, "orders-pb", ProtobufSerializer(order_v2, registry), [third])
    assert registry.get_versions("orders-pb-value") == [1, 2]
    values = consume(
        broker, "orders-pb", 3, ProtobufDeserializer(order_v2, {}, schema_registry_client=registry)
    )
    assert [(v.id, v.to.city, v.WhichOneof("payment"), list(v.items)) for v in values] == [
        (1, "Oslo", "card", []),
        (2, "", "coupon", []),
        (3, "Bergen", "coupon", ["tea", "cups"]),
    ]
    assert values[0].at.seconds == 1_700_000_000 and values[1].coupon == "SPRING"

    # Refused: a field's type changed across wire groups, and a message removed.
    refs = [SchemaReference("address.proto", "address.proto", 1)]
    for text, kind in (
        (ORDER_PROTO_V2.replace("uint64 id = 1", "string id = 1"), "FIELD_SCALAR_KIND_CHANGED"),
        (ORDER_PROTO_V2.replace("message Order", "message Purchase"), "MESSAGE_REMOVED"),
    ):
        with pytest.raises(SchemaRegistryError) as refused:
            registry.register_schema("orders-pb-value", Schema(text, "PROTOBUF", refs))
        assert (refused.value.http_status_code, kind in refused.value.error_message) == (409, True)

    # format=serialized gives the descriptor confluent-kafka reads; references are tracked.
    body = call(url, "GET", f"/schemas/ids/{latest.schema_id}?format=serialized")[2]
    descriptor = FileDescriptorProto.FromString(base64.b64decode(body["schema"]))
    assert [m.name for m in descriptor.message_type] == ["Order"]
    assert list(descriptor.dependency) == ["address.proto", "google/protobuf/timestamp.proto"]
    order_ids = sorted(registry.get_version("orders-pb-value", v).schema_id for v in (1, 2))
    assert call(url, "GET", "/subjects/address.proto/versions/1/referencedby")[2] == order_ids
    assert call(url, "DELETE", "/subjects/address.proto/versions/1")[2]["error_code"] == 42206
    status, _, body = call(
        url, "POST", "/subjects/bad/versions", {"schema": "message {", "schemaType": "PROTOBUF"}
    )
    assert (status, body["error_code"]) == (422, 42201) and "schema.proto:1:" in body["message"]
