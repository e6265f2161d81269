"""The broker's hot-path counters: plain integers, read by a collector only when ``/metrics`` is scraped.

Why not prometheus_client's `Counter` on the hot path: its ``inc`` takes a lock and a labelled child is
a dictionary lookup under another; a produce or fetch request here costs tens of microseconds, so the
request path only adds to integer slots of objects it already holds, and the collector
(`strom.web.metrics_collector`) turns them into metric families at scrape time. Everything that is
state rather than a count (partition counts, log sizes, lag) is not counted at all: it is read from the
broker's structures during the scrape.

Per-topic label cardinality is bounded by the topics that exist; per-client labels are not kept.
With ``metrics.enabled=false`` the broker holds no `BrokerCounters` and the hooks are skipped.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from strom.metrics.histogram import LatencyHistogram

_MAX_VERSION = 64  # above every API's highest version


class TopicCounters:
    """``kafka.server:type=BrokerTopicMetrics`` for one topic (Kafka's ``*PerSec`` meters' counts)."""

    __slots__ = (
        "bytes_in",
        "bytes_out",
        "failed_fetch",
        "failed_produce",
        "fetch_requests",
        "messages_in",
        "produce_requests",
        "replication_bytes_out",
    )

    def __init__(self) -> None:
        self.messages_in = 0
        self.bytes_in = 0
        self.bytes_out = 0
        self.failed_produce = 0
        self.failed_fetch = 0
        self.produce_requests = 0
        self.fetch_requests = 0
        self.replication_bytes_out = 0


class RequestStats:
    """``kafka.network:type=RequestMetrics`` for one API: request counts per version and four timers.

    Times (Kafka's definitions, as measured here): queue = the frame was complete → its handler
    started (the connection serves one request at a time, so this is time behind earlier requests);
    remote = time parked in the purgatory (fetch long-poll, acks=all wait for the ISR); local = the
    handler's own time (total - queue - remote, encoding included); total = frame complete → response
    encoded and handed to the connection's writer.
    """

    __slots__ = ("local", "queue", "remote", "total", "versions")

    def __init__(self) -> None:
        self.versions = [0] * _MAX_VERSION  # requests per API version (a list index is the cheapest)
        self.total = LatencyHistogram()
        self.queue = LatencyHistogram()
        self.local = LatencyHistogram()
        self.remote = LatencyHistogram()

    def observe(self, version: int, received_ns: int, started_ns: int, done_ns: int, remote_ns: int) -> None:
        # Inlined LatencyHistogram.observe_ns x 4: this runs once per request.
        self.versions[version] += 1
        ns = done_ns - received_ns
        h = self.total
        h.count += 1
        h.sum_ns += ns
        h.current[ns.bit_length()] += 1
        ns = started_ns - received_ns
        h = self.queue
        h.count += 1
        h.sum_ns += ns
        h.current[ns.bit_length()] += 1
        ns = done_ns - started_ns - remote_ns
        h = self.local
        h.count += 1
        h.sum_ns += ns
        h.current[ns.bit_length()] += 1
        h = self.remote
        h.count += 1
        if remote_ns:
            h.sum_ns += remote_ns
            h.current[remote_ns.bit_length()] += 1
        else:
            h.current[0] += 1


class AuthCounters:
    """One SASL listener's logins (Kafka's socket-server-metrics), counted by its connections."""

    __slots__ = (
        "expired_connections_killed",
        "failed_authentication",
        "failed_reauthentication",
        "successful_authentication",
        "successful_reauthentication",
    )

    def __init__(self) -> None:
        self.successful_authentication = 0
        self.failed_authentication = 0
        self.successful_reauthentication = 0
        self.failed_reauthentication = 0
        self.expired_connections_killed = 0  # KIP-368: a request after the session ended


class BrokerCounters:
    __slots__ = ("auth", "requests", "topics")

    def __init__(self) -> None:
        self.topics: dict[str, TopicCounters] = {}
        self.requests: dict[int, RequestStats] = {}
        self.auth: dict[str, AuthCounters] = {}  # SASL listener name -> its logins

    def topic(self, name: str) -> TopicCounters:
        counters = self.topics.get(name)
        if counters is None:
            counters = self.topics[name] = TopicCounters()
        return counters

    def request(self, api_key: int) -> RequestStats:
        stats = self.requests.get(api_key)
        if stats is None:
            stats = self.requests[api_key] = RequestStats()
        return stats

    def appended(self, topic: str, records: int, nbytes: int, partitions: int = 1) -> None:
        """``partitions`` produce partitions of a topic appended as leader, ``records`` in all (a retried
        duplicate counts none)."""
        c = self.topics.get(topic) or self.topic(topic)
        c.produce_requests += partitions
        c.messages_in += records
        c.bytes_in += nbytes

    def produce_failed(self, topic: str) -> None:
        c = self.topic(topic)
        c.produce_requests += 1
        c.failed_produce += 1

    def fetched(self, responses: Sequence[Mapping[str, Any]], follower: bool) -> None:
        """A Fetch response's topics (``topic``, ``partitions`` with ``error_code`` and ``records``)."""
        topics = self.topics
        for topic in responses:
            name = topic["topic"]
            c = topics.get(name) or self.topic(name)
            parts = topic["partitions"]
            c.fetch_requests += len(parts)
            sent = 0
            for part in parts:
                if part["error_code"]:
                    c.failed_fetch += 1
                else:
                    sent += len(part["records"])
            if follower:
                c.replication_bytes_out += sent
            else:
                c.bytes_out += sent

    def forget_topic(self, name: str) -> None:
        """A deleted topic's series disappear (Kafka removes its meters too)."""
        self.topics.pop(name, None)
