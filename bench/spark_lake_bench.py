"""Spark's read across an Iceberg topic's table and its log, against reading the table alone.

    PYTHONPATH=src .venv/bin/python bench/spark_lake_bench.py [--records 500000] [--tail 0.1] [--repeat 3]

One broker (`BrokerProcess`, the default SQL catalog in its data dir) and one local[2] SparkSession. A
``--partitions``-partition topic with ``strom.iceberg.mode=value_schema_id_prefix`` gets ``--records``
Avro records (one string field, about ``--size`` bytes each, every value different, Confluent wire
format). The first ``1 - --tail`` of them are produced, translated (the bench waits until the table
records every offset, then holds the translator with a target lag of an hour) and deleted from the log
with DeleteRecords, so that only the table has them; the rest are produced after that and stay in the log
only. Loading is not timed. Then, interleaved, ``--repeat`` rounds of:

* ``across``: ``spark.read.format("strom")`` with ``strom.iceberg.history=true`` and ``valueFormat avro``
  from ``earliest``: the history from the table, the tail from the log, every record once;
* ``spark parquet``: Spark's own Parquet reader over the data files of the table's current snapshot (the
  files the ``across`` read takes its history from; no Iceberg planning, no Strom source);
* ``pyiceberg``: ``table.scan().to_arrow()`` of the same snapshot (pyiceberg plans and reads the files).

Each Spark read goes to Spark's ``noop`` sink (every column materialized); medians of the rounds are
reported as rows/s and MB/s, MB being the records' value bytes as produced (the same logical data for
all three, so the rates compare), beside the Parquet files' size.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient
from pyiceberg.catalog import load_catalog

sys.path.insert(0, str(Path(__file__).resolve().parent))

from iceberg_bench import alter, create, produce, recorded, values
from spark_bench import bench_session

from strom.testing import BrokerProcess

HOLD_MS = "3600000"


def distinct_values(broker: BrokerProcess, topic: str, size: int, first: int, count: int) -> list[bytes]:
    """``count`` different Avro values of about ``size`` bytes: one serialized by the registry's
    serializer, its string's bytes replaced (the length, hence the encoding's prefix, unchanged)."""
    [one] = values(broker, topic, size, 1)
    body = max(size - 7, 1)
    head = one[:-body]
    return [head + f"{first + i:012d}{os.urandom(body).hex()}"[:body].encode() for i in range(count)]


def end_offsets(admin: AdminClient, topic: str, partitions: int) -> dict[int, int]:
    from confluent_kafka.admin import OffsetSpec

    futures = admin.list_offsets({TopicPartition(topic, p): OffsetSpec.latest() for p in range(partitions)})
    return {tp.partition: f.result(30).offset for tp, f in futures.items()}


def load(broker: BrokerProcess, topic: str, args: argparse.Namespace) -> int:
    """Produce, translate, hold, delete the log's head, produce the tail; the records in the table."""
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    configs = {"strom.iceberg.mode": "value_schema_id_prefix", "strom.iceberg.target.lag.ms": "500"}
    create(admin, topic, configs, args.partitions)
    history = int(args.records * (1 - args.tail))
    produce(broker.bootstrap, topic, distinct_values(broker, topic, args.size, 0, history))
    ends = end_offsets(admin, topic, args.partitions)
    log_dir = broker.data_dir / "logs"
    began = time.perf_counter()
    while recorded(log_dir, topic) != ends:
        if time.perf_counter() - began > 1800:
            raise RuntimeError(f"the table did not catch up: {recorded(log_dir, topic)} vs {ends}")
        time.sleep(0.5)
    print(f"translated {history:,} records in {time.perf_counter() - began:.0f} s", flush=True)
    alter(admin, topic, {"strom.iceberg.target.lag.ms": HOLD_MS})
    for future in admin.delete_records([TopicPartition(topic, p, o) for p, o in ends.items()]).values():
        future.result(30)
    tail = args.records - history
    produce(broker.bootstrap, topic, distinct_values(broker, topic, args.size, history, tail))
    assert recorded(log_dir, topic) == ends, "the translator committed past the seam"
    return history


def run(args: argparse.Namespace) -> None:
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    os.environ["PYSPARK_PYTHON"] = sys.executable
    with tempfile.TemporaryDirectory() as tmp:
        broker = BrokerProcess(Path(tmp) / "data", {"strom.iceberg.translation.interval.ms": "100"})
        broker.start()
        try:
            topic = "lake-read"
            history = load(broker, topic, args)
            measure(broker, topic, history, args)
        finally:
            broker.stop()


def measure(broker: BrokerProcess, topic: str, history: int, args: argparse.Namespace) -> None:
    spark = bench_session("strom-lake-bench")
    uri = f"sqlite:///{broker.data_dir / 'logs'}/iceberg/catalog.db"
    warehouse = f"file://{broker.data_dir / 'logs'}/iceberg/warehouse"
    table = load_catalog("strom", type="sql", uri=uri, warehouse=warehouse).load_table(("strom", topic))
    files = [task.file for task in table.scan().plan_files()]
    paths = [f.file_path for f in files]
    parquet_mb = sum(f.file_size_in_bytes for f in files) / 1e6
    assert broker.http_url is not None
    across_options = {
        "kafka.bootstrap.servers": broker.bootstrap,
        "subscribe": topic,
        "startingOffsets": "earliest",
        "strom.iceberg.history": "true",
        "strom.iceberg.catalog.uri": uri,
        "valueFormat": "avro",
        "schema.registry.url": broker.http_url,
    }

    def across() -> int:
        df = spark.read.format("strom").options(**across_options).load()
        df.write.format("noop").mode("overwrite").save()
        return args.records

    def spark_parquet() -> int:
        spark.read.parquet(*paths).write.format("noop").mode("overwrite").save()
        return history

    def pyiceberg() -> int:
        return int(table.scan().to_arrow().num_rows)

    reads = {"across": across, "spark parquet": spark_parquet, "pyiceberg": pyiceberg}
    # Correctness first (untimed, also the warm-up): every offset once across the seam.
    df = spark.read.format("strom").options(**across_options).load()
    assert df.count() == args.records == df.select("partition", "offset").distinct().count()
    assert spark.read.parquet(*paths).count() == history == pyiceberg()
    seconds: dict[str, list[float]] = {name: [] for name in reads}
    for _ in range(args.repeat):
        for name, read in reads.items():
            began = time.perf_counter()
            rows = read()
            seconds[name].append(time.perf_counter() - began)
            print(f"  {name}: {rows:,} rows in {seconds[name][-1]:.2f} s", flush=True)
    print(
        f"{args.records:,} records of {args.size} B, {history:,} in the table "
        f"({parquet_mb:.1f} MB of Parquet in {len(paths)} files), {args.records - history:,} in the log "
        f"only; load {os.getloadavg()[0]:.1f}"
    )
    for name, rows in (("across", args.records), ("spark parquet", history), ("pyiceberg", history)):
        median = statistics.median(seconds[name])
        mb = rows * args.size / 1e6
        print(
            f"{name}: {rows:,} rows, median {median:.2f} s = {rows / median:,.0f} rows/s, "
            f"{mb / median:.1f} MB/s (rounds {[round(s, 2) for s in seconds[name]]})",
            flush=True,
        )
    spark.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=500_000)
    parser.add_argument("--tail", type=float, default=0.1, help="the fraction left in the log only")
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    print(f"load {os.getloadavg()[0]:.1f}", flush=True)
    run(args)


if __name__ == "__main__":
    main()
