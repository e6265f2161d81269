"""Which charts each console page draws, from the metric history (`strom.web.console.sampler` names the
series). Pure: the history and the time in, chart markup out."""

from __future__ import annotations

from strom.metrics.history import MetricHistory
from strom.web.console.charts import Line, line_chart
from strom.web.console.sampler import LABEL_SEP

_MAX_LINES = 8  # a chart with more lines is unreadable: the largest series are drawn


def _line(history: MetricHistory, now_ms: int, metric: str, label: str, shown: str) -> Line:
    return Line(shown, history.points((metric, label), now_ms))


def _window(history: MetricHistory) -> str:
    minutes = history.bucket_ms * history.buckets / 60_000
    seconds = history.bucket_ms / 1000
    return f"last {minutes:g} min, {seconds:g} s buckets"


def cluster_charts(history: MetricHistory, now_ms: int, broker_id: int) -> str:
    def line(metric: str, label: str, shown: str) -> Line:
        return _line(history, now_ms, metric, label, shown)

    return (
        f"<p class='muted'>Throughput and request times of broker {broker_id} (this broker: what it leads "
        f"and serves); partition health is the cluster's ({_window(history)}).</p><div class='charts'>"
        + line_chart(
            "chart-throughput",
            "Produce and fetch bytes/s",
            [line("bytes_in", "", "produce"), line("bytes_out", "", "fetch")],
            "B/s",
        )
        + line_chart("chart-records", "Records produced/s", [line("records_in", "", "records in")], "/s")
        + line_chart(
            "chart-latency",
            "Mean request time (ms)",
            [
                line("latency_ms", "Produce", "Produce"),
                line("latency_ms", "Fetch", "Fetch"),
                line("latency_ms", "", "all"),
            ],
            "ms",
        )
        + line_chart(
            "chart-health",
            "Under-replicated and offline partitions",
            [line("urp", "", "under-replicated"), line("offline", "", "offline")],
        )
        + line_chart(
            "chart-isr",
            "ISR changes per bucket (led here)",
            [line("isr_shrinks", "", "shrinks"), line("isr_expands", "", "expands")],
        )
        + "</div>"
    )


def topic_charts(history: MetricHistory, now_ms: int, topic: str) -> str:
    def line(metric: str, shown: str) -> Line:
        return _line(history, now_ms, metric, topic, shown)

    return (
        f"<p class='muted'>Led and served by this broker ({_window(history)}).</p><div class='charts'>"
        + line_chart(
            "chart-topic-bytes", "Bytes/s", [line("bytes_in", "produce"), line("bytes_out", "fetch")], "B/s"
        )
        + line_chart(
            "chart-topic-records",
            "Records produced/s, partitions fetched/s",
            [line("records_in", "records in"), line("fetches", "fetches")],
            "/s",
        )
        + "</div>"
    )


def group_charts(history: MetricHistory, now_ms: int, group_id: str) -> str:
    prefix = group_id + LABEL_SEP
    topics = [label for label in history.keys("topic_lag") if label.startswith(prefix)]
    lines = [_line(history, now_ms, "lag", group_id, "total")]
    per_topic = sorted(topics, key=lambda label: -(history.latest(("topic_lag", label)) or 0))
    lines += [_line(history, now_ms, "topic_lag", label, label[len(prefix) :]) for label in per_topic]
    return f"<p class='muted'>Recorded by the group's coordinator ({_window(history)}).</p>" + line_chart(
        "chart-lag", "Lag (records)", lines[:_MAX_LINES]
    )
