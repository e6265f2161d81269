"""A streaming query's progress committed to a consumer group, as lag tools see it: `strom groups describe`
and `/metrics` (`kafka_consumergroup_lag`); Spark's rate-limit rule (every partition with a backlog gets
a record) and Trigger.AvailableNow reading what was there at the start in several micro-batches; the
query's progress (name, ids, batch, rates) in the commits' metadata, drawn by the console's group page
in headless Chromium beside its lag."""

from __future__ import annotations

import time
import urllib.request
import uuid
from typing import Any

import pytest

from strom.testing.broker_process import BrokerProcess
from tests.browser import chromium, screenshot
from tests.integration.strom_cli import describe_group
from tests.spark.kafka_helpers import new_topic, produce

pytestmark = pytest.mark.spark


def describe(bootstrap: str, group: str) -> dict[int, tuple[int, int, int]]:
    """partition -> (CURRENT-OFFSET, LOG-END-OFFSET, LAG) from `strom groups describe`."""
    lines = describe_group(bootstrap, group)
    assert lines[1].split()[:5] == ["TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG"]
    return {int(c[1]): (int(c[2]), int(c[3]), int(c[4])) for c in (line.split() for line in lines[2:])}


def metric_lag(http_url: str, group: str) -> dict[int, float]:
    with urllib.request.urlopen(f"{http_url}/metrics", timeout=30) as response:
        text = response.read().decode()
    lags = {}
    for line in text.splitlines():
        if line.startswith("kafka_consumergroup_lag{") and f'consumergroup="{group}"' in line:
            partition = int(line.split('partition="')[1].split('"')[0])
            lags[partition] = float(line.rsplit(" ", 1)[1])
    return lags


def test_progress_is_a_groups_committed_offsets_and_lag_shows(
    spark: Any, strom_broker_process: BrokerProcess, tmp_path: Any
) -> None:
    bootstrap = strom_broker_process.bootstrap
    topic = new_topic(bootstrap, partitions=3)
    # A skewed backlog: 30, 1 and 0 records.
    produce(bootstrap, topic, [(None, f"a{i}".encode()) for i in range(30)], partition=0)
    produce(bootstrap, topic, [(None, b"b0")], partition=1)
    name = f"progress_{uuid.uuid4().hex[:8]}"
    query = (
        spark.readStream.format("strom")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", "4")
        .load()
        .selectExpr("partition", "offset")
        .writeStream.format("memory")
        .queryName(name)
        .option("checkpointLocation", str(tmp_path / "ck"))
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(180)
    assert query.exception() is None
    batches = [p for p in query.recentProgress if p.numInputRows]
    # 31 records at most 4 a batch, and partition 1's single record in the first batch (Spark's rule: every
    # partition with a backlog reads at least one record), not after partition 0's backlog.
    assert [p.numInputRows for p in batches] == [4, 4, 4, 4, 4, 4, 4, 3]
    first = spark.sql(f"SELECT partition FROM {name} WHERE offset = 0 AND partition = 1").count()
    assert first == 1
    group = f"strom-spark-{query.id}"
    assert describe(bootstrap, group) == {0: (30, 30, 0), 1: (1, 1, 0)}
    # Records arriving while the query is stopped are its lag.
    produce(bootstrap, topic, [(None, b"late")] * 5, partition=0)
    assert describe(bootstrap, group)[0] == (30, 35, 5)
    assert strom_broker_process.http_url is not None
    assert metric_lag(strom_broker_process.http_url, group) == {0: 5.0, 1: 0.0}


def test_first_trigger_runs_at_once_under_min_offsets(spark: Any, strom_broker: str, tmp_path: Any) -> None:
    """maxTriggerDelay's timer starts at the first trigger, which runs at once (as Spark's): a restarted
    query with a small backlog does not wait 10 minutes for minOffsetsPerTrigger."""
    topic = new_topic(strom_broker, partitions=1)
    produce(strom_broker, topic, [(None, b"x")] * 5)
    sizes: list[int] = []
    query = (
        spark.readStream.format("strom")
        .option("kafka.bootstrap.servers", strom_broker)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("minOffsetsPerTrigger", "100")
        .option("maxTriggerDelay", "10m")
        .load()
        .writeStream.foreachBatch(lambda df, _id: sizes.append(df.count()))
        .option("checkpointLocation", str(tmp_path / "ck"))
        .trigger(processingTime="300 milliseconds")
        .start()
    )
    try:
        deadline = time.monotonic() + 90
        while sum(sizes) < 5 and time.monotonic() < deadline:
            time.sleep(0.2)
        # Later records wait for minOffsetsPerTrigger again.
        produce(strom_broker, topic, [(None, b"y")] * 5)
        time.sleep(3)
        assert query.exception() is None
    finally:
        query.stop()
    assert [s for s in sizes if s] == [5]


def test_trigger_once_reads_everything_in_one_batch(spark: Any, strom_broker: str, tmp_path: Any) -> None:
    topic = new_topic(strom_broker, partitions=2)
    produce(strom_broker, topic, [(f"k{i}".encode(), f"v{i}".encode()) for i in range(50)])

    def run() -> list[int]:
        sizes: list[int] = []
        query = (
            spark.readStream.format("strom")
            .option("kafka.bootstrap.servers", strom_broker)
            .option("subscribe", topic)
            .option("startingOffsets", "earliest")
            .option("maxOffsetsPerTrigger", "10")
            .load()
            .writeStream.foreachBatch(lambda df, _id: sizes.append(df.count()))
            .option("checkpointLocation", str(tmp_path / "ck"))
            .trigger(once=True)
            .start()
        )
        assert query.awaitTermination(120)
        assert query.exception() is None
        return [s for s in sizes if s]

    # One batch: Trigger.Once reads everything available, ignoring read limits (as Spark's source).
    assert run() == [50]
    # A second run from the checkpoint reads only what arrived since.
    produce(strom_broker, topic, [(None, b"late")] * 3)
    assert run() == [3]


def test_the_console_shows_a_querys_progress_and_lag(
    spark: Any, strom_broker_process: BrokerProcess, tmp_path: Any
) -> None:
    from selenium.webdriver.common.by import By

    bootstrap = strom_broker_process.bootstrap
    topic = new_topic(bootstrap, partitions=2)
    produce(bootstrap, topic, [(None, f"a{i}".encode()) for i in range(20)], partition=0)
    produce(bootstrap, topic, [(None, f"b{i}".encode()) for i in range(6)], partition=1)
    name = f"console_{uuid.uuid4().hex[:8]}"
    query = (
        spark.readStream.format("strom")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", "8")
        .load()
        .writeStream.format("memory")
        .queryName(name)
        .option("checkpointLocation", str(tmp_path / "ck"))
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(180)
    assert query.exception() is None
    last = [p for p in query.recentProgress if p.numInputRows][-1]
    assert last.batchId >= 1  # several micro-batches: the last one has an input rate
    produce(bootstrap, topic, [(None, b"late")] * 3, partition=0)  # the query's lag

    assert strom_broker_process.http_url is not None
    with chromium() as driver:
        d: Any = driver
        d.get(f"{strom_broker_process.http_url}/ui/groups/strom-spark-{query.id}")
        cells = [c.text for c in d.find_elements(By.CSS_SELECTOR, "#spark-query tbody td")]
        assert cells[:5] == [name, str(query.id), str(query.runId), str(last.batchId), str(last.numInputRows)]
        input_rate, processed_rate = (float(c.replace(",", "")) for c in cells[5:7])
        assert input_rate > 0 and processed_rate > 0, cells
        assert cells[7] == "3"
        rows = [
            [c.text for c in r.find_elements(By.TAG_NAME, "td")]
            for r in d.find_elements(By.CSS_SELECTOR, "#spark-offsets tbody tr")
        ]
        assert rows == [[topic, "0", "20", "23", "3"], [topic, "1", "6", "6", "0"]]
        screenshot(d, "group-spark-query")
