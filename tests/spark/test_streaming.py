"""Structured Streaming through format `strom`: triggers, checkpoints, read limits, data loss."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic

from tests.spark.kafka_helpers import consume_all, new_topic, produce, recent_base_ms

pytestmark = pytest.mark.spark


def stream(spark: Any, bootstrap: str, **options: str) -> Any:
    reader = spark.readStream.format("strom").option("kafka.bootstrap.servers", bootstrap)
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


def run_available_now(df: Any, checkpoint: Path) -> list[list[tuple[int, int, bytes]]]:
    """Run to completion with Trigger.AvailableNow; returns the (partition, offset, value) rows per batch."""
    batches: list[list[tuple[int, int, bytes]]] = []

    def collect(batch_df: Any, _batch_id: int) -> None:
        rows = batch_df.select("partition", "offset", "value").collect()
        batches.append([(r.partition, r.offset, bytes(r.value)) for r in rows])

    query = (
        df.writeStream.foreachBatch(collect)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(120), "availableNow query did not finish"
    assert query.exception() is None
    return batches


def flat(batches: list[list[tuple[int, int, bytes]]]) -> list[tuple[int, int, bytes]]:
    return sorted(row for batch in batches for row in batch)


def test_available_now_then_resume_from_checkpoint(spark: Any, strom_broker: str, tmp_path: Path) -> None:
    topic = new_topic(strom_broker, 3)
    produce(strom_broker, topic, [(f"k{i}".encode(), f"a{i}".encode()) for i in range(100)])
    df = stream(spark, strom_broker, subscribe=topic, startingOffsets="earliest")
    first = flat(run_available_now(df, tmp_path / "ck"))
    assert sorted(v for _, _, v in first) == sorted(f"a{i}".encode() for i in range(100))

    # The checkpoint holds Spark-Kafka-shaped offsets JSON: {"topic": {"partition": next offset}}.
    offsets_files = sorted((tmp_path / "ck" / "offsets").glob("[0-9]*"), key=lambda p: int(p.name))
    stored = json.loads(offsets_files[-1].read_text().splitlines()[-1])
    assert set(stored) == {topic}
    assert sum(stored[topic].values()) == 100

    produce(strom_broker, topic, [(f"k{i}".encode(), f"b{i}".encode()) for i in range(40)])
    second = flat(run_available_now(df, tmp_path / "ck"))
    assert sorted(v for _, _, v in second) == sorted(f"b{i}".encode() for i in range(40))


def test_max_offsets_per_trigger_bounds_each_micro_batch(
    spark: Any, strom_broker: str, tmp_path: Path
) -> None:
    topic = new_topic(strom_broker, 3)
    produce(strom_broker, topic, [(f"k{i}".encode(), f"v{i}".encode()) for i in range(1000)])
    df = stream(spark, strom_broker, subscribe=topic, startingOffsets="earliest", maxOffsetsPerTrigger="300")
    batches = [b for b in run_available_now(df, tmp_path / "ck") if b]
    assert [len(b) for b in batches] == [300, 300, 300, 100]
    assert len({(p, o) for p, o, _ in flat(batches)}) == 1000


def test_subscribe_pattern_picks_up_new_topics_and_partitions(
    spark: Any, strom_broker: str, tmp_path: Path
) -> None:
    first = new_topic(strom_broker, 1, prefix="pat")
    prefix = first.split("-")[1][:4]
    produce(strom_broker, first, [(None, b"one")])
    pattern = f"pat-{prefix}.*|pat2-{prefix}.*"
    df = stream(spark, strom_broker, subscribePattern=pattern, startingOffsets="earliest")
    assert [v for _, _, v in flat(run_available_now(df, tmp_path / "ck"))] == [b"one"]

    second = f"pat2-{prefix}-x"
    admin = AdminClient({"bootstrap.servers": strom_broker})
    for f in admin.create_topics([NewTopic(second, 2, 1)]).values():
        f.result(timeout=30)
    produce(strom_broker, second, [(None, b"two"), (None, b"three")], partition=1)
    for f in admin.create_partitions([NewPartitions(first, 2)]).values():
        f.result(timeout=30)
    produce(strom_broker, first, [(None, b"four")], partition=1)
    got = sorted(v for _, _, v in flat(run_available_now(df, tmp_path / "ck")))
    assert got == sorted([b"two", b"three", b"four"])


def test_starting_timestamp_streaming(spark: Any, strom_broker: str, tmp_path: Path) -> None:
    topic = new_topic(strom_broker, 1)
    base = recent_base_ms()
    produce(
        strom_broker,
        topic,
        [(None, f"v{i}".encode()) for i in range(10)],
        timestamps=[base + i * 1000 for i in range(10)],
        batch_per_record=True,
    )
    df = stream(spark, strom_broker, subscribe=topic, startingTimestamp=str(base + 6000))
    assert [o for _, o, _ in flat(run_available_now(df, tmp_path / "ck"))] == [6, 7, 8, 9]


def delete_records_before(bootstrap: str, topic: str, partition: int, offset: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.delete_records([TopicPartition(topic, partition, offset)]).values():
        future.result(timeout=30)


def test_fail_on_data_loss_true_fails_false_skips(spark: Any, strom_broker: str, tmp_path: Path) -> None:
    topic = new_topic(strom_broker, 1)
    produce(strom_broker, topic, [(None, f"v{i}".encode()) for i in range(100)])
    checkpoint = tmp_path / "ck"
    strict = stream(spark, strom_broker, subscribe=topic, startingOffsets="earliest")
    assert len(flat(run_available_now(strict, checkpoint))) == 100

    produce(strom_broker, topic, [(None, f"w{i}".encode()) for i in range(100)])
    delete_records_before(strom_broker, topic, 0, 150)  # offsets 100..149 were never read
    with pytest.raises(
        Exception, match=r"(?s)Cannot fetch offset 100.*earliest available offset is 150.*failOnDataLoss"
    ):
        run_available_now(strict, checkpoint)

    lenient = stream(spark, strom_broker, subscribe=topic, startingOffsets="earliest", failOnDataLoss="false")
    rows = flat(run_available_now(lenient, checkpoint))
    assert [o for _, o, _ in rows] == list(range(150, 200))

    # Batch reads apply the same rule to explicit starting offsets.
    batch = (
        spark.read.format("strom")
        .option("kafka.bootstrap.servers", strom_broker)
        .option("subscribe", topic)
        .option("startingOffsets", json.dumps({topic: {"0": 120}}))
    )
    with pytest.raises(Exception, match="failOnDataLoss"):
        batch.load().collect()
    assert batch.option("failOnDataLoss", "false").load().count() == 50


def test_processing_time_stop_restart_while_producing_exactly_once(
    spark: Any, strom_broker: str, tmp_path: Path
) -> None:
    topic = new_topic(strom_broker, 3)
    stop = threading.Event()
    produced: list[bytes] = []

    def producer_loop() -> None:
        n = 0
        while not stop.is_set():
            chunk = [(f"k{n + i}".encode(), f"r{n + i}".encode()) for i in range(25)]
            produce(strom_broker, topic, chunk)
            produced.extend(v for _, v in chunk)
            n += 25
            time.sleep(0.05)

    thread = threading.Thread(target=producer_loop, daemon=True)
    thread.start()
    out, checkpoint = tmp_path / "out", tmp_path / "ck"
    df = stream(spark, strom_broker, subscribe=topic, startingOffsets="earliest").select(
        "partition", "offset", "value"
    )
    try:
        for run_s in (2.0, 1.3):
            query = (
                df.writeStream.format("parquet")
                .option("path", str(out))
                .option("checkpointLocation", str(checkpoint))
                .trigger(processingTime="500 milliseconds")
                .start()
            )
            deadline = time.monotonic() + 60
            while query.lastProgress is None and time.monotonic() < deadline:
                time.sleep(0.2)
            assert query.lastProgress is not None, "no micro-batch ran"
            time.sleep(run_s)  # keep consuming while the producer keeps writing, then stop mid-stream
            assert query.exception() is None
            query.stop()
    finally:
        stop.set()
        thread.join(30)
    # Drain what was produced after the second stop, from the same checkpoint.
    drain = (
        df.writeStream.format("parquet")
        .option("path", str(out))
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    assert drain.awaitTermination(120)
    rows = spark.read.parquet(str(out)).collect()
    keys = [(r.partition, r.offset) for r in rows]
    assert len(keys) == len(set(keys)), "a record was written twice"
    assert sorted(bytes(r.value) for r in rows) == sorted(produced)


def test_streaming_sink_copies_a_topic(spark: Any, strom_broker: str, tmp_path: Path) -> None:
    source, target = new_topic(strom_broker, 3), new_topic(strom_broker, 3)
    records = [(f"k{i}".encode(), f"v{i}".encode()) for i in range(200)]
    produce(strom_broker, source, records, headers=True)
    df = stream(spark, strom_broker, subscribe=source, startingOffsets="earliest", includeHeaders="true")
    query = (
        df.select("key", "value", "headers")
        .writeStream.format("strom")
        .option("kafka.bootstrap.servers", strom_broker)
        .option("topic", target)
        .option("checkpointLocation", str(tmp_path / "ck"))
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(120)
    assert query.exception() is None
    copied = consume_all(strom_broker, target, 3)
    original = consume_all(strom_broker, source, 3)
    assert sorted((r["key"], r["value"], str(r["headers"])) for r in copied) == sorted(
        (r["key"], r["value"], str(r["headers"])) for r in original
    )
    # Same murmur2 placement as the original producer (both Java-compatible).
    assert {(r["key"], r["partition"]) for r in copied} == {(r["key"], r["partition"]) for r in original}


def test_min_offsets_per_trigger_holds_batches_back(spark: Any, strom_broker: str, tmp_path: Path) -> None:
    topic = new_topic(strom_broker, 2)
    sizes: list[int] = []

    def collect(batch_df: Any, _batch_id: int) -> None:
        sizes.append(batch_df.count())

    df = stream(
        spark,
        strom_broker,
        subscribe=topic,
        startingOffsets="earliest",
        minOffsetsPerTrigger="100",
        maxTriggerDelay="10m",
    )
    query = (
        df.writeStream.foreachBatch(collect)
        .option("checkpointLocation", str(tmp_path / "ck"))
        .trigger(processingTime="300 milliseconds")
        .start()
    )
    try:
        # Spark's first trigger runs at once and starts maxTriggerDelay's timer: produce only after it,
        # or the first batch (rightly) takes whatever is there.
        deadline = time.monotonic() + 60
        while not str(query.status["message"]).startswith("Waiting") and time.monotonic() < deadline:
            time.sleep(0.1)
        produce(strom_broker, topic, [(f"k{i}".encode(), b"x") for i in range(60)])
        time.sleep(3)
        assert sum(sizes) == 0, "a batch ran below minOffsetsPerTrigger"
        produce(strom_broker, topic, [(f"k{i}".encode(), b"y") for i in range(60)])
        deadline = time.monotonic() + 60
        while sum(sizes) < 120 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert query.exception() is None
    finally:
        query.stop()
    assert [s for s in sizes if s] == [120]
