"""Request latency as fixed-bucket histograms, cheap to update, summarised into quantiles at scrape time.

Kafka reports request times (``kafka.network:type=RequestMetrics``) as percentiles over recent requests,
which the Prometheus JMX exporter turns into a summary: ``<name>{quantile="0.99"}`` plus ``<name>_count``.
Strom exports the same shape. A request's update is one ``int.bit_length`` (the bucket: powers of two
of nanoseconds) and three integer additions; the quantiles are estimated when ``/metrics`` is scraped,
by linear interpolation inside the bucket that holds the wanted rank.

Recency: the buckets of the current window and of the one before it are kept; a window lasts
``WINDOW_S`` and is rotated lazily (at the first scrape after it ended), so quantiles describe
the last one to two windows, as Kafka's decaying reservoir describes recent requests, while ``_count``
and ``_sum`` are cumulative since the broker started (Prometheus counters).
"""

from __future__ import annotations

import time

# Bucket b counts the durations whose nanosecond count has bit length b, i.e. in [2^(b-1), 2^b) ns: its
# upper bound is 2^b ns. Finding a bucket is one int.bit_length() (no search), and 64 buckets cover every
# int64 duration; the resolution is a factor of two, which the interpolation in estimate_quantile refines.
BUCKETS_NS: tuple[int, ...] = tuple(2**b for b in range(64))
BUCKETS_MS: tuple[float, ...] = tuple(n / 1e6 for n in BUCKETS_NS)
QUANTILES: tuple[float, ...] = (0.5, 0.75, 0.95, 0.98, 0.99, 0.999)
WINDOW_S = 60.0


class LatencyHistogram:
    __slots__ = ("_previous", "_window_end", "count", "current", "sum_ns")

    def __init__(self) -> None:
        self.count = 0
        self.sum_ns = 0
        self.current = [0] * len(BUCKETS_NS)
        self._previous = [0] * len(BUCKETS_NS)
        self._window_end = time.monotonic() + WINDOW_S

    @property
    def sum_ms(self) -> float:
        return self.sum_ns / 1e6

    def observe(self, ms: float) -> None:
        self.observe_ns(int(ms * 1e6))

    def observe_ns(self, ns: int) -> None:
        self.count += 1
        self.sum_ns += ns
        self.current[ns.bit_length()] += 1

    def rotate_if_due(self, now: float | None = None) -> None:
        """Start a new window once the current one has ended (called at scrape time)."""
        now = time.monotonic() if now is None else now
        if now < self._window_end:
            return
        # Two windows or more without a scrape: nothing recent is left in either.
        stale = now >= self._window_end + WINDOW_S
        self._previous = [0] * len(self.current) if stale else self.current
        self.current = [0] * len(self._previous)
        self._window_end = now + WINDOW_S

    def recent_buckets(self) -> list[int]:
        return [a + b for a, b in zip(self.current, self._previous, strict=True)]

    def quantiles(self, qs: tuple[float, ...] = QUANTILES) -> list[tuple[float, float]]:
        recent = self.recent_buckets()
        return [(q, estimate_quantile(recent, q)) for q in qs]


def estimate_quantile(buckets: list[int], q: float) -> float:
    """The q-quantile (0..1) of the observations counted in ``buckets`` (bounds ``BUCKETS_MS``), in ms.

    0.0 when nothing was observed; within a bucket, observations are taken as spread evenly.
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
