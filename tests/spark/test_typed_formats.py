"""Typed Protobuf and JSON Schema pipelines against `strom serve` and its registry, with confluent-kafka's
unmodified `ProtobufSerializer`/`ProtobufDeserializer` and `JSONSerializer`/`JSONDeserializer` on the
other side; PERMISSIVE mode, pinned versions, the record subject-name strategy and the dead-letter topic."""

from __future__ import annotations

import datetime as dt
import json
import uuid
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.json_schema import JSONDeserializer, JSONSerializer
from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer, ProtobufSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from google.protobuf import message_factory
from google.protobuf.descriptor_pool import DescriptorPool

from strom.registry.protobuf_schema import compile_files
from strom.testing.broker_process import BrokerProcess
from tests.spark.kafka_helpers import consume_all, new_topic

pytestmark = pytest.mark.spark

ADDRESS_PROTO = """syntax = "proto3";
package shop.common;
message Address { string city = 1; string zip = 2; }
"""


def click_proto(v2: bool) -> str:
    country = "  string country = 8;\n" if v2 else ""
    return f"""syntax = "proto3";
package shop;
import "shop/common/address.proto";
import "google/protobuf/timestamp.proto";
message Click {{
  enum Kind {{ VIEW = 0; BUY = 1; }}
  string user = 1;
  optional string page = 2;
  int32 latency_ms = 3;
  Kind kind = 4;
  repeated string tags = 5;
  map<string, int64> attrs = 6;
  google.protobuf.Timestamp at = 7;
{country}  shop.common.Address address = 9;
}}
"""


def message_class(version: int) -> Any:
    """The Click message class of a version, compiled by protoc into its own pool (as generated code
    would be, but without a module per version)."""
    files = compile_files(click_proto(version == 2), [("shop/common/address.proto", ADDRESS_PROTO)])
    pool = DescriptorPool()
    for name in ("google/protobuf/timestamp.proto", "shop/common/address.proto"):
        pool.Add(files[name])
    main = next(f for n, f in files.items() if n.endswith("schema.proto"))
    main.name = f"shop/click_v{version}.proto"
    pool.Add(main)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("shop.Click"))


@pytest.fixture(scope="module")
def registry_url(strom_broker_process: BrokerProcess) -> str:
    assert strom_broker_process.http_url is not None
    return strom_broker_process.http_url


def produce_serialized(bootstrap: str, topic: str, serializer: Any, rows: list[Any], field: Any) -> None:
    producer = Producer({"bootstrap.servers": bootstrap})
    context = SerializationContext(topic, field)
    for row in rows:
        producer.produce(topic, serializer(row, context))
    assert producer.flush(30) == 0


def typed_read(spark: Any, bootstrap: str, url: str, topic: str, fmt: str, **options: str) -> Any:
    return (
        spark.read.format("strom")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("valueFormat", fmt)
        .option("schema.registry.url", url)
        .options(**options)
        .load()
    )


def click(cls: Any, i: int, **extra: Any) -> Any:
    message = cls(user=f"u{i}", latency_ms=i, kind=i % 2, tags=[f"t{i}"], **extra)
    if i % 2:
        message.page = "/cart"
    message.attrs["n"] = i
    message.at.FromSeconds(1_700_000_000 + i)
    message.address.city = f"c{i}"
    return message


def test_protobuf_read_with_evolution_and_write_back(
    spark: Any, strom_broker: str, registry_url: str
) -> None:
    topic = new_topic(strom_broker, partitions=2)
    client = SchemaRegistryClient({"url": registry_url})
    v1, v2 = message_class(1), message_class(2)
    conf = {"use.deprecated.format": False}
    produce_serialized(
        strom_broker,
        topic,
        ProtobufSerializer(v1, client, conf),
        [click(v1, i) for i in range(10)],
        MessageField.VALUE,
    )
    produce_serialized(
        strom_broker,
        topic,
        ProtobufSerializer(v2, client, conf),
        [click(v2, i, country="de") for i in range(10, 20)],
        MessageField.VALUE,
    )
    assert client.get_latest_version(f"{topic}-value").version == 2
    df = typed_read(spark, strom_broker, registry_url, topic, "protobuf")
    assert df.schema["value"].dataType.simpleString() == (
        "struct<user:string,page:string,latency_ms:int,kind:string,tags:array<string>,"
        "attrs:map<string,bigint>,at:timestamp,country:string,address:struct<city:string,zip:string>>"
    )
    rows = {r.user: r for r in df.select("value.*").collect()}
    assert sorted(rows) == sorted(f"u{i}" for i in range(20))
    for i in range(20):
        r = rows[f"u{i}"]
        assert r.page == ("/cart" if i % 2 else None)
        # proto3 zero values read as null, as Spark's from_protobuf does by default.
        assert r.latency_ms == (i or None)
        assert r.kind == ("BUY" if i % 2 else None)
        assert (r.tags, r.attrs, r.address.city) == ([f"t{i}"], {"n": i}, f"c{i}")
        assert r.at == dt.datetime.fromtimestamp(1_700_000_000 + i, dt.UTC).replace(tzinfo=None)
        assert r.country == ("de" if i >= 10 else None)
    # Pinned to version 1: v2's field is skipped as an unknown field.
    pinned = typed_read(spark, strom_broker, registry_url, topic, "protobuf", valueSchemaVersion="1")
    assert "country" not in pinned.schema["value"].dataType.fieldNames()
    assert pinned.count() == 20

    # Written back with the subject's latest schema: confluent-kafka's deserializer reads it.
    out = new_topic(strom_broker, partitions=1)
    (
        df.select("value")
        .write.format("strom")
        .option("kafka.bootstrap.servers", strom_broker)
        .option("topic", out)
        .option("valueFormat", "protobuf")
        .option("valueSubject", f"{topic}-value")
        .option("schema.registry.url", registry_url)
        .mode("append")
        .save()
    )
    deserializer = ProtobufDeserializer(v2, {"use.deprecated.format": False})
    context = SerializationContext(out, MessageField.VALUE)
    got = {m.user: m for m in (deserializer(r["value"], context) for r in consume_all(strom_broker, out, 1))}
    assert sorted(got) == sorted(rows)
    assert got["u13"].country == "de" and got["u3"].country == "" and got["u5"].attrs["n"] == 5
    assert got["u7"].at.seconds == 1_700_000_007 and got["u7"].address.city == "c7" and got["u7"].kind == 1


def test_protobuf_auto_register_round_trip(spark: Any, strom_broker: str, registry_url: str) -> None:
    topic = new_topic(strom_broker, partitions=1)
    rows = [(f"k{i}", (f"u{i}", i, [i, i + 1], {"a": i * 0.5}, (f"c{i}",))) for i in range(12)]
    df = spark.createDataFrame(
        rows,
        "key string, value struct<user: string, n: bigint, hits: array<int>, scores: map<string, double>, "
        "home: struct<city: string>>",
    )
    (
        df.write.format("strom")
        .option("kafka.bootstrap.servers", strom_broker)
        .option("topic", topic)
        .option("valueFormat", "protobuf")
        .option("valueRecordName", "shop.Visit")
        .option("valueSubjectNameStrategy", "record")
        .option("schema.registry.url", registry_url)
        .option("auto.register.schemas", "true")
        .mode("append")
        .save()
    )
    registered = SchemaRegistryClient({"url": registry_url}).get_latest_version("shop.Visit")
    assert registered.schema.schema_type == "PROTOBUF"
    back = typed_read(
        spark,
        strom_broker,
        registry_url,
        topic,
        "protobuf",
        valueSubjectNameStrategy="record",
        valueRecordName="shop.Visit",
        **{"emit.default.values": "true"},
    )
    got = sorted(
        (r.key.decode(), (r.value.user, r.value.n, r.value.hits, r.value.scores, (r.value.home.city,)))
        for r in back.select(back.key.cast("binary").alias("key"), "value").collect()
    )
    assert got == sorted(rows)


CLICK_JSON_V1 = {
    "$schema": "http://json-schema.org/draft-07/schema#",
    "title": "Click",
    "type": "object",
    "properties": {
        "user": {"type": "string"},
        "latency_ms": {"type": "integer"},
        "at": {"type": "string", "format": "date-time"},
        "tags": {"type": "array", "items": {"type": "string"}},
        "address": {"$ref": "#/definitions/Address"},
    },
    "required": ["user"],
    # Closed: adding an optional property is then a compatible change (Confluent's rule).
    "additionalProperties": False,
    "definitions": {"Address": {"type": "object", "properties": {"city": {"type": "string"}}}},
}
CLICK_JSON_V2 = {
    **CLICK_JSON_V1,
    "properties": {**CLICK_JSON_V1["properties"], "score": {"type": ["null", "number"]}},
}


def test_json_read_with_evolution_permissive_and_write_back(
    spark: Any, strom_broker: str, registry_url: str
) -> None:
    topic = new_topic(strom_broker, partitions=1)
    client = SchemaRegistryClient({"url": registry_url})
    v1 = [
        {
            "user": f"u{i}",
            "latency_ms": i,
            "at": f"2026-01-01T00:00:0{i}Z",
            "tags": ["a"],
            "address": {"city": "x"},
        }
        for i in range(5)
    ]
    v2 = [{"user": f"w{i}", "latency_ms": 10 + i, "score": i / 2} for i in range(5)]
    produce_serialized(
        strom_broker, topic, JSONSerializer(json.dumps(CLICK_JSON_V1), client), v1, MessageField.VALUE
    )
    produce_serialized(
        strom_broker, topic, JSONSerializer(json.dumps(CLICK_JSON_V2), client), v2, MessageField.VALUE
    )
    schema_id = client.get_latest_version(f"{topic}-value").schema_id
    producer = Producer({"bootstrap.servers": strom_broker})
    producer.produce(
        topic, b"\x00" + schema_id.to_bytes(4, "big") + b'{"user": "z", "latency_ms": "slow"}'
    )  # offset 10
    assert producer.flush(30) == 0

    df = typed_read(spark, strom_broker, registry_url, topic, "json")
    assert df.schema["value"].dataType.simpleString() == (
        "struct<user:string,latency_ms:bigint,at:timestamp,tags:array<string>,address:struct<city:string>,"
        "score:double>"
    )
    with pytest.raises(Exception, match=f"offset 10 of {topic}-0"):
        df.collect()
    permissive = typed_read(spark, strom_broker, registry_url, topic, "json", mode="PERMISSIVE")
    rows = permissive.select("offset", "value", "_corrupt_value").orderBy("offset").collect()
    assert [r.value.user for r in rows[:10]] == [f"u{i}" for i in range(5)] + [f"w{i}" for i in range(5)]
    assert rows[2].value.at == dt.datetime(2026, 1, 1, 0, 0, 2) and rows[0].value.address.city == "x"
    assert rows[7].value.score == 1.0 and rows[2].value.score is None
    assert all(r._corrupt_value is None for r in rows[:10])
    assert rows[10].value is None and "expected an integer" in rows[10]._corrupt_value.reason
    assert bytes(rows[10]._corrupt_value.bytes).endswith(b'"latency_ms": "slow"}')

    out = new_topic(strom_broker, partitions=1)
    (
        permissive.where("_corrupt_value IS NULL")
        .select("value")
        .write.format("strom")
        .option("kafka.bootstrap.servers", strom_broker)
        .option("topic", out)
        .option("valueFormat", "json")
        .option("schema.registry.url", registry_url)
        .option("auto.register.schemas", "true")
        .mode("append")
        .save()
    )
    assert client.get_latest_version(f"{out}-value").schema.schema_type == "JSON"
    deserializer = JSONDeserializer(None, schema_registry_client=client)
    context = SerializationContext(out, MessageField.VALUE)
    got = [deserializer(r["value"], context) for r in consume_all(strom_broker, out, 1)]
    assert [g["user"] for g in got] == [f"u{i}" for i in range(5)] + [f"w{i}" for i in range(5)]
    assert got[1] == {
        "user": "u1",
        "latency_ms": 1,
        "at": "2026-01-01T00:00:01Z",
        "tags": ["a"],
        "address": {"city": "x"},
    }
    assert got[6] == {"user": "w1", "latency_ms": 11, "score": 0.5}


def test_streaming_dead_letter_topic(spark: Any, strom_broker: str, registry_url: str, tmp_path: Any) -> None:
    topic, dead = new_topic(strom_broker, partitions=1), new_topic(strom_broker, partitions=1)
    client = SchemaRegistryClient({"url": registry_url})
    serializer = JSONSerializer(json.dumps(CLICK_JSON_V1), client)
    produce_serialized(
        strom_broker, topic, serializer, [{"user": f"u{i}"} for i in range(3)], MessageField.VALUE
    )
    producer = Producer({"bootstrap.servers": strom_broker})
    producer.produce(topic, b"not json at all", b"k")  # offset 3
    assert producer.flush(30) == 0
    produce_serialized(strom_broker, topic, serializer, [{"user": "u4"}], MessageField.VALUE)
    name = f"dlt_{uuid.uuid4().hex[:8]}"
    query = (
        spark.readStream.format("strom")
        .option("kafka.bootstrap.servers", strom_broker)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("valueFormat", "json")
        .option("schema.registry.url", registry_url)
        .option("deadLetterTopic", dead)
        .load()
        .select("offset", "value.user")
        .writeStream.format("memory")
        .queryName(name)
        .option("checkpointLocation", str(tmp_path / "ck"))
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(120)
    assert query.exception() is None
    assert [(r.offset, r.user) for r in spark.sql(f"SELECT * FROM {name} ORDER BY offset").collect()] == [
        (0, "u0"),
        (1, "u1"),
        (2, "u2"),
        (4, "u4"),
    ]
    [letter] = consume_all(strom_broker, dead, 1)
    headers = dict(letter["headers"])
    assert (letter["key"], letter["value"]) == (b"k", b"not json at all")
    assert headers["strom.dlt.topic"] == topic.encode() and headers["strom.dlt.offset"] == b"3"
    assert b"magic byte" in headers["strom.dlt.reason"]
