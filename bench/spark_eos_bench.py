"""What the exactly-once Spark sink costs against at-least-once, per micro-batch.

One local[2] SparkSession and one single-node Strom broker (`strom.testing.BrokerProcess`, temporary data
directory). A 3-partition topic holds N records of 100-byte values (default 30,000); a streaming query copies
it with `Trigger.AvailableNow` and `maxOffsetsPerTrigger` N/10 (10 micro-batches of 3 tasks) into a fresh
3-partition topic, once per delivery guarantee per round; rounds interleave the two. The first round warms
Spark up and is left out; medians of the others are reported, and every copy is checked (a read_committed
count of the output equals N). Usage::

    .venv/bin/python bench/spark_eos_bench.py [--records 30000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
import uuid
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from strom.testing import BrokerProcess

GUARANTEES = ("exactly-once", "at-least-once")


def new_topic(bootstrap: str) -> str:
    name = f"eos-bench-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})  # kept alive until the futures are done
    for future in admin.create_topics([NewTopic(name, 3, 1)]).values():
        future.result(30)
    return name


def committed_records(bootstrap: str, topic: str) -> int:
    """Records a read_committed consumer would read (markers and aborted records excluded)."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"b-{uuid.uuid4().hex}",
            "isolation.level": "read_committed",
        }
    )
    count = 0
    try:
        for p in range(3):
            tp = TopicPartition(topic, p)
            high = consumer.get_watermark_offsets(tp, timeout=10)[1]
            consumer.assign([TopicPartition(topic, p, 0)])
            while consumer.position([tp])[0].offset < high:
                count += len([m for m in consumer.consume(1000, timeout=1) if m.error() is None])
    finally:
        consumer.close()
    return count


def copy_seconds(
    spark: Any, bootstrap: str, source: str, records: int, guarantee: str, checkpoint: str
) -> float:
    sink = new_topic(bootstrap)
    df = (
        spark.readStream.format("strom")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", source)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", str(records // 10))
        .load()
    )
    started = time.monotonic()
    query = (
        df.select("key", "value")
        .writeStream.format("strom")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("topic", sink)
        .option("deliveryGuarantee", guarantee)
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    elapsed = time.monotonic() - started
    assert committed_records(bootstrap, sink) == records, f"{guarantee}: the copy is incomplete"
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=30_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    import strom.spark

    work = tempfile.mkdtemp(prefix="strom-eos-bench-")
    with BrokerProcess(os.path.join(work, "broker")) as broker:
        bootstrap = broker.bootstrap
        spark = (
            SparkSession.builder.master("local[2]")
            .config("spark.ui.enabled", "false")
            .config("spark.sql.streaming.pollingDelay", "50ms")
            .getOrCreate()
        )
        spark.sparkContext.setLogLevel("ERROR")
        strom.spark.register(spark)
        source = new_topic(bootstrap)
        producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
        for i in range(args.records):
            producer.produce(source, b"x" * 100, f"k{i}".encode())
            if i % 10_000 == 0:
                producer.poll(0)
        assert producer.flush(60) == 0
        times: dict[str, list[float]] = {g: [] for g in GUARANTEES}
        for round_no in range(args.repeat + 1):
            for guarantee in GUARANTEES:
                checkpoint = os.path.join(work, f"ck-{guarantee}-{round_no}")
                seconds = copy_seconds(spark, bootstrap, source, args.records, guarantee, checkpoint)
                print(f"round {round_no} {guarantee}: {seconds:.2f} s", flush=True)
                if round_no:  # round 0 warms up
                    times[guarantee].append(seconds)
        spark.stop()
    per_batch = {g: statistics.median(v) / 10 for g, v in times.items()}
    for guarantee in GUARANTEES:
        print(
            f"{guarantee}: median {statistics.median(times[guarantee]):.2f} s for 10 micro-batches x 3 tasks "
            f"({per_batch[guarantee]:.3f} s per micro-batch)"
        )
    extra = (per_batch["exactly-once"] - per_batch["at-least-once"]) / 3
    print(f"exactly-once costs {extra * 1000:.0f} ms more per task and micro-batch")


if __name__ == "__main__":
    main()
