"""The clickstream example pipeline end to end: its aggregates equal a plain-Python computation."""

from __future__ import annotations

import importlib
import json
import math
import sys
from collections import defaultdict
from datetime import UTC
from pathlib import Path
from typing import Any

import pytest

from tests.spark.kafka_helpers import consume_all, new_topic

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


def test_pipeline_aggregates_match_plain_python(spark: Any, strom_broker: str, tmp_path: Path) -> None:
    generator, job = load("clickstream_generator"), load("clickstream_job")
    start_ms = 1_700_000_040_000  # a minute boundary
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

    rows = spark.read.parquet(str(tmp_path / "pq")).collect()
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

    published = consume_all(strom_broker, out_topic, 1)
    assert len(published) == len(rows)
    first = published[0]
    page, window = first["key"].decode().split("|")
    value = json.loads(first["value"])
    assert value["page"] == page
    assert window.endswith("Z")
    assert value["window_start"].startswith(window[:-1])
