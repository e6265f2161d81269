"""The clickstream example pipeline end to end: its aggregates equal a plain-Python computation."""

from __future__ import annotations

import importlib
import json
import math
import sys
import time
from collections import defaultdict
from datetime import UTC
from pathlib import Path
from typing import Any

import pytest

from tests.spark.kafka_helpers import consume_all, new_topic, recent_base_ms

pytestmark = pytest.mark.spark

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def load(name: str) -> Any:
    if str(EXAMPLES) not in sys.path:
        sys.path.insert(0, str(EXAMPLES))
    return importlib.import_module(name)


def expected_stats(clicks: list[Any]) -> dict[tuple[int, str], tuple[int, int, int]]:
    """(window start ms, page) -> (views, exact unique users, p95 latency by nearest rank)."""
    groups: dict[tuple[int, str], list[Any]] = defaultdict(list)
    for c in clicks:
        groups[(c.ts - c.ts % 60_000, c.page)].append(c)
    result = {}
    for key, group in groups.items():
        latencies = sorted(c.latency_ms for c in group)
        p95 = latencies[math.ceil(0.95 * len(latencies)) - 1]
        result[key] = (len(group), len({c.user for c in group}), p95)
    return result


def check_stats(spark: Any, parquet: Path, clicks: list[Any]) -> list[Any]:
    """The pipeline's Parquet table equals the plain-Python computation; its rows."""
    rows = spark.read.parquet(str(parquet)).collect()
    got = {
        (int(r.window_start.replace(tzinfo=UTC).timestamp() * 1000), r.page): (
            r.views,
            r.unique_users,
            r.p95_latency_ms,
        )
        for r in rows
    }
    expected = expected_stats(clicks)
    assert set(got) == set(expected)
    for key, (views, users, p95) in expected.items():
        got_views, got_users, got_p95 = got[key]
        assert got_views == views, key
        assert got_p95 == p95, key
        assert abs(got_users - users) <= max(1, round(0.05 * users)), key  # HyperLogLog++, rsd 5%
    return rows


def recent_minute_ms() -> int:
    """A minute boundary an hour ago. Not a fixed date: the session broker's 7-day time retention runs
    every 5 minutes and would delete records stamped years ago mid-test (the source then rightly fails
    with a data-loss error for offset 0)."""
    base = recent_base_ms()
    return base - base % 60_000


def test_pipeline_aggregates_match_plain_python(spark: Any, strom_broker: str, tmp_path: Path) -> None:
    generator, job = load("clickstream_generator"), load("clickstream_job")
    start_ms = recent_minute_ms()
    clicks = list(generator.generate_events(1500, start_ms=start_ms, step_ms=200.0, users=40, seed=5))
    # One late-in-time event pushes the watermark past every window above, so all of them close.
    flush = generator.Click("user-flush", "/", 1, start_ms + 20 * 60_000)
    in_topic, out_topic = new_topic(strom_broker, 3, "clicks"), new_topic(strom_broker, 1, "stats")
    generator.produce_clicks(strom_broker, in_topic, iter([*clicks, flush]))

    query = job.start_job(
        spark,
        strom_broker,
        in_topic,
        out_topic,
        str(tmp_path / "pq"),
        str(tmp_path / "ck"),
        available_now=True,
    )
    assert query.awaitTermination(180)
    assert query.exception() is None

    rows = check_stats(spark, tmp_path / "pq", clicks)
    published = consume_all(strom_broker, out_topic, 1)
    assert len(published) == len(rows)
    first = published[0]
    page, window = first["key"].decode().split("|")
    value = json.loads(first["value"])
    assert value["page"] == page
    assert window.endswith("Z")
    assert value["window_start"].startswith(window[:-1])


def test_avro_pipeline_keeps_running_across_a_schema_change(
    spark: Any, strom_broker_process: Any, tmp_path: Path
) -> None:
    """`make demo`'s pipeline: Avro clicks through the registry, v2 (a field with a default) mid-stream."""
    generator, job = load("clickstream_generator"), load("clickstream_job")
    bootstrap, registry = strom_broker_process.bootstrap, strom_broker_process.http_url
    start_ms = recent_minute_ms()
    clicks = list(generator.generate_events(1200, start_ms=start_ms, step_ms=200.0, users=40, seed=7))
    flush = generator.Click("user-flush", "/", 1, start_ms + 20 * 60_000)
    in_topic, out_topic = new_topic(bootstrap, 3, "clicks"), new_topic(bootstrap, 1, "stats")
    generator.produce_avro_clicks(bootstrap, in_topic, iter(clicks[:600]), registry)  # registers v1

    query = job.start_job(
        spark,
        bootstrap,
        in_topic,
        out_topic,
        str(tmp_path / "pq"),
        str(tmp_path / "ck"),
        trigger_interval="1 second",
        registry_url=registry,
    )
    try:
        deadline = time.monotonic() + 120
        while not any(p["numInputRows"] for p in query.recentProgress) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert query.exception() is None
        # v2 is registered while the query runs; it keeps going with its v1 reader schema.
        generator.produce_avro_clicks(bootstrap, in_topic, iter([*clicks[600:], flush]), registry, v2_after=0)
        while time.monotonic() < deadline:
            done = sum(p["numInputRows"] for p in query.recentProgress)
            if done >= len(clicks) + 1 or query.exception() is not None:
                break
            time.sleep(0.5)
        query.processAllAvailable()
        # The windows close in the no-data batch that follows the watermark's move.
        windows = len(expected_stats(clicks))
        while time.monotonic() < deadline and query.exception() is None:
            if list((tmp_path / "pq").glob("batch_id=*/*.parquet")) and (
                spark.read.parquet(str(tmp_path / "pq")).count() >= windows
            ):
                break
            time.sleep(1)
        assert query.exception() is None
    finally:
        query.stop()
    assert [v.version for v in _versions(registry, f"{in_topic}-value")] == [1, 2]
    check_stats(spark, tmp_path / "pq", clicks)


def _versions(url: str, subject: str) -> list[Any]:
    from confluent_kafka.schema_registry import SchemaRegistryClient

    client = SchemaRegistryClient({"url": url})
    return [client.get_version(subject, v) for v in client.get_versions(subject)]
