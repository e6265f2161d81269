"""Typed Avro pipelines against `strom serve` and its schema registry, with confluent-kafka's unmodified
`SchemaRegistryClient`, `AvroSerializer` and `AvroDeserializer` on the other side."""

from __future__ import annotations

import json
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from strom.testing.broker_process import BrokerProcess
from tests.spark.kafka_helpers import consume_all, new_topic

pytestmark = pytest.mark.spark

V1 = {
    "type": "record",
    "name": "Click",
    "namespace": "shop",
    "fields": [
        {"name": "user", "type": "string"},
        {"name": "page", "type": "string"},
        {"name": "latency_ms", "type": "int"},
    ],
}
V2 = {
    **V1,
    "fields": [
        *V1["fields"],
        {"name": "country", "type": "string", "default": "unknown"},
        {"name": "referrer", "type": ["null", "string"], "default": None},
    ],
}


@pytest.fixture(scope="module")
def registry_url(strom_broker_process: BrokerProcess) -> str:
    assert strom_broker_process.http_url is not None
    return strom_broker_process.http_url


def produce_avro(
    bootstrap: str, url: str, topic: str, schema: dict[str, Any], rows: list[Any], **kw: Any
) -> None:
    serializer = AvroSerializer(SchemaRegistryClient({"url": url}), json.dumps(schema))
    producer = Producer({"bootstrap.servers": bootstrap})
    context = SerializationContext(topic, MessageField.VALUE)
    for row in rows:
        producer.produce(topic, serializer(row, context), **kw)
    assert producer.flush(30) == 0


def avro_read(spark: Any, bootstrap: str, url: str, topic: str, **options: str) -> Any:
    return (
        spark.read.format("strom")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("valueFormat", "avro")
        .option("schema.registry.url", url)
        .options(**options)
        .load()
    )


def test_v1_and_v2_records_read_as_one_struct_with_defaults(
    spark: Any, strom_broker: str, registry_url: str
) -> None:
    topic = new_topic(strom_broker, partitions=2)
    v1 = [{"user": f"u{i}", "page": "/", "latency_ms": i} for i in range(20)]
    v2 = [
        {
            "user": f"w{i}",
            "page": "/cart",
            "latency_ms": 100 + i,
            "country": "de",
            "referrer": None if i % 2 else "x",
        }
        for i in range(20)
    ]
    produce_avro(strom_broker, registry_url, topic, V1, v1)
    produce_avro(strom_broker, registry_url, topic, V2, v2)  # registered as version 2 (BACKWARD)

    df = avro_read(spark, strom_broker, registry_url, topic)
    assert df.schema["value"].dataType.simpleString() == (
        "struct<user:string,page:string,latency_ms:int,country:string,referrer:string>"
    )
    rows = [r.asDict(recursive=True) for r in df.select("value.*").collect()]
    expected = [{**r, "country": "unknown", "referrer": None} for r in v1] + v2
    assert sorted(rows, key=lambda r: r["user"]) == sorted(expected, key=lambda r: r["user"])
    # Typed columns in SQL.
    by_country = {r[0]: r[1] for r in df.groupBy("value.country").count().collect()}
    assert by_country == {"unknown": 20, "de": 20}


def test_avro_write_round_trips(spark: Any, strom_broker: str, registry_url: str) -> None:
    topic = new_topic(strom_broker, partitions=2)
    rows = [(f"k{i}", (f"u{i}", i * 1.5, [i, i + 1], {"n": i}, None if i % 3 else "note")) for i in range(30)]
    df = spark.createDataFrame(
        rows,
        "key string, value struct<user: string, score: double, hits: array<int>, attrs: map<string, bigint>, "
        "note: string>",
    )
    (
        df.write.format("strom")
        .option("kafka.bootstrap.servers", strom_broker)
        .option("topic", topic)
        .option("valueFormat", "avro")
        .option("schema.registry.url", registry_url)
        .option("auto.register.schemas", "true")
        .mode("append")
        .save()
    )
    # Confluent's own deserializer reads what the connector wrote.
    deserializer = AvroDeserializer(SchemaRegistryClient({"url": registry_url}))
    context = SerializationContext(topic, MessageField.VALUE)
    got = sorted(
        ((r["key"].decode(), deserializer(r["value"], context)) for r in consume_all(strom_broker, topic, 2)),
        key=lambda kv: kv[0],
    )
    want = sorted(
        ((k, {"user": u, "score": s, "hits": h, "attrs": a, "note": n}) for k, (u, s, h, a, n) in rows),
        key=lambda kv: kv[0],
    )
    assert got == want
    # And the connector reads it back typed, then writes it again with the now-latest schema.
    back = avro_read(spark, strom_broker, registry_url, topic)
    again = new_topic(strom_broker, partitions=1)
    (
        back.select("key", "value")
        .write.format("strom")
        .option("kafka.bootstrap.servers", strom_broker)
        .option("topic", again)
        .option("valueFormat", "avro")
        .option("valueSubject", f"{topic}-value")
        .option("schema.registry.url", registry_url)
        .mode("append")
        .save()
    )
    copied = avro_read(spark, strom_broker, registry_url, again, valueSubject=f"{topic}-value")
    assert sorted(r.value.asDict(recursive=True)["user"] for r in copied.collect()) == sorted(
        u for _, (u, *_rest) in rows
    )


def test_corrupt_payload_fails_naming_topic_partition_offset(
    spark: Any, strom_broker: str, registry_url: str
) -> None:
    topic = new_topic(strom_broker, partitions=1)
    good = [{"user": "a", "page": "/", "latency_ms": 1}] * 3
    produce_avro(strom_broker, registry_url, topic, V1, good)
    schema_id = SchemaRegistryClient({"url": registry_url}).get_latest_version(f"{topic}-value").schema_id
    producer = Producer({"bootstrap.servers": strom_broker})
    producer.produce(topic, b"\x00" + schema_id.to_bytes(4, "big") + b"\xff\xff\xff")  # offset 3: truncated
    assert producer.flush(30) == 0
    with pytest.raises(Exception, match=f"offset 3 of {topic}-0"):
        avro_read(spark, strom_broker, registry_url, topic).collect()


def test_avro_keys_round_trip(spark: Any, strom_broker: str, registry_url: str) -> None:
    topic = new_topic(strom_broker, partitions=2)
    rows = [((f"user-{i}", i % 3), f"v{i}") for i in range(20)]
    df = spark.createDataFrame(rows, "key struct<user: string, shard: int>, value string")
    (
        df.write.format("strom")
        .option("kafka.bootstrap.servers", strom_broker)
        .option("topic", topic)
        .option("keyFormat", "avro")
        .option("schema.registry.url", registry_url)
        .option("auto.register.schemas", "true")
        .mode("append")
        .save()
    )
    deserializer = AvroDeserializer(SchemaRegistryClient({"url": registry_url}))
    context = SerializationContext(topic, MessageField.KEY)
    assert sorted(
        deserializer(r["key"], context)["user"] for r in consume_all(strom_broker, topic, 2)
    ) == sorted(u for (u, _), _ in rows)
    back = avro_read(spark, strom_broker, registry_url, topic, valueFormat="binary", keyFormat="avro")
    assert back.schema["key"].dataType.simpleString() == "struct<user:string,shard:int>"
    got = sorted((r.key.user, r.key.shard, bytes(r.value).decode()) for r in back.collect())
    assert got == sorted((u, s, v) for (u, s), v in rows)


def test_streaming_avro_read_and_write(
    spark: Any, strom_broker: str, registry_url: str, tmp_path: Any
) -> None:
    """A typed stream into a typed topic: readStream with valueFormat avro, writeStream (exactly-once by
    default) with the same subject's schema."""
    source, sink = new_topic(strom_broker, partitions=2), new_topic(strom_broker, partitions=1)
    clicks = [{"user": f"u{i}", "page": "/", "latency_ms": i} for i in range(25)]
    produce_avro(strom_broker, registry_url, source, V1, clicks)
    stream = (
        spark.readStream.format("strom")
        .option("kafka.bootstrap.servers", strom_broker)
        .option("subscribe", source)
        .option("startingOffsets", "earliest")
        .option("valueFormat", "avro")
        .option("schema.registry.url", registry_url)
        .load()
    )
    query = (
        stream.select("value")
        .writeStream.format("strom")
        .option("kafka.bootstrap.servers", strom_broker)
        .option("topic", sink)
        .option("valueFormat", "avro")
        .option("valueSubject", f"{source}-value")
        .option("schema.registry.url", registry_url)
        .option("checkpointLocation", str(tmp_path / "ck"))
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(120)
    assert query.exception() is None
    deserializer = AvroDeserializer(SchemaRegistryClient({"url": registry_url}))
    context = SerializationContext(sink, MessageField.VALUE)
    got = [deserializer(r["value"], context) for r in consume_all(strom_broker, sink, 1)]
    assert sorted(got, key=lambda c: c["latency_ms"]) == clicks
