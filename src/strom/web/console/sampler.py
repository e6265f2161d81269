"""Feeds the console's metric history (`strom.metrics.history`) from this broker, once per bucket.

Theory of operation. One task on the broker's event loop wakes at the end of each bucket (the broker's
clock, ``http.console.history.interval.ms``) and reads, without awaiting anything, what the broker
already keeps: the hot-path counters of `strom.metrics.counters` (turned into rates: the delta since the
previous sample over the time between them), the request timers (mean time of the requests of the bucket),
the metadata cache (under-replicated and offline partitions, cluster-wide), the ISR change counters of
the partitions this broker leads, and the committed offsets of the groups it coordinates (lag against the
high watermark of the local replica or, for a partition without one here, the leader's as learned in the
background by `LeaderWatermarks`). A sample of 1,000 topics and 100 groups takes a few milliseconds.

Series (metric, label):

* ``bytes_in``, ``records_in`` (produce, appended as leader here), ``bytes_out`` (fetch, sent to
  consumers), ``fetches`` (partitions fetched): per topic, and the broker's total under label ``""``.
  Fetched *records* are not counted: a fetch sends stored batches as file regions without decoding them.
* ``latency_ms``: mean time of the requests that ended in the bucket, per API (``Produce``, ``Fetch``,
  label ``""`` for all APIs).
* ``urp``, ``offline``: partitions of the cluster (metadata cache); ``isr_shrinks``, ``isr_expands``:
  changes of the ISRs led here in the bucket.
* ``lag``: per group coordinated here, the sum over its partitions; ``topic_lag``: per group and topic,
  labelled ``group`` + ``LABEL_SEP`` + ``topic``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Container

from strom._util.clock import sleep_ms
from strom._util.tasks import cancel_and_wait
from strom.broker.broker import Broker
from strom.broker.coordinators.leader_watermarks import LeaderWatermarks
from strom.metrics.counters import RequestStats
from strom.metrics.history import MetricHistory, SeriesKey
from strom.protocol.api import ApiKey

log = logging.getLogger(__name__)

LABEL_SEP = "\x1f"  # ASCII unit separator: in no topic name (Kafka's legal characters) and no sane group id
TOPIC_RATES = (("bytes_in", "bytes_in"), ("records_in", "messages_in"), ("bytes_out", "bytes_out"),
               ("fetches", "fetch_requests"))  # fmt: skip
_TOPIC_METRICS = frozenset(m for m, _ in TOPIC_RATES)
_TIMED_APIS: tuple[tuple[int, str], ...] = ((ApiKey.PRODUCE, "Produce"), (ApiKey.FETCH, "Fetch"))


class HistorySampler:
    def __init__(self, broker: Broker, history: MetricHistory) -> None:
        self.broker = broker
        self.history = history
        self._clock = broker.clock
        self._previous: dict[SeriesKey, float] = {}  # cumulative counts at the previous sample
        self._timers: dict[str, tuple[int, int]] = {}  # API label -> (requests, total ns) at it
        self._previous_ms: int | None = None
        self._watermarks = LeaderWatermarks(
            broker.metadata, f"console-{broker.node_id}", broker.inter_broker_security, broker.clock
        )
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        # The counters started at zero with the broker, just before its HTTP side: the first bucket's
        # rates count everything since then (a client's first records, before the first sample, too).
        self._previous_ms = self._clock.time_ms()
        self._task = asyncio.get_running_loop().create_task(self._run(), name="console-history")

    async def stop(self) -> None:
        task, self._task = self._task, None
        await cancel_and_wait([task] if task is not None else [])
        await self._watermarks.close()

    async def _run(self) -> None:
        bucket = self.history.bucket_ms
        while True:
            now = self._clock.time_ms()
            await sleep_ms(self._clock, bucket - now % bucket + 1)
            try:
                self.sample(self._clock.time_ms())
            except Exception:  # a sample must never end the history
                log.exception("console history sample failed")

    def remote_watermarks(self, wanted: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
        """High watermarks of partitions without a replica here, as last learned from their leaders."""
        return self._watermarks.known(wanted) if wanted else {}

    def sample(self, now_ms: int) -> None:
        """Record one bucket's values (the bucket holding ``now_ms - 1``: the one that just ended)."""
        at = now_ms - 1
        elapsed_s = (now_ms - self._previous_ms) / 1000 if self._previous_ms is not None else None
        self._previous_ms = now_ms
        counts: dict[SeriesKey, float] = {}
        counters = self.broker.metrics
        if counters is not None:
            for metric, attr in TOPIC_RATES:
                total = 0
                for topic, c in counters.topics.items():
                    value = getattr(c, attr)
                    counts[(metric, topic)] = value
                    total += value
                counts[(metric, "")] = total
            self._latency(at, counters.requests)
        # A counter that appeared since the previous sample started from zero (a topic's first produce).
        for key, value in counts.items():
            if elapsed_s:
                self.history.record(at, key, max(value - self._previous.get(key, 0), 0) / elapsed_s)
        rm = self.broker.replica_manager
        for key, value in ((("isr_shrinks", ""), rm.isr_shrinks), (("isr_expands", ""), rm.isr_expands)):
            before = self._previous.get(key)
            counts[key] = value
            if before is not None:
                self.history.record(at, key, max(value - before, 0), gauge=True)
        self._previous = counts
        parts = self.broker.metadata.partitions.values()
        urp = sum(1 for p in parts if p.leader >= 0 and len(p.isr) < len(p.replicas))
        self.history.record(at, ("urp", ""), urp, gauge=True)
        self.history.record(at, ("offline", ""), sum(1 for p in parts if p.leader < 0), gauge=True)
        self._lags(at)
        topics = self.broker.metadata.topics
        groups = self.broker.groups.coordinator.groups
        self.history.prune(now_ms, lambda key: _still_there(key, topics, groups))

    def _latency(self, at: int, requests: dict[int, RequestStats]) -> None:
        timed = dict(_TIMED_APIS)
        all_count = all_ns = 0
        for api_key, stats in requests.items():
            count, total_ns = stats.total.count, stats.total.sum_ns
            all_count += count
            all_ns += total_ns
            if api_key in timed:
                self._mean(at, timed[api_key], count, total_ns)
        self._mean(at, "", all_count, all_ns)

    def _mean(self, at: int, label: str, count: int, total_ns: int) -> None:
        before = self._timers.get(label)
        self._timers[label] = (count, total_ns)
        if before is not None and count > before[0]:
            self.history.record(at, ("latency_ms", label), (total_ns - before[1]) / (count - before[0]) / 1e6)

    def _lags(self, at: int) -> None:
        hosted = self.broker.replica_manager.partitions
        groups = self.broker.groups.coordinator.groups
        remote = self.remote_watermarks([tp for g in groups.values() for tp in g.offsets if tp not in hosted])
        for group_id, group in groups.items():
            total = 0
            by_topic: dict[str, int] = {}
            for tp, committed in group.offsets.items():
                part = hosted.get(tp)
                end = part.log.high_watermark if part is not None else remote.get(tp)
                if end is None:
                    continue
                lag = max(end - committed.offset, 0)
                total += lag
                by_topic[tp[0]] = by_topic.get(tp[0], 0) + lag
            if by_topic:
                self.history.record(at, ("lag", group_id), total, gauge=True)
            for topic, lag in by_topic.items():
                self.history.record(at, ("topic_lag", group_id + LABEL_SEP + topic), lag, gauge=True)


def _still_there(key: SeriesKey, topics: Container[str], groups: Container[str]) -> bool:
    """Series of deleted topics and of groups no longer coordinated here are dropped."""
    metric, label = key
    if metric in ("lag", "topic_lag"):
        return label.split(LABEL_SEP, 1)[0] in groups
    if metric in _TOPIC_METRICS and label:
        return label in topics
    return True
