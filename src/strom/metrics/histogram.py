"""Request latency as fixed-bucket histograms, cheap to update, summarised into quantiles at scrape time.

Kafka reports request times (``kafka.network:type=RequestMetrics``) as percentiles over recent requests,
which the Prometheus JMX exporter turns into a summary: ``<name>{quantile="0.99"}`` plus ``<name>_count``.
Strom exports the same shape. A request's update is one ``bisect`` into ``BUCKETS_MS`` and two integer
additions; the quantiles are estimated when ``/metrics`` is scraped, by linear interpolation inside the
bucket that holds the wanted rank.

Recency: the buckets of the current window and of the one before it are kept; a window lasts
``WINDOW_S`` and is rotated lazily (on the next update or scrape after it ended), so quantiles describe
the last one to two windows, as Kafka's decaying reservoir describes recent requests, while ``_count``
and ``_sum`` are cumulative since the broker started (Prometheus counters).
"""

from __future__ import annotations

import time
from bisect import bisect_left

# Upper bounds in milliseconds; the last bucket (beyond 60 s) is open-ended.
BUCKETS_MS: tuple[float, ...] = (
    0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 25.0, 50.0, 100.0, 250.0, 500.0,
    1000.0, 2500.0, 5000.0, 10000.0, 30000.0, 60000.0,
)  # fmt: skip
# The same bounds in nanoseconds: requests are timed with perf_counter_ns, and an integer bisect
# spares a float division per observation.
BUCKETS_NS: tuple[int, ...] = tuple(int(b * 1_000_000) for b in BUCKETS_MS)
QUANTILES: tuple[float, ...] = (0.5, 0.75, 0.95, 0.98, 0.99, 0.999)
WINDOW_S = 60.0


class LatencyHistogram:
    __slots__ = ("_current", "_previous", "_window_end", "count", "sum_ns")

    def __init__(self) -> None:
        self.count = 0
        self.sum_ns = 0
        self._current = [0] * (len(BUCKETS_MS) + 1)
        self._previous = [0] * (len(BUCKETS_MS) + 1)
        self._window_end = time.monotonic() + WINDOW_S

    @property
    def sum_ms(self) -> float:
        return self.sum_ns / 1e6

    def observe(self, ms: float) -> None:
        self.observe_ns(int(ms * 1e6))

    def observe_ns(self, ns: int) -> None:
        self.count += 1
        self.sum_ns += ns
        self._current[bisect_left(BUCKETS_NS, ns)] += 1

    def rotate_if_due(self, now: float | None = None) -> None:
        """Start a new window once the current one has ended (called at scrape time)."""
        now = time.monotonic() if now is None else now
        if now < self._window_end:
            return
        # Two windows or more without a scrape: nothing recent is left in either.
        stale = now >= self._window_end + WINDOW_S
        self._previous = [0] * len(self._current) if stale else self._current
        self._current = [0] * len(self._previous)
        self._window_end = now + WINDOW_S

    def recent_buckets(self) -> list[int]:
        return [a + b for a, b in zip(self._current, self._previous, strict=True)]

    def quantiles(self, qs: tuple[float, ...] = QUANTILES) -> list[tuple[float, float]]:
        return [(q, estimate_quantile(self.recent_buckets(), q)) for q in qs]


def estimate_quantile(buckets: list[int], q: float) -> float:
    """The q-quantile (0..1) of the observations counted in ``buckets`` (bounds ``BUCKETS_MS``), in ms.

    0.0 when nothing was observed; within a bucket, observations are taken as spread evenly; the open
    last bucket reports its lower bound.
    """
    total = sum(buckets)
    if total == 0:
        return 0.0
    rank = q * total
    seen = 0
    for i, n in enumerate(buckets):
        if n and seen + n >= rank:
            lower = BUCKETS_MS[i - 1] if i > 0 else 0.0
            if i >= len(BUCKETS_MS):
                return lower
            upper = BUCKETS_MS[i]
            return lower + (upper - lower) * max(rank - seen, 0.0) / n
        seen += n
    return BUCKETS_MS[-1]
