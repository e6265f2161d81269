"""Spark connector benchmark: records/s read into Spark through format `strom` and written by its sink.

In one run, on one machine, with one local[2] SparkSession and one single-node Strom broker (a
subprocess on a free loopback port, temporary data directory):

* **read**: a 6-partition topic holding N records of 100-byte values (default 1,000,000) is read with
  `spark.read.format("strom")`, filtered (`length(value) > 0`) and written to Spark's `noop` sink;
* **ceiling**: the same query over a synthetic in-memory Python Data Source that yields Arrow batches of
  the same schema and sizes (no broker), each batch built from Python objects as any Python source must:
  the ceiling of the Python Data Source path on this machine. For reference, the same source re-slicing
  one prebuilt batch ("engine") shows what Spark alone costs;
* **write**: N rows of 100-byte values (string keys) written with `df.write.format("strom")` into a fresh
  6-partition topic, idempotent producer, acks=all.

Each measurement runs once per round after an untimed warm-up; rounds (`--repeat`, default 3) interleave the
measurements so that load from other processes affects all alike; medians are reported. Loading the topic
is not timed. Usage::

    .venv/bin/python bench/spark_bench.py [--records 1000000] [--repeat 3] [--bootstrap HOST:PORT]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from strom.testing.processes import stop_process

PARTITIONS = 6
VALUE_BYTES = 100


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_broker(data_dir: Path) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    log = open(data_dir / "broker.log", "wb")  # noqa: SIM115 - lives as long as the broker
    cmd = [
        sys.executable,
        "-m",
        "strom.cli.main",
        "serve",
        "--set",
        f"listeners=PLAINTEXT://127.0.0.1:{port}",
    ]
    cmd += ["--set", f"log.dirs={data_dir / 'logs'}"]
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return proc, f"127.0.0.1:{port}"
        except OSError:
            if proc.poll() is not None:
                break
            time.sleep(0.2)
    stop_broker(proc)
    raise RuntimeError(f"broker did not start; see {data_dir / 'broker.log'}")


def stop_broker(proc: subprocess.Popen[bytes]) -> None:
    stop_process(proc, kill_wait_s=5)


def create_topic(bootstrap: str, name: str) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(name, PARTITIONS, 1)]).values():
        future.result(timeout=30)


def load_topic(bootstrap: str, topic: str, records: int) -> float:
    """Produce `records` 100-byte values (keys "k<n>"); returns records/s of the load (informational)."""
    from confluent_kafka import Producer

    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "enable.idempotence": True,
            "partitioner": "murmur2_random",
            "linger.ms": 20,
            "batch.size": 1_000_000,
            "queue.buffering.max.messages": 1_000_000,
        }
    )
    value = b"x" * VALUE_BYTES
    started = time.perf_counter()
    for i in range(records):
        while True:
            try:
                producer.produce(topic, value, b"k%d" % i)
                break
            except BufferError:
                producer.poll(0.05)
        if i % 50_000 == 0:
            producer.poll(0)
    if producer.flush(120):
        raise RuntimeError("load: records not delivered")
    return records / (time.perf_counter() - started)


def synthetic_source(records: int) -> Any:
    """A Python Data Source yielding Arrow batches shaped like Kafka records, from memory."""
    import pyarrow as pa
    from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

    from strom.spark.schema import arrow_schema, schema_ddl

    class SyntheticReader(DataSourceReader):
        def __init__(self, fresh: bool) -> None:
            self.fresh = fresh

        def partitions(self) -> list[InputPartition]:
            return [InputPartition(p) for p in range(PARTITIONS)]

        def read(self, partition: InputPartition) -> Iterator[Any]:
            count = records // PARTITIONS + (1 if partition.value < records % PARTITIONS else 0)
            chunk = 20_000
            schema = arrow_schema(False)
            template = None
            for start in range(0, count, chunk):
                size = min(chunk, count - start)
                if template is None or self.fresh:
                    template = build(partition.value, start, chunk, schema)
                yield template.slice(0, size)

    def build(partition: int, start: int, size: int, schema: Any) -> Any:
        """One batch built from Python objects, as any Python source has to."""
        offsets = range(start, start + size)
        return pa.RecordBatch.from_arrays(
            [
                pa.array([b"k%d" % i for i in offsets], pa.binary()),
                pa.array([b"x" * VALUE_BYTES for _ in offsets], pa.binary()),
                pa.array(["synthetic"] * size, pa.string()),
                pa.array([partition] * size, pa.int32()),
                pa.array(offsets, pa.int64()),
                pa.array([1_700_000_000_000_000] * size, pa.int64()).cast(schema.field(5).type),
                pa.array([0] * size, pa.int32()),
            ],
            schema=schema,
        )

    class SyntheticSource(DataSource):
        @classmethod
        def name(cls) -> str:
            return "synthetic_kafka"

        def schema(self) -> str:
            return schema_ddl(False)

        def reader(self, schema: Any) -> DataSourceReader:
            return SyntheticReader(self.options.get("fresh", "true") == "true")

    return SyntheticSource


def timed(action: Callable[[], Any]) -> float:
    started = time.perf_counter()
    action()
    return time.perf_counter() - started


def bench_session(app_name: str) -> Any:
    """A local[2] SparkSession without UI or progress bars, format ``strom`` registered."""
    from pyspark.sql import SparkSession

    import strom.spark

    spark = (
        SparkSession.builder.master("local[2]")
        .appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    strom.spark.register(spark)
    return spark


def run(bootstrap: str, records: int, repeat: int) -> dict[str, float]:
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import functions as F

    topic = f"bench-read-{int(time.time())}"
    create_topic(bootstrap, topic)
    print(f"loading {records:,} x {VALUE_BYTES} B into {topic} ({PARTITIONS} partitions) ...", flush=True)
    print(f"  load (confluent-kafka producer): {load_topic(bootstrap, topic, records):,.0f} records/s")

    spark = bench_session("strom-spark-bench")
    spark.dataSource.register(synthetic_source(records))

    def read_query(fmt: str, **options: str) -> Callable[[int], Any]:
        def action(_i: int) -> None:
            reader = spark.read.format(fmt)
            for key, value in options.items():
                reader = reader.option(key, value)
            reader.load().where(F.length("value") > 0).write.format("noop").mode("overwrite").save()

        return action

    # Warm-up (untimed): start the Python workers and JIT the paths once.
    read_query("synthetic_kafka")(0)
    spark.read.format("strom").option("kafka.bootstrap.servers", bootstrap).option("subscribe", topic).option(
        "endingOffsets", json.dumps({topic: {str(p): 1000 for p in range(PARTITIONS)}})
    ).load().write.format("noop").mode("overwrite").save()

    source = (
        spark.range(records, numPartitions=PARTITIONS)
        .select(
            F.concat(F.lit("k"), F.col("id").cast("string")).alias("key"),
            F.lpad(F.col("id").cast("string"), VALUE_BYTES, "x").alias("value"),
        )
        .cache()
    )
    source.count()

    def write(i: int) -> None:
        out = f"bench-write-{int(time.time())}-{i}"
        create_topic(bootstrap, out)
        source.write.mode("append").format("strom").option("kafka.bootstrap.servers", bootstrap).option(
            "topic", out
        ).save()

    warm = f"bench-warmup-{int(time.time())}"
    create_topic(bootstrap, warm)
    source.limit(1000).write.mode("append").format("strom").option(
        "kafka.bootstrap.servers", bootstrap
    ).option("topic", warm).save()

    actions = {
        "ceiling": read_query("synthetic_kafka", fresh="true"),
        "engine": read_query("synthetic_kafka", fresh="false"),
        "read": read_query("strom", **{"kafka.bootstrap.servers": bootstrap, "subscribe": topic}),
        "write": write,
    }
    # Rounds interleave the measurements, so that load from other processes on a shared machine hits
    # the ceiling and the connector alike.
    rates: dict[str, list[float]] = {name: [] for name in actions}
    for i in range(repeat):
        for name, action in actions.items():
            seconds = timed(lambda action=action, i=i: action(i))
            rates[name].append(records / seconds)
            print(f"  round {i + 1} {name}: {seconds:.2f} s, {records / seconds:,.0f} records/s", flush=True)
    spark.stop()
    ratios = [read / ceiling for read, ceiling in zip(rates["read"], rates["ceiling"], strict=True)]
    print("  read / ceiling per round: " + ", ".join(f"{r:.0%}" for r in ratios))
    return {name: statistics.median(r) for name, r in rates.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description="strom Spark connector benchmark")
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--bootstrap", help="use this broker instead of starting one")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="strom-spark-bench-") as tmp:
        broker = None
        bootstrap = args.bootstrap
        if bootstrap is None:
            broker, bootstrap = start_broker(Path(tmp))
        try:
            results = run(bootstrap, args.records, args.repeat)
        finally:
            if broker is not None:
                stop_broker(broker)
    ratio = results["read"] / results["ceiling"]
    head = f"local[2], {args.records:,} x {VALUE_BYTES} B, median of {args.repeat}"
    print(f"\n| measurement ({head}) | records/s |")
    print("|---|---|")
    print(f"| synthetic Arrow source, filter, noop (ceiling) | {results['ceiling']:,.0f} |")
    print(f"| same, one prebuilt Arrow batch re-sliced (Spark engine only) | {results['engine']:,.0f} |")
    print(
        f"| strom source, 6-partition topic, filter, noop | {results['read']:,.0f} ({ratio:.0%} of ceiling) |"
    )
    print(f"| strom sink, 6 tasks into a 6-partition topic (idempotent) | {results['write']:,.0f} |")


if __name__ == "__main__":
    main()
