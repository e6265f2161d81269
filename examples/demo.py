"""`make demo`: a single-node Strom broker, the clickstream generator and the Spark job, live, bounded.

1. Starts `python -m strom.cli.main serve` on a free loopback port with a temporary data directory.
2. Creates the `clicks` (3 partitions) and `page-stats` topics.
3. Runs the generator in a background thread: 300 events/s, event time running 12x faster than the wall
   clock, so a 1-minute window closes every 5 seconds.
4. Runs the Structured Streaming job (examples/clickstream_job.py) with a 2-second trigger and prints each
   micro-batch of closed windows, then reads back a few records of the output topic and the Parquet table.
5. Stops everything (the broker by its PID) after DEMO_SECONDS (default 75) and removes the temp data.
"""

from __future__ import annotations

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


def start_broker(data_dir: Path) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
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
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return proc, f"127.0.0.1:{port}"
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
        broker, bootstrap = start_broker(base)
        print(f"Strom broker pid {broker.pid} on {bootstrap}")
        try:
            create_topics(bootstrap)
            clicks = generator.live_clicks(rate=RATE, seconds=DEMO_SECONDS, time_scale=TIME_SCALE)
            feeder = threading.Thread(
                target=generator.produce_clicks,
                args=(bootstrap, "clicks", clicks),
                kwargs={"rate": RATE},
                daemon=True,
            )
            feeder.start()
            print(f"generator: {RATE:.0f} clicks/s, event time x{TIME_SCALE:.0f}; starting Spark ...")
            spark = job.spark_session("strom-demo")
            query = job.start_job(
                spark,
                bootstrap,
                "clicks",
                "page-stats",
                str(base / "page-stats-parquet"),
                str(base / "checkpoint"),
                on_batch=job.print_batch,
            )
            query.awaitTermination(DEMO_SECONDS)
            query.stop()
            show_outputs(spark, bootstrap, base / "page-stats-parquet")
            spark.stop()
        finally:
            stop_broker(broker)
    print("demo finished")


if __name__ == "__main__":
    main()
