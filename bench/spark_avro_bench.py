"""Typed Avro reads in Spark against raw-bytes reads of the same records (issue 9: target >= 50%).

One single-node Strom broker with its schema registry (a subprocess on free loopback ports, temporary data
directory) and one local[2] SparkSession. A 6-partition topic is loaded (untimed) with N click records in
Confluent's wire format (default 1,000,000; about 60-70 bytes of Avro each: user, page, latency_ms, ts,
country, referrer), encoded with fastavro under the subject's latest schema (v2); with `--evolved` half of
them are written under v1 (no country or referrer), so that half is resolved to v2 on read.

Measured in interleaved rounds after an untimed warm-up (medians reported):

* **raw**: `spark.read.format("strom")`, `where(length(value) > 0)`, `noop` sink -- the bytes as Kafka holds
  them;
* **avro**: the same records with `valueFormat=avro`, `where(value.latency_ms >= 0)`, `noop` sink -- each
  value decoded into a typed struct column.

Usage::

    .venv/bin/python bench/spark_avro_bench.py [--records 1000000] [--repeat 3] [--evolved]
"""

from __future__ import annotations

import argparse
import io
import json
import os
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from strom.testing import BrokerProcess

PARTITIONS = 6
V1: dict[str, Any] = {
    "type": "record",
    "name": "Click",
    "namespace": "bench",
    "fields": [
        {"name": "user", "type": "string"},
        {"name": "page", "type": "string"},
        {"name": "latency_ms", "type": "int"},
        {"name": "ts", "type": "long"},
    ],
}
V2: dict[str, Any] = {
    **V1,
    "fields": [
        *V1["fields"],
        {"name": "country", "type": "string", "default": "unknown"},
        {"name": "referrer", "type": ["null", "string"], "default": None},
    ],
}
PAGES = ["/", "/search", "/product", "/cart", "/checkout", "/account"]


def register(url: str, subject: str, schema: dict[str, Any]) -> int:
    from confluent_kafka.schema_registry import Schema, SchemaRegistryClient

    return int(
        SchemaRegistryClient({"url": url}).register_schema(subject, Schema(json.dumps(schema), "AVRO"))
    )


def payloads(v1_id: int, v2_id: int, records: int, evolved: bool) -> list[bytes]:
    """`records` wire-format payloads: v2, or with `evolved` every other one v1."""
    from fastavro import parse_schema, schemaless_writer

    from strom.spark.avro_codec import frame

    parsed = {v1_id: parse_schema(V1), v2_id: parse_schema(V2)}
    rng = random.Random(3)
    out = []
    buffer = io.BytesIO()
    for i in range(records):
        schema_id = v1_id if evolved and i % 2 else v2_id
        datum = {
            "user": f"user-{rng.randrange(50_000)}",
            "page": PAGES[i % len(PAGES)],
            "latency_ms": rng.randrange(2_000),
            "ts": 1_700_000_000_000 + i,
            "country": ("de", "fr", "us")[i % 3],
            "referrer": None if i % 4 else "https://example.com/ref",
        }
        buffer.seek(0)
        buffer.truncate()
        schemaless_writer(buffer, parsed[schema_id], datum)
        out.append(frame(schema_id, buffer.getvalue()))
    return out


def load_topic(bootstrap: str, topic: str, values: list[bytes]) -> None:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result(30)
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "linger.ms": 20,
            "batch.size": 1_000_000,
            "queue.buffering.max.messages": 1_000_000,
        }
    )
    for i, value in enumerate(values):
        while True:
            try:
                producer.produce(topic, value, partition=i % PARTITIONS)
                break
            except BufferError:
                producer.poll(0.05)
    if producer.flush(120):
        raise RuntimeError("load: records not delivered")


def run(bootstrap: str, url: str, records: int, repeat: int, evolved: bool) -> dict[str, list[float]]:
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    import strom.spark

    topic = f"bench-avro-{int(time.time())}"
    v1_id = register(url, f"{topic}-value", V1)
    v2_id = register(url, f"{topic}-value", V2)
    values = payloads(v1_id, v2_id, records, evolved)
    size = statistics.mean(len(v) for v in values[:10_000])
    print(
        f"loading {records:,} Avro records (mean {size:.0f} B, evolved={evolved}) into {topic} ...",
        flush=True,
    )
    load_topic(bootstrap, topic, values)
    del values

    spark = (
        SparkSession.builder.master("local[2]")
        .appName("strom-spark-avro-bench")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    strom.spark.register(spark)
    common = {"kafka.bootstrap.servers": bootstrap, "subscribe": topic}
    avro = {**common, "valueFormat": "avro", "schema.registry.url": url}

    def query(options: dict[str, str], condition: Any) -> Callable[[], None]:
        def action() -> None:
            spark.read.format("strom").options(**options).load().where(condition).write.format("noop").mode(
                "overwrite"
            ).save()

        return action

    actions = {
        "raw": query(common, F.length("value") > 0),
        "avro": query(avro, F.col("value.latency_ms") >= 0),
    }
    for action in actions.values():  # warm-up: Python workers, schema caches
        action()
    rates: dict[str, list[float]] = {name: [] for name in actions}
    for i in range(repeat):
        for name, action in actions.items():
            started = time.perf_counter()
            action()
            seconds = time.perf_counter() - started
            rates[name].append(records / seconds)
            print(f"  round {i + 1} {name}: {seconds:.2f} s, {records / seconds:,.0f} records/s", flush=True)
    spark.stop()
    return rates


def main() -> None:
    parser = argparse.ArgumentParser(description="Spark Avro read rate against raw bytes")
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--evolved", action="store_true", help="half the records written under v1")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="strom-avro-bench-") as tmp:
        broker = BrokerProcess(Path(tmp) / "broker")
        broker.start()
        try:
            assert broker.http_url is not None
            rates = run(broker.bootstrap, broker.http_url, args.records, args.repeat, args.evolved)
        finally:
            broker.stop()
    ratios = [a / r for a, r in zip(rates["avro"], rates["raw"], strict=True)]
    raw, avro = statistics.median(rates["raw"]), statistics.median(rates["avro"])
    print("  avro / raw per round: " + ", ".join(f"{r:.0%}" for r in ratios))
    head = f"local[2], {args.records:,} records, median of {args.repeat}"
    print(f"\n| measurement ({head}) | records/s |")
    print("|---|---|")
    print(f"| raw bytes: filter on length(value), noop | {raw:,.0f} |")
    what = "half v1 resolved to v2" if args.evolved else "all written with the reader schema"
    print(
        f"| Avro struct ({what}): filter on value.latency_ms, noop | {avro:,.0f} ({avro / raw:.0%} of raw) |"
    )


if __name__ == "__main__":
    main()
