"""The connector as a new user runs it: `python job.py`, no PYSPARK_PYTHON, locally and on a real cluster.

The cluster is a Spark standalone master and worker started from pyspark's `bin/spark-class` (one per
module); executors run in their own JVMs with their own Python workers. Jobs run as subprocesses of this
interpreter with `PYSPARK_PYTHON` removed from the environment, from a directory outside the repository,
using the snippets of README.md and docs/spark.md as written (addresses and topic substituted).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.spark.kafka_helpers import consume_all, new_topic, produce
from tests.spark.standalone import StandaloneCluster, start_cluster

pytestmark = pytest.mark.spark

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneCluster]:
    started = start_cluster(tmp_path_factory.mktemp("standalone"))
    yield started
    started.stop()


def python_snippet(doc: Path, after: str) -> str:
    """The first ```python block following the line `after` in a Markdown file."""
    text = doc.read_text()
    found = re.search(r"```python\n(.*?)```", text[text.index(after) :], re.S)
    assert found, f"no python snippet after {after!r} in {doc}"
    return found.group(1)


def run_job(script: str, workdir: Path, timeout_s: float = 480) -> str:
    """Run `script` as job.py in `workdir` with a new user's environment; its stdout."""
    env = {k: v for k, v in os.environ.items() if k != "PYSPARK_PYTHON"}
    env["SPARK_LOCAL_IP"] = "127.0.0.1"
    (workdir / "job.py").write_text(script)
    done = subprocess.run(
        [sys.executable, "job.py"],
        cwd=workdir,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    return done.stdout


def result_of(stdout: str) -> dict[str, object]:
    lines = [line for line in stdout.splitlines() if line.startswith("RESULT ")]
    assert len(lines) == 1, stdout[-3000:]
    parsed: dict[str, object] = json.loads(lines[0].removeprefix("RESULT "))
    return parsed


def test_readme_snippet_runs_as_python_job_py(strom_broker: str, tmp_path: Path) -> None:
    topic = new_topic(strom_broker, partitions=2)
    produce(strom_broker, topic, [(None, f"e{i}".encode()) for i in range(40)])
    snippet = python_snippet(ROOT / "README.md", "## Pipelines on Spark")
    snippet = snippet.replace("localhost:9092", strom_broker).replace('"clicks"', f'"{topic}"')
    script = snippet + textwrap.dedent(
        """
        query = events.writeStream.format("memory").queryName("events").trigger(availableNow=True).start()
        query.awaitTermination()
        import json
        print("RESULT " + json.dumps({"count": spark.sql("SELECT count(*) FROM events").first()[0]}))
        """
    )
    assert result_of(run_job(script, tmp_path)) == {"count": 40}


CLUSTER_CHECKS = """
import json
import sys
import time

from confluent_kafka import Producer

BOOTSTRAP, TOPIC, OUT_TOPIC, BASE, N = {bootstrap!r}, {topic!r}, {out_topic!r}, {base!r}, {n}


def stream_once():
    query = (spark.readStream.format("strom").option("kafka.bootstrap.servers", BOOTSTRAP)
             .option("subscribe", TOPIC).option("startingOffsets", "earliest").load()
             .selectExpr("CAST(value AS STRING) AS v")
             .writeStream.format("parquet").option("path", BASE + "/out")
             .option("checkpointLocation", BASE + "/checkpoint").trigger(availableNow=True).start())
    query.awaitTermination()


stream_once()
producer = Producer({{"bootstrap.servers": BOOTSTRAP}})
for i in range(N, 2 * N):
    producer.produce(TOPIC, f"v{{i}}".encode())
assert producer.flush(30) == 0
stream_once()  # resumes from the checkpoint: only the new records
streamed = sorted(r.v for r in spark.read.parquet(BASE + "/out").collect())

(spark.createDataFrame([(f"k{{i}}", f"w{{i}}") for i in range(N)], "key string, value string")
 .write.format("strom").option("kafka.bootstrap.servers", BOOTSTRAP).option("topic", OUT_TOPIC)
 .mode("append").save())

executor_python = spark.sparkContext.parallelize([0], 1).map(lambda _: sys.executable).collect()
# A new DataFrame: a batch read resolves its offsets when the DataFrame is created.
fresh = (spark.read.format("strom").option("kafka.bootstrap.servers", BOOTSTRAP)
         .option("subscribe", TOPIC).load())
result = {{"count": fresh.count(), "first_count": clicks.count(), "streamed": streamed,
          "executor_python": executor_python, "refused": refused, "refused_s": refused_s}}
print("RESULT " + json.dumps(result))
"""

REFUSAL = """
import time

from pyspark.sql import SparkSession

import strom.spark
from strom.spark.deploy import PythonWorkerError

plain = SparkSession.builder.master({master!r}).getOrCreate()
began = time.monotonic()
try:
    strom.spark.register(plain)
    refused = None
except PythonWorkerError as e:
    refused = str(e)
refused_s = time.monotonic() - began
plain.stop()
"""


def test_standalone_cluster_batch_stream_write(
    cluster: StandaloneCluster, strom_broker: str, tmp_path: Path
) -> None:
    n = 60
    topic = new_topic(strom_broker, partitions=3)
    out_topic = new_topic(strom_broker, partitions=2)
    produce(strom_broker, topic, [(None, f"v{i}".encode()) for i in range(n)])
    snippet = python_snippet(ROOT / "docs" / "spark.md", "## Deploying")
    snippet = (
        snippet.replace("spark://127.0.0.1:7077", cluster.master_url)
        .replace("127.0.0.1:9092", strom_broker)
        .replace('"clicks"', f'"{topic}"')
    )
    script = (
        REFUSAL.format(master=cluster.master_url)
        + snippet
        + CLUSTER_CHECKS.format(
            bootstrap=strom_broker, topic=topic, out_topic=out_topic, base=str(tmp_path), n=n
        )
    )
    result = result_of(run_job(script, tmp_path))

    # A cluster master with no Python setting: refused at once, naming the fixes.
    refused = str(result["refused"])
    assert "spark.pyspark.python" in refused and "PYSPARK_PYTHON" in refused and "spark.archives" in refused
    assert float(str(result["refused_s"])) < 5
    # With spark.pyspark.python: batch read, streaming read resumed from its checkpoint, write.
    assert result["first_count"] == n
    assert result["count"] == 2 * n
    assert result["streamed"] == sorted(f"v{i}" for i in range(2 * n))
    assert result["executor_python"] == [sys.executable]
    written = consume_all(strom_broker, out_topic, 2)
    assert sorted((r["key"], r["value"]) for r in written) == sorted(
        (f"k{i}".encode(), f"w{i}".encode()) for i in range(n)
    )
    # Executors ran in their own JVMs under the worker (one per application).
    assert [p for p in cluster.executor_dirs() if (p / "stderr").exists()]
