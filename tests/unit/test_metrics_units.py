"""Pure parts of strom.metrics: quantile estimation, window rotation, JMX-exporter names, families."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.registry import Collector

from strom.metrics.counters import BrokerCounters
from strom.metrics.families import counter, jmx_name, summary
from strom.metrics.histogram import BUCKETS_MS, WINDOW_S, LatencyHistogram, estimate_quantile
from strom.testing.metrics import parse, value


def test_jmx_names_follow_the_exporter_rules() -> None:
    assert jmx_name("kafka.server", "BrokerTopicMetrics", "MessagesInPerSec") == (
        "kafka_server_brokertopicmetrics_messagesin"
    )
    assert jmx_name("kafka.server", "ReplicaManager", "UnderReplicatedPartitions") == (
        "kafka_server_replicamanager_underreplicatedpartitions"
    )
    assert (
        jmx_name("kafka.network", "RequestMetrics", "TotalTimeMs")
        == "kafka_network_requestmetrics_totaltimems"
    )


def test_quantiles_interpolate_inside_buckets() -> None:
    hist = LatencyHistogram()
    for _ in range(100):
        hist.observe(3.0)  # all in the (2.5, 5] bucket
    assert hist.count == 100 and hist.sum_ms == 300.0
    median = dict(hist.quantiles())[0.5]
    assert 2.5 < median <= 5.0
    assert estimate_quantile([0] * len(BUCKETS_MS), 0.99) == 0.0


@given(st.lists(st.floats(min_value=0.0, max_value=50_000.0), min_size=1, max_size=200))
def test_quantiles_are_ordered_and_bounded(observations: list[float]) -> None:
    hist = LatencyHistogram()
    for ms in observations:
        hist.observe(ms)
    values = [v for _, v in hist.quantiles()]
    assert values == sorted(values)
    # Never above the bucket bound of the largest observation.
    assert values[-1] <= min((b for b in BUCKETS_MS if b > max(observations)), default=BUCKETS_MS[-1])


def test_windows_rotate_and_forget_old_requests() -> None:
    hist = LatencyHistogram()
    hist.observe(1000.0)
    start = hist._window_end - WINDOW_S
    hist.rotate_if_due(start + WINDOW_S + 1)  # one window later: still recent
    assert dict(hist.quantiles())[0.5] > 500
    hist.rotate_if_due(start + 4 * WINDOW_S)  # long without requests: nothing recent
    assert dict(hist.quantiles())[0.5] == 0.0
    assert hist.count == 1  # the count is cumulative


class _Fixed(Collector):
    def __init__(self, counters: BrokerCounters) -> None:
        self.counters = counters

    def collect(self):  # type: ignore[no-untyped-def]
        stats = self.counters.request(0)
        yield counter("kafka_x_messagesin", "doc", ["topic"], [(["t"], 5)])
        yield summary(
            "kafka_x_totaltimems",
            "doc",
            ["request"],
            [(["Produce"], stats.total.quantiles(), stats.total.count, stats.total.sum_ms)],
        )


def test_families_parse_back_as_the_exporter_shapes() -> None:
    counters = BrokerCounters()
    counters.request(0).observe(9, 0, 1_000_000, 3_000_000, 0)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Fixed(counters))
    samples = parse(generate_latest(registry).decode())
    assert value(samples, "kafka_x_messagesin_total", topic="t") == 5
    assert value(samples, "kafka_x_totaltimems_count", request="Produce") == 1
    assert value(samples, "kafka_x_totaltimems_sum", request="Produce") == 3.0
    assert {dict(k)["quantile"] for k in samples["kafka_x_totaltimems"]} == {
        "0.50", "0.75", "0.95", "0.98", "0.99", "0.999"
    }  # fmt: skip


def test_fetch_counting_splits_consumers_and_followers() -> None:
    counters = BrokerCounters()
    responses = [
        {
            "topic": "t",
            "partitions": [{"error_code": 0, "records": b"x" * 10}, {"error_code": 6, "records": b""}],
        }
    ]
    counters.fetched(responses, follower=False)
    counters.fetched(responses, follower=True)
    t = counters.topics["t"]
    assert (t.bytes_out, t.replication_bytes_out, t.failed_fetch, t.fetch_requests) == (10, 10, 2, 4)
    counters.appended("t", 3, 100)
    counters.produce_failed("t")
    assert (t.messages_in, t.bytes_in, t.failed_produce, t.produce_requests) == (3, 100, 1, 2)
