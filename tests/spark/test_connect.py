"""A Spark Connect session (`SparkSession.builder.remote("local[2]")`, a local Connect server) registers
format `strom` with `strom.spark.register` and reads a topic through it. Runs as its own driver process:
a classic SparkContext (the suite's session) and a local Connect server do not share one JVM."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.spark.kafka_helpers import new_topic, produce

pytestmark = pytest.mark.spark

JOB = """
import sys

from pyspark.sql import SparkSession

import strom.spark

bootstrap, topic = sys.argv[1], sys.argv[2]
spark = SparkSession.builder.remote("local[2]").config("spark.ui.enabled", "false").getOrCreate()
strom.spark.register(spark)  # no sparkContext on a Connect session
df = spark.read.format("strom").option("kafka.bootstrap.servers", bootstrap).option("subscribe", topic).load()
print("session", type(spark).__module__)
print("values", sorted(bytes(r.value).decode() for r in df.collect()))
spark.stop()
"""


def test_connect_session_registers_and_reads(strom_broker: str, tmp_path: Path) -> None:
    topic = new_topic(strom_broker, partitions=2)
    produce(strom_broker, topic, [(None, f"v{i}".encode()) for i in range(10)])
    job = tmp_path / "job.py"
    job.write_text(JOB)
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1"}
    process = subprocess.Popen(
        [sys.executable, str(job), strom_broker, topic],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        cwd=tmp_path,
        start_new_session=True,  # the Connect server's JVM is its child: stopped with its group
    )
    try:
        out, err = process.communicate(timeout=300)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    assert process.returncode == 0, err.decode(errors="replace")[-3000:]
    lines = out.decode().splitlines()
    assert "session pyspark.sql.connect.session" in lines
    assert f"values {sorted(f'v{i}' for i in range(10))}" in lines
