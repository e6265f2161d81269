"""Batch reads and writes through format `strom` against a real broker and a real local SparkSession."""

from __future__ import annotations

import json
from typing import Any

import pytest

from strom.spark.partitioner import partition_for_key
from tests.spark.kafka_helpers import consume_all, new_topic, produce, timed_topic

pytestmark = pytest.mark.spark


def spark_rows(df: Any) -> list[dict[str, Any]]:
    rows = []
    for r in df.collect():
        d = r.asDict(recursive=True)
        ts = d.pop("timestamp")
        d["timestamp_ms"] = int(ts.replace(tzinfo=__import__("datetime").UTC).timestamp() * 1000)
        if "headers" in d:
            d["headers"] = [(h["key"], h["value"]) for h in d["headers"]] if d["headers"] else None
        d["key"] = bytes(d["key"]) if d["key"] is not None else None
        d["value"] = bytes(d["value"]) if d["value"] is not None else None
        rows.append(d)
    return sorted(rows, key=lambda d: (d["partition"], d["offset"]))


def test_batch_read_equals_consumer_every_column(spark: Any, strom_broker: str) -> None:
    topic = new_topic(strom_broker, 3)
    records = [(f"user-{i % 17}".encode() if i % 5 else None, f"value-{i}".encode()) for i in range(300)]
    records.append((b"tombstone", None))
    produce(strom_broker, topic, records, headers=True)
    expected = sorted(consume_all(strom_broker, topic, 3), key=lambda d: (d["partition"], d["offset"]))
    assert len(expected) == 301

    df = (
        spark.read.format("strom")
        .option("kafka.bootstrap.servers", strom_broker)
        .option("subscribe", topic)
        .option("includeHeaders", "true")
        .load()
    )
    assert df.columns == [
        "key",
        "value",
        "topic",
        "partition",
        "offset",
        "timestamp",
        "timestampType",
        "headers",
    ]
    assert spark_rows(df) == expected

    # Split into more tasks than partitions: same rows.
    split = (
        spark.read.format("strom")
        .option("kafka.bootstrap.servers", strom_broker)
        .option("subscribePattern", topic.replace("-", "."))
        .option("minPartitions", "7")
        .load()
    )
    assert split.rdd.getNumPartitions() >= 7
    without_headers = [{k: v for k, v in row.items() if k != "headers"} for row in expected]
    assert spark_rows(split) == without_headers


def test_batch_assign_and_specific_offsets(spark: Any, strom_broker: str) -> None:
    topic = new_topic(strom_broker, 2)
    produce(strom_broker, topic, [(None, f"a{i}".encode()) for i in range(20)], partition=0)
    produce(strom_broker, topic, [(None, f"b{i}".encode()) for i in range(10)], partition=1)
    df = (
        spark.read.format("strom")
        .option("kafka.bootstrap.servers", strom_broker)
        .option("assign", json.dumps({topic: [0, 1]}))
        .option("startingOffsets", json.dumps({topic: {"0": 5, "1": -2}}))
        .option("endingOffsets", json.dumps({topic: {"0": 8, "1": -1}}))
        .load()
    )
    got = sorted((r.partition, r.offset) for r in df.select("partition", "offset").collect())
    assert got == [(0, 5), (0, 6), (0, 7)] + [(1, o) for o in range(10)]


@pytest.mark.parametrize("batch_per_record", [True, False])
def test_starting_offsets_by_timestamp_batch(spark: Any, strom_broker: str, batch_per_record: bool) -> None:
    topic, base = timed_topic(strom_broker, 2, batch_per_record)
    df = (
        spark.read.format("strom")
        .option("kafka.bootstrap.servers", strom_broker)
        .option("subscribe", topic)
        .option("startingOffsetsByTimestamp", json.dumps({topic: {"0": base + 3500, "1": base + 7000}}))
        .load()
    )
    got = sorted((r.partition, r.offset) for r in df.select("partition", "offset").collect())
    assert got == [(0, o) for o in range(4, 10)] + [(1, o) for o in range(7, 10)]


def test_ending_timestamp_batch(spark: Any, strom_broker: str) -> None:
    """endingTimestamp: each partition ends at the first offset whose timestamp is >= the given one."""
    topic, base = timed_topic(strom_broker, 2)
    df = (
        spark.read.format("strom")
        .option("kafka.bootstrap.servers", strom_broker)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("endingTimestamp", str(base + 4500))
        .load()
    )
    got = sorted((r.partition, r.offset) for r in df.select("partition", "offset").collect())
    assert got == [(p, o) for p in (0, 1) for o in range(5)]


def test_read_option_errors_surface_like_spark(spark: Any, strom_broker: str) -> None:
    reader = spark.read.format("strom").option("kafka.bootstrap.servers", strom_broker)
    with pytest.raises(Exception, match="One of the following options must be specified"):
        reader.load().collect()
    with pytest.raises(Exception, match="starting offset can't be latest for batch queries"):
        reader.option("subscribe", "x").option("startingOffsets", "latest").load().collect()
    with pytest.raises(Exception, match="fixed schema"):
        reader.schema("value binary").option("subscribe", "x").load().collect()


def test_batch_write_placement_headers_and_partition_column(spark: Any, strom_broker: str) -> None:
    topic = new_topic(strom_broker, 4)
    rows = [(f"k{i}", f"v{i}", None) for i in range(200)] + [("pinned", "to-3", 3)]
    df = spark.createDataFrame(rows, "key string, value string, partition int")
    df.write.mode("append").format("strom").option("kafka.bootstrap.servers", strom_broker).option(
        "topic", topic
    ).save()
    got = consume_all(strom_broker, topic, 4)
    assert len(got) == 201
    for r in got:
        if r["key"] == b"pinned":
            assert r["partition"] == 3
        else:
            assert r["partition"] == partition_for_key(r["key"], 4)
            assert r["value"] == b"v" + r["key"][1:]

    # A topic column and headers column, no topic option.
    other = new_topic(strom_broker, 1)
    with_headers = spark.createDataFrame(
        [(other, b"x", [("h1", b"a"), ("h2", None)])],
        "topic string, value binary, headers array<struct<key: string, value: binary>>",
    )
    with_headers.write.mode("append").format("strom").option("kafka.bootstrap.servers", strom_broker).save()
    (only,) = consume_all(strom_broker, other, 1)
    assert only["value"] == b"x"
    assert only["key"] is None
    assert only["headers"] == [("h1", b"a"), ("h2", None)]


def test_write_errors_fail_the_task_with_the_kafka_error(spark: Any, strom_broker: str) -> None:
    topic = new_topic(strom_broker, 1)
    df = spark.createDataFrame([("v", 7)], "value string, partition int")
    with pytest.raises(Exception, match="UNKNOWN_PARTITION"):
        df.write.mode("append").format("strom").option("kafka.bootstrap.servers", strom_broker).option(
            "topic", topic
        ).save()
    with pytest.raises(Exception, match="Required attribute 'value' not found"):
        spark.createDataFrame([("k",)], "key string").write.mode("append").format("strom").option(
            "kafka.bootstrap.servers", strom_broker
        ).option("topic", topic).save()
    with pytest.raises(Exception, match="Overwrite not allowed"):
        spark.createDataFrame([("v",)], "value string").write.format("strom").mode("overwrite").option(
            "kafka.bootstrap.servers", strom_broker
        ).option("topic", topic).save()
