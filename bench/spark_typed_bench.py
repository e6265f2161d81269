"""Typed Spark reads of Protobuf and JSON Schema values against Avro and against raw bytes, same run.

One single-node Strom broker with its schema registry (a subprocess on free loopback ports, temporary data
directory) and one local[2] SparkSession. The same N click records (user, page, latency_ms, ts, country,
referrer; default 300,000) are loaded (untimed) into three 6-partition topics in Confluent's wire format:
Avro (fastavro), Protobuf (a proto3 message, with the message-index byte) and JSON Schema (JSON text), each
under its subject's registered schema.

Measured in interleaved rounds after an untimed warm-up (medians reported), each a batch read into a
`noop` sink:

* **raw**: the Avro topic's bytes as Kafka holds them, `where(length(value) > 0)`;
* **avro**, **protobuf**, **json**: `valueFormat` of that format, `where(value.latency_ms >= 0)` -- each
  value decoded into a typed struct column.

Usage::

    .venv/bin/python bench/spark_typed_bench.py [--records 300000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from spark_avro_bench import V2, load_topic, payloads

from strom.testing import BrokerProcess

PROTO = """syntax = "proto3";
package bench;
message Click {
  string user = 1;
  string page = 2;
  int32 latency_ms = 3;
  int64 ts = 4;
  string country = 5;
  optional string referrer = 6;
}
"""
JSON_SCHEMA = {
    "$schema": "http://json-schema.org/draft-07/schema#",
    "title": "Click",
    "type": "object",
    "properties": {
        "user": {"type": "string"},
        "page": {"type": "string"},
        "latency_ms": {"type": "integer"},
        "ts": {"type": "integer"},
        "country": {"type": "string"},
        "referrer": {"type": ["null", "string"]},
    },
}


def register(url: str, subject: str, text: str, schema_type: str) -> int:
    from confluent_kafka.schema_registry import Schema, SchemaRegistryClient

    return int(SchemaRegistryClient({"url": url}).register_schema(subject, Schema(text, schema_type)))


def datums(avro_values: list[bytes]) -> list[dict[str, Any]]:
    """The records behind the Avro payloads (decoded once, untimed)."""
    import io

    from fastavro import parse_schema, schemaless_reader

    parsed = parse_schema(V2)
    return [schemaless_reader(io.BytesIO(v[5:]), parsed, None) for v in avro_values]


def protobuf_values(schema_id: int, rows: list[dict[str, Any]]) -> list[bytes]:
    from google.protobuf import message_factory
    from google.protobuf.descriptor_pool import DescriptorPool

    from strom.registry.protobuf_schema import parse

    pool = DescriptorPool()
    pool.Add(parse(PROTO).file)
    click = message_factory.GetMessageClass(pool.FindMessageTypeByName("bench.Click"))
    header = b"\x00" + schema_id.to_bytes(4, "big") + b"\x00"
    return [
        header + click(**{k: v for k, v in row.items() if v is not None}).SerializeToString() for row in rows
    ]


def json_values(schema_id: int, rows: list[dict[str, Any]]) -> list[bytes]:
    header = b"\x00" + schema_id.to_bytes(4, "big")
    return [header + json.dumps(row, separators=(",", ":")).encode() for row in rows]


def run(bootstrap: str, url: str, records: int, repeat: int) -> dict[str, list[float]]:
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    import strom.spark

    stamp = int(time.time())
    topics = {name: f"bench-{name}-{stamp}" for name in ("avro", "protobuf", "json")}
    avro_id = register(url, f"{topics['avro']}-value", json.dumps(V2), "AVRO")
    avro = payloads(avro_id, avro_id, records, evolved=False)
    rows = datums(avro)
    encoded = {
        "avro": avro,
        "protobuf": protobuf_values(register(url, f"{topics['protobuf']}-value", PROTO, "PROTOBUF"), rows),
        "json": json_values(register(url, f"{topics['json']}-value", json.dumps(JSON_SCHEMA), "JSON"), rows),
    }
    del rows
    for name, values in encoded.items():
        size = statistics.mean(len(v) for v in values[:10_000])
        print(f"loading {records:,} {name} records (mean {size:.0f} B) into {topics[name]} ...", flush=True)
        load_topic(bootstrap, topics[name], values)
    del encoded, avro

    spark = (
        SparkSession.builder.master("local[2]")
        .appName("strom-spark-typed-bench")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    strom.spark.register(spark)

    def query(options: dict[str, str], condition: Any) -> Callable[[], None]:
        def action() -> None:
            df = spark.read.format("strom").options(**options).load().where(condition)
            df.write.format("noop").mode("overwrite").save()

        return action

    def typed(name: str) -> dict[str, str]:
        return {
            "kafka.bootstrap.servers": bootstrap,
            "subscribe": topics[name],
            "valueFormat": name,
            "schema.registry.url": url,
        }

    raw = {"kafka.bootstrap.servers": bootstrap, "subscribe": topics["avro"]}
    actions = {"raw": query(raw, F.length("value") > 0)}
    actions.update({name: query(typed(name), F.col("value.latency_ms") >= 0) for name in topics})
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
    parser = argparse.ArgumentParser(description="Spark typed read rates: Protobuf, JSON Schema, Avro, raw")
    parser.add_argument("--records", type=int, default=300_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="strom-typed-bench-") as tmp:
        broker = BrokerProcess(Path(tmp) / "broker")
        broker.start()
        try:
            assert broker.http_url is not None
            rates = run(broker.bootstrap, broker.http_url, args.records, args.repeat)
        finally:
            broker.stop()
    medians = {name: statistics.median(values) for name, values in rates.items()}
    head = f"local[2], {args.records:,} records, median of {args.repeat}"
    print(f"\n| measurement ({head}) | records/s | of raw | of Avro |")
    print("|---|---|---|---|")
    for name, rate in medians.items():
        print(f"| {name}: noop | {rate:,.0f} | {rate / medians['raw']:.0%} | {rate / medians['avro']:.0%} |")


if __name__ == "__main__":
    main()
