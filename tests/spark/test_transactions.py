"""Transactions through format `strom`: read_committed reads and the exactly-once streaming sink.

The source reads committed data by default (`kafka.isolation.level=read_committed`): aborted records
and those of still-open transactions are skipped, and "latest" is the last stable offset, so a read
never waits on an open transaction; `read_uncommitted` shows everything. The streaming sink is
exactly-once by default: a micro-batch re-run after its transactions committed writes nothing again.
"""

from __future__ import annotations

import json
import re
import uuid
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import ConsumerGroupTopicPartitions, Producer
from confluent_kafka.admin import AdminClient

from tests.spark.kafka_helpers import consume_values, new_topic, produce

pytestmark = pytest.mark.spark

ROOT = Path(__file__).resolve().parents[2]


def transactional_producer(bootstrap: str) -> Producer:
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"tx-{uuid.uuid4().hex}"})
    producer.init_transactions(30)
    return producer


def in_transaction(producer: Producer, topic: str, values: list[str], *, commit: bool | None) -> None:
    """Write `values` to partition 0 in one transaction: commit, abort, or (None) leave it open."""
    producer.begin_transaction()
    for value in values:
        producer.produce(topic, value.encode(), partition=0)
    assert producer.flush(30) == 0  # on the broker, whatever happens to the transaction next
    if commit is True:
        producer.commit_transaction(30)
    elif commit is False:
        producer.abort_transaction(30)


def mixed_topic(bootstrap: str) -> tuple[str, Producer]:
    """A one-partition topic: 3 committed, 3 aborted, 3 committed, then 3 in a transaction left open
    (returned with its producer) and 1 non-transactional record written after it."""
    topic = new_topic(bootstrap, 1, prefix="txr")
    producer = transactional_producer(bootstrap)
    in_transaction(producer, topic, ["c0", "c1", "c2"], commit=True)
    in_transaction(producer, topic, ["a0", "a1", "a2"], commit=False)
    in_transaction(producer, topic, ["c3", "c4", "c5"], commit=True)
    in_transaction(producer, topic, ["o0", "o1", "o2"], commit=None)
    produce(bootstrap, topic, [(None, b"after-open")], partition=0)
    return topic, producer


COMMITTED = ["c0", "c1", "c2", "c3", "c4", "c5"]
EVERYTHING = ["c0", "c1", "c2", "a0", "a1", "a2", "c3", "c4", "c5", "o0", "o1", "o2", "after-open"]


def batch_values(spark: Any, bootstrap: str, topic: str, **options: str) -> list[str]:
    reader = spark.read.format("strom").option("kafka.bootstrap.servers", bootstrap)
    reader = reader.option("subscribe", topic)
    for key, value in options.items():
        reader = reader.option(key, value)
    return [bytes(r.value).decode() for r in reader.load().orderBy("offset").collect()]


def test_batch_read_is_read_committed_by_default(spark: Any, strom_broker: str) -> None:
    topic, producer = mixed_topic(strom_broker)
    # The open transaction pins the last stable offset: nothing from it or after it is read.
    assert batch_values(spark, strom_broker, topic) == COMMITTED
    explicit = batch_values(spark, strom_broker, topic, **{"kafka.isolation.level": "read_committed"})
    assert explicit == COMMITTED
    everything = batch_values(spark, strom_broker, topic, **{"kafka.isolation.level": "read_uncommitted"})
    assert everything == EVERYTHING
    producer.commit_transaction(30)
    assert batch_values(spark, strom_broker, topic) == [*COMMITTED, "o0", "o1", "o2", "after-open"]


def available_now(spark: Any, bootstrap: str, topic: str, checkpoint: Path, **options: str) -> list[str]:
    reader = (
        spark.readStream.format("strom")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
    )
    for key, value in options.items():
        reader = reader.option(key, value)
    rows: list[tuple[int, str]] = []

    def collect(batch_df: Any, _batch_id: int) -> None:
        rows.extend((r.offset, bytes(r.value).decode()) for r in batch_df.collect())

    query = (
        reader.load()
        .writeStream.foreachBatch(collect)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(120), "availableNow query did not finish"
    assert query.exception() is None
    return [value for _, value in sorted(rows)]


def test_streaming_read_stops_at_the_last_stable_offset(
    spark: Any, strom_broker: str, tmp_path: Path
) -> None:
    topic, producer = mixed_topic(strom_broker)
    checkpoint = tmp_path / "ck"
    assert available_now(spark, strom_broker, topic, checkpoint) == COMMITTED
    uncommitted = available_now(
        spark, strom_broker, topic, tmp_path / "ru", **{"kafka.isolation.level": "read_uncommitted"}
    )
    assert uncommitted == EVERYTHING
    # The open transaction commits and another one aborts: the query resumes where it stopped.
    producer.commit_transaction(30)
    in_transaction(producer, topic, ["a3", "a4"], commit=False)
    in_transaction(producer, topic, ["c6"], commit=True)
    assert available_now(spark, strom_broker, topic, checkpoint) == ["o0", "o1", "o2", "after-open", "c6"]


def copy_query(spark: Any, bootstrap: str, source: str, sink: str, checkpoint: Path, guarantee: str) -> None:
    df = (
        spark.readStream.format("strom")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", source)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", "100")
        .load()
    )
    query = (
        df.select("key", "value")
        .writeStream.format("strom")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("topic", sink)
        .option("deliveryGuarantee", guarantee)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(120)
    assert query.exception() is None


def forget_last_commit(checkpoint: Path) -> int:
    """Delete Spark's commit log entry of the last batch, as if the driver died just before writing it;
    the restarted query re-runs that batch with the same offsets. Returns the batch id."""
    last = max(int(p.name) for p in (checkpoint / "commits").iterdir() if p.name.isdigit())
    (checkpoint / "commits" / str(last)).unlink()
    crc = checkpoint / "commits" / f".{last}.crc"
    if crc.exists():
        crc.unlink()
    return last


def test_exactly_once_sink_skips_a_rerun_batch(spark: Any, strom_broker: str, tmp_path: Path) -> None:
    source = new_topic(strom_broker, 3, prefix="eos-in")
    values = [f"v{i}".encode() for i in range(300)]
    produce(strom_broker, source, [(f"k{i}".encode(), v) for i, v in enumerate(values)])
    runs = {}
    for guarantee in ("exactly-once", "at-least-once"):
        sink = new_topic(strom_broker, 3, prefix="eos-out")
        checkpoint = tmp_path / guarantee
        copy_query(spark, strom_broker, source, sink, checkpoint, guarantee)
        last = forget_last_commit(checkpoint)
        copy_query(spark, strom_broker, source, sink, checkpoint, guarantee)
        runs[guarantee] = (sink, checkpoint, last)

    sink, checkpoint, last = runs["exactly-once"]
    assert sorted(consume_values(strom_broker, sink, 3, "read_committed")) == sorted(values)
    # The at-least-once sink wrote the re-run batch's 100 records a second time.
    duplicated = consume_values(strom_broker, runs["at-least-once"][0], 3, "read_committed")
    assert len(duplicated) == len(values) + 100
    assert set(duplicated) == set(values)

    # The batch id of each task's last transaction sits in its group, named like its transactional id.
    query_id = json.loads((checkpoint / "metadata").read_text())["id"]
    group = f"strom-sink-{query_id}-0"
    admin = AdminClient({"bootstrap.servers": strom_broker})
    listed = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group].result(30)
    (marker,) = listed.topic_partitions
    assert (marker.topic, marker.partition, marker.offset) == (sink, 0, last + 1)
    assert json.loads(marker.metadata)["batchId"] == last


def test_batch_write_refuses_exactly_once(spark: Any, strom_broker: str) -> None:
    df = spark.createDataFrame([("k", "v")], "key string, value string")
    writer = (
        df.write.format("strom")
        .mode("append")
        .option("kafka.bootstrap.servers", strom_broker)
        .option("topic", "unused")
        .option("deliveryGuarantee", "exactly-once")
    )
    with pytest.raises(Exception, match="exactly-once' is for streaming writes"):
        writer.save()


def test_readme_exactly_once_snippet_runs_as_written(spark: Any, strom_broker: str, tmp_path: Path) -> None:
    """The README's Spark section (read `clicks`, then the exactly-once write, also in docs/spark.md),
    run as written with the broker's address, fresh topics and a temporary checkpoint substituted."""
    readme = (ROOT / "README.md").read_text()
    section = readme[readme.index("## Pipelines on Spark") :]
    section = section[: section.index("\n## ", 1)]
    read_block, write_block = re.findall(r"```python\n(.*?)```", section, re.S)
    assert write_block in (ROOT / "docs" / "spark.md").read_text()
    source = new_topic(strom_broker, 3, prefix="clicks")
    sink = new_topic(strom_broker, 3, prefix="clicks-copy")
    values = [f"click-{i}".encode() for i in range(50)]
    produce(strom_broker, source, [(f"u{i % 7}".encode(), v) for i, v in enumerate(values)])
    script = (
        (read_block + write_block)
        .replace("localhost:9092", strom_broker)
        .replace('"clicks"', f'"{source}"')
        .replace('"clicks-copy"', f'"{sink}"')
        .replace("/tmp/strom-checkpoints/clicks-copy", str(tmp_path / "ck"))
    )
    exec(compile(script, "README.md", "exec"), {})  # the documented snippet itself
    assert sorted(consume_values(strom_broker, sink, 3, "read_committed")) == sorted(values)
