"""The schema registry on `strom serve`'s HTTP listener, driven by confluent-kafka's own registry client,
AvroSerializer and AvroDeserializer (unmodified), and by raw HTTP for the REST API's shapes and bad input."""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.schema_registry.error import SchemaRegistryError
from confluent_kafka.serialization import MessageField, SerializationContext

from strom.testing import BrokerProcess
from tests.integration.registry_http import CONTENT_TYPE, call

V1 = {"type": "record", "name": "Click", "namespace": "demo", "fields": [{"name": "url", "type": "string"}]}
V2 = {
    "type": "record",
    "name": "Click",
    "namespace": "demo",
    "fields": [{"name": "url", "type": "string"}, {"name": "ms", "type": "long", "default": -1}],
}
V3 = {
    "type": "record",
    "name": "Click",
    "namespace": "demo",
    "fields": [*V2["fields"], {"name": "user", "type": "string"}],
}


_groups = itertools.count()


@pytest.fixture(scope="module")
def registry_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    proc = BrokerProcess(
        tmp_path_factory.mktemp("registry") / "data", {"group.initial.rebalance.delay.ms": "0"}
    )
    proc.start()
    try:
        yield proc
    finally:
        proc.stop()


def client(broker: BrokerProcess) -> SchemaRegistryClient:
    assert broker.http_url is not None and not broker.http_url.endswith(":8081")
    # cache.capacity is the client's own setting; a fresh client per phase reads the registry itself.
    return SchemaRegistryClient({"url": broker.http_url})


def produce(broker: BrokerProcess, topic: str, schema: dict[str, Any], values: list[dict[str, Any]]) -> None:
    serializer = AvroSerializer(client(broker), json.dumps(schema))
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    for value in values:
        producer.produce(topic, serializer(value, SerializationContext(topic, MessageField.VALUE)))
    assert producer.flush(30) == 0


def consume(broker: BrokerProcess, topic: str, count: int) -> list[dict[str, Any]]:
    deserializer = AvroDeserializer(client(broker))
    consumer = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": f"g-{next(_groups)}",
            "auto.offset.reset": "earliest",
        }
    )
    consumer.subscribe([topic])
    out: list[dict[str, Any]] = []
    try:
        for _ in range(60):
            if len(out) >= count:
                break
            msg = consumer.poll(0.5)
            if msg is None or msg.error():
                continue
            out.append(deserializer(msg.value(), SerializationContext(topic, MessageField.VALUE)))
    finally:
        consumer.close()
    return out


def snapshot(broker: BrokerProcess, subject: str) -> list[tuple[int, int, str]]:
    registry = client(broker)
    return [
        (v, registry.get_version(subject, v).schema_id, registry.get_version(subject, v).schema.schema_str)
        for v in registry.get_versions(subject)
    ]


def test_confluent_clients_register_evolve_produce_consume_and_survive_restarts(
    registry_broker: BrokerProcess,
) -> None:
    topic, subject = "clicks", "clicks-value"
    produce(registry_broker, topic, V1, [{"url": "/a"}, {"url": "/b"}])
    produce(registry_broker, topic, V2, [{"url": "/c", "ms": 7}])
    registry = client(registry_broker)
    assert registry.get_versions(subject) == [1, 2]
    ids = [registry.get_version(subject, v).schema_id for v in (1, 2)]
    assert ids == [1, 2]
    with pytest.raises(SchemaRegistryError) as refused:
        registry.register_schema(subject, Schema(json.dumps(V3), "AVRO"))
    assert (refused.value.http_status_code, refused.value.error_code) == (409, 409)
    assert "user" in refused.value.error_message
    values = consume(registry_broker, topic, 3)
    assert values == [{"url": "/a"}, {"url": "/b"}, {"url": "/c", "ms": 7}]

    before = snapshot(registry_broker, subject)
    registry_broker.restart()
    assert snapshot(registry_broker, subject) == before
    registry_broker.kill()
    registry_broker.start()
    assert snapshot(registry_broker, subject) == before
    assert consume(registry_broker, topic, 3) == values
    # Registering after the crash continues the ids.
    other = {"type": "record", "name": "Other", "fields": [{"name": "x", "type": "int"}]}
    assert client(registry_broker).register_schema("other-value", Schema(json.dumps(other), "AVRO")) == 3


def test_rest_api_shapes(registry_broker: BrokerProcess) -> None:
    url = registry_broker.http_url
    assert url is not None
    schema = {"type": "record", "name": "Shape", "fields": [{"name": "a", "type": "int"}]}
    status, ctype, body = call(url, "POST", "/subjects/shape/versions", {"schema": json.dumps(schema)})
    assert status == 200 and ctype.startswith(CONTENT_TYPE) and set(body) == {"id"}
    schema_id = body["id"]
    status, _, body = call(url, "GET", "/subjects/shape/versions/latest")
    assert body == {
        "subject": "shape",
        "version": 1,
        "id": schema_id,
        "schema": json.dumps(schema, separators=(",", ":")),
    }
    assert call(url, "GET", "/subjects/shape/versions/1/schema")[2] == schema
    assert call(url, "GET", f"/schemas/ids/{schema_id}/schema")[2] == schema
    assert call(url, "GET", f"/schemas/ids/{schema_id}/versions")[2] == [{"subject": "shape", "version": 1}]
    assert call(url, "GET", "/schemas/types")[2] == ["AVRO", "JSON", "PROTOBUF"]
    status, _, body = call(url, "POST", "/subjects/shape", {"schema": json.dumps(schema)})
    assert (status, body["version"], body["id"]) == (200, 1, schema_id)

    widened = {
        "type": "record",
        "name": "Shape",
        "fields": [{"name": "a", "type": "int"}, {"name": "b", "type": "int"}],
    }
    status, _, body = call(
        url,
        "POST",
        "/compatibility/subjects/shape/versions/latest?verbose=true",
        {"schema": json.dumps(widened)},
    )
    assert status == 200 and body["is_compatible"] is False and "'b'" in body["messages"][0]
    assert call(url, "PUT", "/config/shape", {"compatibility": "FORWARD"})[2] == {"compatibility": "FORWARD"}
    assert call(url, "GET", "/config/shape")[2] == {"compatibilityLevel": "FORWARD"}
    assert call(url, "POST", "/subjects/shape/versions", {"schema": json.dumps(widened)})[0] == 200
    assert call(url, "GET", "/config")[2] == {"compatibilityLevel": "BACKWARD"}
    listed = call(url, "GET", "/schemas?subjectPrefix=sha")[2]
    assert [(e["subject"], e["version"]) for e in listed] == [("shape", 1), ("shape", 2)]
    assert [e["version"] for e in call(url, "GET", "/schemas?subjectPrefix=shape&latestOnly=true")[2]] == [2]

    assert call(url, "DELETE", "/subjects/shape/versions/1")[2] == 1
    assert call(url, "GET", "/subjects/shape/versions")[2] == [2]
    assert call(url, "GET", "/subjects/shape/versions?deleted=true")[2] == [1, 2]
    assert call(url, "GET", "/subjects/shape/versions/1")[2]["error_code"] == 40402
    assert call(url, "GET", "/subjects/shape/versions/1?deleted=true")[0] == 200
    assert call(url, "DELETE", "/subjects/shape")[2] == [2]
    assert "shape" not in call(url, "GET", "/subjects")[2]
    assert "shape" in call(url, "GET", "/subjects?deleted=true")[2]
    assert call(url, "DELETE", "/subjects/shape")[2]["error_code"] == 40404
    assert call(url, "DELETE", "/subjects/shape?permanent=true")[2] == [1, 2]
    assert call(url, "GET", "/subjects/shape/versions?deleted=true")[2]["error_code"] == 40401
    assert call(url, "GET", "/mode")[2] == {"mode": "READWRITE"}


@pytest.mark.parametrize(
    ("method", "path", "kwargs", "status", "code"),
    [
        ("POST", "/subjects/bad/versions", {"raw": b"{not json"}, 400, 400),
        ("POST", "/subjects/bad/versions", {"body": {"schema": "{not json"}}, 422, 42201),
        ("POST", "/subjects/bad/versions", {"body": {"schema": '{"type": "nonsense"}'}}, 422, 42201),
        (
            "POST",
            "/subjects/bad/versions",
            {"body": {"schema": '{"type":"objekt"}', "schemaType": "JSON"}},
            422,
            42201,
        ),
        ("POST", "/subjects/bad/versions", {"body": {"nothing": 1}}, 422, 42201),
        ("POST", "/subjects/bad/versions", {"raw": b"[" * 100_000 + b"]" * 100_000}, 400, 400),
        (
            "POST",
            "/subjects/bad/versions",
            {"body": {"schema": '{"type":"array","items":' * 500 + '"int"' + "}" * 500}},
            422,
            42201,
        ),
        ("GET", "/subjects/bad/versions/one", {}, 422, 42202),
        ("GET", "/subjects/bad/versions/0", {}, 422, 42202),
        ("GET", "/subjects/no-such-subject/versions", {}, 404, 40401),
        ("GET", "/subjects/no-such-subject/versions/latest", {}, 404, 40401),
        ("GET", "/schemas/ids/987654", {}, 404, 40403),
        ("GET", "/schemas/ids/abc", {}, 404, 40403),
        ("PUT", "/config", {"body": {"compatibility": "SIDEWAYS"}}, 422, 42203),
        ("PUT", "/mode", {"body": {"mode": "SIDEWAYS"}}, 422, 42204),
        ("POST", "/subjects/bad/versions", {"raw": b"{}", "content_type": "text/plain"}, 415, 415),
        ("POST", "/subjects/bad/versions", {"raw": b"[" + b" " * (5 << 20) + b"]"}, 413, 413),
        ("GET", "/no/such/route", {}, 404, 404),
        ("PATCH", "/subjects", {"body": {}}, 405, 405),
    ],
)
def test_bad_input_gets_confluent_codes_and_the_registry_keeps_serving(
    registry_broker: BrokerProcess, method: str, path: str, kwargs: dict[str, Any], status: int, code: int
) -> None:
    url = registry_broker.http_url
    assert url is not None
    got_status, ctype, body = call(url, method, path, **kwargs)
    assert (got_status, body["error_code"]) == (status, code), body
    assert isinstance(body["message"], str) and body["message"]
    assert ctype.startswith(CONTENT_TYPE)
    assert call(url, "GET", "/subjects")[0] == 200


def test_unparseable_schemas_records_are_logged_and_skipped(registry_broker: BrokerProcess) -> None:
    url = registry_broker.http_url
    assert url is not None
    first = {"type": "record", "name": "Before", "fields": [{"name": "a", "type": "int"}]}
    assert call(url, "POST", "/subjects/skip/versions", {"schema": json.dumps(first)})[0] == 200
    producer = Producer({"bootstrap.servers": registry_broker.bootstrap})
    producer.produce("_schemas", key=b"not json", value=b"{}")
    producer.produce(
        "_schemas", key=b'{"keytype":"SCHEMA","subject":"skip","version":9,"magic":1}', value=b"[1, 2]"
    )
    producer.produce("_schemas", key=b'{"keytype":"SOMETHING_NEW","magic":0}', value=b"{}")
    assert producer.flush(30) == 0
    second = {"type": "record", "name": "After", "fields": [{"name": "b", "type": "int"}]}
    status, _, body = call(url, "POST", "/subjects/skip-after/versions", {"schema": json.dumps(second)})
    assert status == 200, body
    assert call(url, "GET", "/subjects/skip/versions")[2] == [1]
    registry_broker.restart()
    url = registry_broker.http_url
    assert url is not None
    assert call(url, "GET", "/subjects/skip/versions")[2] == [1]
    assert call(url, "GET", "/subjects/skip-after/versions/1")[2]["id"] == body["id"]
    assert "skipping record" in registry_broker.log_tail(200)


def test_schema_references_through_the_client(registry_broker: BrokerProcess) -> None:
    from confluent_kafka.schema_registry import SchemaReference

    registry = client(registry_broker)
    address = {
        "type": "record",
        "name": "Address",
        "namespace": "acme",
        "fields": [{"name": "city", "type": "string"}],
    }
    user = {
        "type": "record",
        "name": "User",
        "namespace": "acme",
        "fields": [{"name": "home", "type": "acme.Address"}],
    }
    address_id = registry.register_schema("acme-address", Schema(json.dumps(address), "AVRO"))
    ref = SchemaReference("acme.Address", "acme-address", 1)
    user_id = registry.register_schema("acme-user", Schema(json.dumps(user), "AVRO", [ref]))
    assert user_id != address_id
    fetched = client(registry_broker).get_version("acme-user", 1)
    assert [(r.name, r.subject, r.version) for r in fetched.schema.references] == [
        ("acme.Address", "acme-address", 1)
    ]
    with pytest.raises(SchemaRegistryError) as unresolved:
        registry.register_schema("acme-orphan", Schema(json.dumps(user), "AVRO"))
    assert unresolved.value.error_code == 42201
    with pytest.raises(SchemaRegistryError) as referenced:
        registry.delete_version("acme-address", 1)
    assert referenced.value.error_code == 42206
