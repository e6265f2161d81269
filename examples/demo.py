"""`make demo`: a single-node Strom broker with its schema registry, Avro click events, the Spark job, live.

1. Starts `python -m strom.cli.main serve` on free loopback ports (Kafka and the registry's HTTP listener)
   with a temporary data directory.
2. Creates the `clicks` (3 partitions) and `page-stats` topics and registers schema v1 of `clicks-value`.
3. Starts the job (step 4), then runs the generator in a background thread: Avro clicks through the
   registry, 300 events/s, event time running 12x faster than the wall clock, so a 1-minute window closes
   every 5 seconds. 60% of the way through it switches to schema v2, which adds `country` with a default
   (registered as version 2 by the serializer).
4. Runs the Structured Streaming job (examples/clickstream_job.py) on typed columns (`valueFormat` avro)
   with a 2-second trigger and prints each micro-batch of closed windows; the schema change does not stop
   it (its reader schema stays v1, to which v2 records resolve). Then reads back a few records of the
   output topic and the Parquet table, and reads `clicks` again in batch: under v2, the v1 records carry
   the default country `unknown`.
5. Stops everything (the broker by its PID) after DEMO_SECONDS (default 75) and removes the temp data.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import clickstream_generator as generator
import clickstream_job as job

DEMO_SECONDS = float(os.environ.get("DEMO_SECONDS", "75"))
RATE = 300.0
TIME_SCALE = 12.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_broker(data_dir: Path) -> tuple[subprocess.Popen[bytes], str, str]:
    """(process, bootstrap address, schema registry URL)."""
    port, http_port = free_port(), free_port()
    log = open(data_dir / "broker.log", "wb")  # noqa: SIM115 - closed with the process
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "strom.cli.main",
            "serve",
            "--set",
            f"listeners=PLAINTEXT://127.0.0.1:{port}",
            "--set",
            f"http.listeners=http://127.0.0.1:{http_port}",
            "--set",
            f"log.dirs={data_dir / 'logs'}",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"broker exited early, see {data_dir / 'broker.log'}")
        try:
            for listening in (port, http_port):
                socket.create_connection(("127.0.0.1", listening), timeout=0.5).close()
            return proc, f"127.0.0.1:{port}", f"http://127.0.0.1:{http_port}"
        except OSError:
            time.sleep(0.2)
    stop_broker(proc)
    raise RuntimeError("broker did not start listening within 30 s")


def stop_broker(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGTERM)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(5)


def create_topics(bootstrap: str) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic("clicks", 3, 1), NewTopic("page-stats", 1, 1)]).values():
        future.result(timeout=30)


def register_v1(registry_url: str) -> int:
    from confluent_kafka.schema_registry import Schema, SchemaRegistryClient

    client = SchemaRegistryClient({"url": registry_url})
    return int(client.register_schema("clicks-value", Schema(json.dumps(generator.CLICK_V1), "AVRO")))


def announce_v2(registry_url: str) -> None:
    from confluent_kafka.schema_registry import SchemaRegistryClient

    versions = SchemaRegistryClient({"url": registry_url}).get_versions("clicks-value")
    print(
        f"=== producer switches to schema v2 (adds country, default 'unknown'); clicks-value versions "
        f"{versions}; the streaming query keeps running"
    )
    sys.stdout.flush()


def show_evolution(spark: object, bootstrap: str, registry_url: str) -> None:
    """A new batch read takes the latest schema, v2: v1 records carry the default country."""
    clicks = (
        spark.read.format("strom")  # type: ignore[attr-defined]
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", "clicks")
        .option("valueFormat", "avro")
        .option("schema.registry.url", registry_url)
        .load()
    )
    value_type = clicks.schema["value"].dataType.simpleString()
    print(f"\nclicks read in batch under the latest schema: value {value_type}")
    for r in clicks.groupBy("value.country").count().orderBy("country").collect():
        print(f"  country={r.country:<8} clicks={r['count']}")


def show_outputs(spark: object, bootstrap: str, parquet_dir: Path) -> None:
    from pyspark.sql import functions as F

    out = (
        spark.read.format("strom")  # type: ignore[attr-defined]
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", "page-stats")
        .load()
    )
    print(f"\noutput topic page-stats holds {out.count()} records, e.g.:")
    for r in out.select(F.col("key").cast("string"), F.col("value").cast("string")).limit(3).collect():
        print(f"  {r.key} -> {r.value}")
    if any(parquet_dir.glob("batch_id=*")):
        table = spark.read.parquet(str(parquet_dir))  # type: ignore[attr-defined]
        print(f"Parquet table {parquet_dir} holds {table.count()} window rows")


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="strom-demo-") as tmp:
        base = Path(tmp)
        broker, bootstrap, registry_url = start_broker(base)
        print(f"Strom broker pid {broker.pid} on {bootstrap}, schema registry {registry_url}")
        try:
            create_topics(bootstrap)
            print(f"schema v1 of clicks-value registered with id {register_v1(registry_url)}")
            print("starting Spark ...")
            spark = job.spark_session("strom-demo")
            query = job.start_job(
                spark,
                bootstrap,
                "clicks",
                "page-stats",
                str(base / "page-stats-parquet"),
                str(base / "checkpoint"),
                on_batch=job.print_batch,
                registry_url=registry_url,
            )
            clicks = generator.live_clicks(rate=RATE, seconds=DEMO_SECONDS, time_scale=TIME_SCALE)
            feeder = threading.Thread(
                target=generator.produce_avro_clicks,
                args=(bootstrap, "clicks", clicks, registry_url),
                kwargs={
                    "rate": RATE,
                    "v2_after": int(RATE * DEMO_SECONDS * 0.6),
                    "on_v2": lambda: announce_v2(registry_url),
                },
                daemon=True,
            )
            feeder.start()
            print(f"generator: {RATE:.0f} Avro clicks/s, event time x{TIME_SCALE:.0f}")
            query.awaitTermination(DEMO_SECONDS)
            feeder.join()
            failure = query.exception()
            if failure is not None:
                raise RuntimeError(f"the streaming query failed: {failure}")
            # Stop between micro-batches: interrupting one mid-flight makes Spark log a long error.
            query.processAllAvailable()
            query.stop()
            show_outputs(spark, bootstrap, base / "page-stats-parquet")
            show_evolution(spark, bootstrap, registry_url)
            spark.stop()
        finally:
            stop_broker(broker)
    print("demo finished")


if __name__ == "__main__":
    main()
