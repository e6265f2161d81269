"""Metric history for the console's charts: the last hour of a few hundred series, in memory, bounded.

Theory of operation. Time is cut into buckets of ``bucket_ms`` (10 s by default); a series keeps one
float per bucket for the last ``buckets`` buckets (360: one hour) in a ring (`array('d')`, 8 bytes a
slot), NaN where nothing was recorded. Recording at bucket ``b`` first blanks the slots of the buckets
skipped since the series' last record, so a reader never sees a value older than the window. The
sampler (`strom.web.console.sampler`) records each series once per bucket: a rate (a counter's delta
over the bucket, per second) or a gauge (the value read at the end of the bucket).

Bounds. A rate's series exists once it has recorded something other than zero (an idle topic costs
nothing) and is dropped after a whole window of zeros or silence (`prune`); a gauge's (``gauge=True``:
partition health, a group's lag) from its first record until a window of silence or until its topic or
group is gone; at most ``max_series`` series exist
(a record for a new series beyond that is refused and counted in `refused`), so 1,000 busy topics with
four series each cost about 12 MB, and the cap holds whatever the cluster does.

Pure: time is passed in (milliseconds), nothing is read from a clock here.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Callable
from dataclasses import dataclass

BUCKET_MS = 10_000
BUCKETS = 360
MAX_SERIES = 8_000

SeriesKey = tuple[str, str]  # (metric, label): ("bytes_in", "orders"), ("urp", "")
_NAN = float("nan")


class _Series:
    __slots__ = ("last", "last_nonzero", "slots")

    def __init__(self, buckets: int) -> None:
        self.slots = array("d", [_NAN]) * buckets
        self.last = -1  # bucket number of the latest record
        self.last_nonzero = -1


@dataclass(frozen=True, slots=True)
class Point:
    time_ms: int  # start of the bucket
    value: float | None  # None: nothing recorded for that bucket


class MetricHistory:
    def __init__(
        self, bucket_ms: int = BUCKET_MS, buckets: int = BUCKETS, max_series: int = MAX_SERIES
    ) -> None:
        if bucket_ms <= 0 or buckets <= 1:
            raise ValueError("a history needs a positive bucket and at least two buckets")
        self.bucket_ms = bucket_ms
        self.buckets = buckets
        self.max_series = max_series
        self.refused = 0
        self._series: dict[SeriesKey, _Series] = {}

    def __len__(self) -> int:
        return len(self._series)

    def bucket_of(self, now_ms: int) -> int:
        return now_ms // self.bucket_ms

    def record(self, now_ms: int, key: SeriesKey, value: float, gauge: bool = False) -> None:
        """The value of ``key`` for the bucket holding ``now_ms`` (a later record in it replaces it).

        ``gauge``: a zero starts the series too (a count of unhealthy partitions that is zero is news;
        an idle topic's zero rate is not)."""
        series = self._series.get(key)
        if series is None:
            if value == 0 and not gauge:
                return
            if len(self._series) >= self.max_series:
                self.refused += 1
                return
            series = self._series[key] = _Series(self.buckets)
        bucket = self.bucket_of(now_ms)
        if bucket < series.last:
            return  # a clock step backwards: keep what is there
        n = self.buckets
        if series.last >= 0:
            for skipped in range(series.last + 1, min(bucket, series.last + n + 1)):
                series.slots[skipped % n] = _NAN
        series.slots[bucket % n] = value
        series.last = bucket
        if value != 0 or gauge:
            series.last_nonzero = bucket

    def prune(self, now_ms: int, keep: Callable[[SeriesKey], bool] = lambda _: True) -> int:
        """Drop the series silent or zero for a whole window, and those ``keep`` refuses (a deleted topic,
        a group gone); returns how many were dropped."""
        horizon = self.bucket_of(now_ms) - self.buckets
        gone = [k for k, s in self._series.items() if s.last_nonzero <= horizon or not keep(k)]
        for key in gone:
            del self._series[key]
        return len(gone)

    def keys(self, metric: str) -> list[str]:
        """The labels that have a series of ``metric``."""
        return sorted(label for m, label in self._series if m == metric)

    def points(self, key: SeriesKey, now_ms: int) -> list[Point]:
        """The window up to ``now_ms``, oldest bucket first (every bucket, None where unrecorded)."""
        end = self.bucket_of(now_ms)
        first = end - self.buckets + 1
        series = self._series.get(key)
        out: list[Point] = []
        for bucket in range(first, end + 1):
            value: float | None = None
            if series is not None and series.last - self.buckets < bucket <= series.last:
                stored = series.slots[bucket % self.buckets]
                value = None if math.isnan(stored) else stored
            out.append(Point(bucket * self.bucket_ms, value))
        return out

    def latest(self, key: SeriesKey) -> float | None:
        series = self._series.get(key)
        if series is None or series.last < 0:
            return None
        stored = series.slots[series.last % self.buckets]
        return None if math.isnan(stored) else stored
