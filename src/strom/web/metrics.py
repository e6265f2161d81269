"""``GET /metrics``: the broker's Prometheus metrics in the text exposition format, on the HTTP listener.

Each broker has its own `CollectorRegistry` (not prometheus_client's global one), so several brokers in
one process (tests) keep separate series. It holds the broker's collector
(`strom.web.metrics_collector`) and prometheus_client's process collector (CPU, memory, open files of
this process, ``process_*``).

A scrape has two halves. Collection reads the broker's in-memory state on the event loop (no disk
reads, no awaits: a consistent snapshot, a few milliseconds for a thousand partitions) into metric
families; rendering them as text (prometheus_client's ``generate_latest``, the costlier half at
about ten microseconds a series) runs in a worker thread on that snapshot, so the Kafka listener keeps
being served meanwhile (the thread yields the interpreter every switch interval).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, ProcessCollector, generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from strom.broker.broker import Broker
from strom.broker.coordinators.leader_watermarks import LeaderWatermarks
from strom.metrics.counters import BrokerCounters
from strom.web.metrics_collector import BrokerCollector


class MetricsApi:
    def __init__(self, broker: Broker, counters: BrokerCounters, connections: Callable[[], int]) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self._watermarks = LeaderWatermarks(
            broker.metadata, f"lag-{broker.node_id}", broker.inter_broker_security, broker.clock
        )
        self._collectors: list[Collector] = [
            BrokerCollector(broker, counters, connections, self._watermarks),
            ProcessCollector(registry=None),
        ]
        for collector in self._collectors:
            self.registry.register(collector)

    async def close(self) -> None:
        """Stops the background refresh of consumer lag's remote high watermarks."""
        await self._watermarks.close()

    def routes(self) -> list[web.RouteDef]:
        return [web.get("/metrics", self.scrape)]

    async def scrape(self, request: web.Request) -> web.Response:
        snapshot = _Snapshot([m for collector in self._collectors for m in collector.collect()])
        body = await asyncio.get_running_loop().run_in_executor(None, generate_latest, snapshot)
        content_type, _, charset = CONTENT_TYPE_LATEST.partition("; charset=")
        return web.Response(body=body, content_type=content_type, charset=charset or "utf-8")


class _Snapshot(Collector):
    """Families already collected, for rendering off the event loop."""

    def __init__(self, families: list[Metric]) -> None:
        self._families = families

    def collect(self) -> list[Metric]:
        return self._families
