"""``GET /metrics``: the broker's Prometheus metrics in the text exposition format, on the HTTP listener.

Each broker has its own `CollectorRegistry` (not prometheus_client's global one), so several brokers in
one process (tests) keep separate series. It holds the broker's collector
(`strom.broker.metrics_collector`) and prometheus_client's process collector (CPU, memory, open files of
this process, ``process_*``). A scrape runs on the broker's event loop; it reads in-memory state only
(no disk reads, no awaits), so its cost is proportional to the partitions hosted and it never waits on
the Kafka listener.
"""

from __future__ import annotations

from collections.abc import Callable

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, ProcessCollector, generate_latest

from strom.broker.broker import Broker
from strom.broker.metrics_collector import BrokerCollector
from strom.metrics.counters import BrokerCounters


class MetricsApi:
    def __init__(self, broker: Broker, counters: BrokerCounters, connections: Callable[[], int]) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(BrokerCollector(broker, counters, connections))
        ProcessCollector(registry=self.registry)

    def routes(self) -> list[web.RouteDef]:
        return [web.get("/metrics", self.scrape)]

    async def scrape(self, request: web.Request) -> web.Response:
        body = generate_latest(self.registry)
        content_type, _, charset = CONTENT_TYPE_LATEST.partition("; charset=")
        return web.Response(body=body, content_type=content_type, charset=charset or "utf-8")
