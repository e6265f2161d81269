"""The broker's Prometheus collector: counters kept on the hot path plus state read at scrape time.

`BrokerCollector.collect` runs when ``/metrics`` is scraped (on the broker's event loop, between other
work): it turns the integer counters of `strom.metrics.counters` into counter families, estimates the
request-time quantiles, and reads gauges straight from the broker's structures (hosted partitions, the
metadata cache, the purgatory, the group coordinator). Names follow the Prometheus JMX exporter's
Kafka rules (`strom.metrics.families`); consumer lag follows kafka_exporter (``kafka_consumergroup_lag``).

Consumer lag is exported by the broker that coordinates the group, for every partition the group has
committed offsets on: lag = high watermark - committed offset. For a partition it hosts a replica of,
the high watermark is that replica's (the leader's is what `strom groups describe` shows as the log
end offset; a follower's trails it by at most one fetch); for any other, the leader's as last learned
in the background (`strom.broker.coordinators.leader_watermarks`; a partition appears once its leader
answered).

Share groups' backlog (KIP-932) is exported by each partition's leader, which keeps the share-partition
state: ``kafka_sharegroup_start_offset`` and ``kafka_sharegroup_backlog`` (records from the start
offset to the high watermark not yet acknowledged or archived).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator

from prometheus_client.core import Metric
from prometheus_client.registry import Collector

from strom.broker.broker import Broker
from strom.broker.coordinators.leader_watermarks import LeaderWatermarks
from strom.coordinator import GroupState
from strom.coordinator.consumer.model import ConsumerGroupState
from strom.metrics.counters import BrokerCounters, TopicCounters
from strom.metrics.families import counter, gauge, jmx_name, summary
from strom.metrics.histogram import LatencyHistogram
from strom.protocol.api import ApiKey
from strom.quota.entity import (
    CONSUMER_BYTE_RATE,
    CONTROLLER_MUTATION_RATE,
    PRODUCER_BYTE_RATE,
    REQUEST_PERCENTAGE,
)
from strom.web.lake_metrics import iceberg_families
from strom.web.telemetry_metrics import client_telemetry_families
from strom.web.tiered_metrics import remote_storage_families

_TOPIC_METERS: tuple[tuple[str, str, str], ...] = (
    ("MessagesInPerSec", "messages_in", "Records appended as leader (client produce)."),
    ("BytesInPerSec", "bytes_in", "Bytes of record batches appended as leader (client produce)."),
    ("BytesOutPerSec", "bytes_out", "Bytes of record batches sent to consumers."),
    ("FailedProduceRequestsPerSec", "failed_produce", "Produce partitions answered with an error."),
    ("FailedFetchRequestsPerSec", "failed_fetch", "Fetch partitions answered with an error."),
    ("TotalProduceRequestsPerSec", "produce_requests", "Produce partitions requested."),
    ("TotalFetchRequestsPerSec", "fetch_requests", "Fetch partitions requested."),
    ("ReplicationBytesOutPerSec", "replication_bytes_out", "Bytes of record batches sent to followers."),
)
_TIMERS = (
    ("TotalTimeMs", "total", "Frame complete to response encoded, ms."),
    ("RequestQueueTimeMs", "queue", "Frame complete to handler start (behind earlier requests), ms."),
    ("LocalTimeMs", "local", "Handler time outside the purgatory, ms."),
    ("RemoteTimeMs", "remote", "Time parked in the purgatory (long-poll, acks=all), ms."),
)


# Kafka's attribute names as the JMX exporter spells them (untyped samples: no _total added).
_AUTH_COUNTS = (
    ("successful_authentication_total", "successful_authentication", "Completed SASL logins."),
    ("failed_authentication_total", "failed_authentication", "Refused SASL logins."),
    ("successful_reauthentication_total", "successful_reauthentication", "Completed re-authentications."),
    ("failed_reauthentication_total", "failed_reauthentication", "Refused re-authentications (KIP-368)."),
    (
        "expired_connections_killed_count",
        "expired_connections_killed",
        "Connections closed for a request after their SASL session ended (KIP-368).",
    ),
)


# Client quota sensors as Kafka's MBeans name them: kafka.server:type=<T>,user=U,client-id=C, attributes
# throttle-time and the rate (the JMX exporter lower-cases and joins them: kafka_server_produce_byte_rate).
_QUOTA_MBEANS = {
    PRODUCER_BYTE_RATE: ("Produce", "byte_rate", "Bytes produced per second"),
    CONSUMER_BYTE_RATE: ("Fetch", "byte_rate", "Bytes fetched per second"),
    REQUEST_PERCENTAGE: ("Request", "request_time", "Handler time as a percentage of one thread"),
    CONTROLLER_MUTATION_RATE: ("ControllerMutation", "mutation_rate", "Partition mutations per second"),
}


def request_name(api_key: int) -> str:
    """Kafka's request name for an API key (``LIST_OFFSETS`` → ``ListOffsets``)."""
    try:
        return "".join(part.capitalize() for part in ApiKey(api_key).name.split("_"))
    except ValueError:
        return str(api_key)


class BrokerCollector(Collector):
    def __init__(
        self,
        broker: Broker,
        counters: BrokerCounters,
        connections: Callable[[], int],
        remote: LeaderWatermarks,
    ) -> None:
        self._broker = broker
        self._counters = counters
        self._connections = connections
        self._remote = remote  # high watermarks of partitions without a replica here

    def collect(self) -> Iterator[Metric]:
        yield from self._topic_meters()
        yield from self._requests()
        yield from self._replica_manager()
        yield from self._controller()
        yield from self._logs()
        yield from self._misc()
        yield from self._consumer_lag()
        yield from self._share_backlog()
        yield from self._group_counts()
        yield from self._client_quotas()
        if (rlm := self._broker.remote_log_manager) is not None:
            yield from remote_storage_families(rlm, list(self._broker.replica_manager.partitions.values()))
        yield from client_telemetry_families(self._broker.client_telemetry)
        if (translator := self._broker.lake.translator) is not None:
            yield from iceberg_families(translator, self._broker.clock.time_ms())

    def _client_quotas(self) -> Iterator[Metric]:
        """Per quota sensor (quota type, user, client id): its rate and its average throttle time."""
        now_ms = self._broker.clock.monotonic_ms()
        rows: dict[str, tuple[list[tuple[list[str], float]], list[tuple[list[str], float]]]] = {
            key: ([], []) for key in _QUOTA_MBEANS
        }
        for key, user, client_id, sensor in self._broker.quotas.sensors():
            rates, throttles = rows[key]
            rates.append(([user, client_id], sensor.rate.rate(now_ms)))
            throttles.append(([user, client_id], sensor.throttle_time_avg(now_ms)))
        for key, (mbean, rate_name, doc) in _QUOTA_MBEANS.items():
            rates, throttles = rows[key]
            prefix = jmx_name("kafka.server", mbean, "")
            labels = ["user", "client_id"]
            yield gauge(f"{prefix}{rate_name}", f"{doc}, per quota user and client id.", labels, rates)
            yield gauge(
                f"{prefix}throttle_time",
                "Average client-quota throttle time (ms) of the window.",
                labels,
                throttles,
            )

    def _topic_meters(self) -> Iterator[Metric]:
        # Counters of topics that no longer exist (deleted, or named by a refused request) are dropped,
        # which bounds the label set by the topics of the cluster.
        known = self._broker.metadata.topics
        for name in [t for t in self._counters.topics if t not in known]:
            self._counters.forget_topic(name)
        topics = sorted(self._counters.topics.items())
        for mbean, attr, doc in _TOPIC_METERS:
            name = jmx_name("kafka.server", "BrokerTopicMetrics", mbean)
            # Kafka has one meter per topic plus the broker-wide one without the topic key.
            rows: list[tuple[list[str], float]] = [([t], getattr(c, attr)) for t, c in topics]
            family = counter(name, doc, ["topic"], rows)
            family.add_sample(f"{name}_total", {}, float(_sum(topics, attr)))
            yield family

    def _requests(self) -> Iterator[Metric]:
        stats = sorted(self._counters.requests.items())
        yield counter(
            jmx_name("kafka.network", "RequestMetrics", "RequestsPerSec"),
            "Requests handled, per request type and version.",
            ["request", "version"],
            [([request_name(k), str(v)], n) for k, s in stats for v, n in enumerate(s.versions) if n],
        )
        for mbean, attr, doc in _TIMERS:
            rows = []
            for key, s in stats:
                hist: LatencyHistogram = getattr(s, attr)
                hist.rotate_if_due()
                rows.append(([request_name(key)], hist.quantiles(), hist.count, hist.sum_ms))
            yield summary(jmx_name("kafka.network", "RequestMetrics", mbean), doc, ["request"], rows)

    def _replica_manager(self) -> Iterator[Metric]:
        rm = self._broker.replica_manager
        node = rm.node_id
        led = [p for p in rm.partitions.values() if p.leader_id == node]
        under = sum(1 for p in led if len(p.isr) < len(p.replicas))
        under_min = sum(1 for p in led if len(p.isr) < p.min_isr())
        at_min = sum(1 for p in led if len(p.isr) == p.min_isr())
        for mbean, value, doc in (
            ("UnderReplicatedPartitions", under, "Led partitions whose ISR is smaller than the replicas."),
            (
                "UnderMinIsrPartitionCount",
                under_min,
                "Led partitions whose ISR is below min.insync.replicas.",
            ),
            ("AtMinIsrPartitionCount", at_min, "Led partitions whose ISR is at min.insync.replicas."),
            ("PartitionCount", len(rm.partitions), "Partitions with a replica on this broker."),
            ("LeaderCount", len(led), "Partitions this broker leads."),
        ):
            yield gauge(jmx_name("kafka.server", "ReplicaManager", mbean), doc, [], [([], value)])
        for mbean, value, doc in (
            ("IsrShrinksPerSec", rm.isr_shrinks, "ISR shrinks of led partitions."),
            ("IsrExpandsPerSec", rm.isr_expands, "ISR expansions of led partitions."),
        ):
            yield counter(jmx_name("kafka.server", "ReplicaManager", mbean), doc, [], [([], value)])

    def _controller(self) -> Iterator[Metric]:
        active = self._broker.control.controller_active
        offline = 0
        if active:  # as Kafka: only the active controller reports offline partitions
            offline = sum(1 for p in self._broker.metadata.partitions.values() if p.leader < 0)
        for mbean, value, doc in (
            ("ActiveControllerCount", int(active), "1 on the active controller, else 0."),
            ("OfflinePartitionsCount", offline, "Partitions without a live leader (active controller)."),
        ):
            yield gauge(jmx_name("kafka.controller", "KafkaController", mbean), doc, [], [([], value)])

    def _logs(self) -> Iterator[Metric]:
        parts = sorted(self._broker.replica_manager.partitions.items())
        labels = ["topic", "partition"]
        getters: tuple[tuple[str, str, Callable[..., int]], ...] = (
            ("Size", "Bytes of the partition's segments.", lambda log: log.size_bytes),
            ("NumLogSegments", "Segments of the partition.", lambda log: len(log.segments)),
            ("LogEndOffset", "The partition's log end offset.", lambda log: log.log_end_offset),
            ("LogStartOffset", "The partition's log start offset.", lambda log: log.log_start_offset),
        )
        for mbean, doc, get in getters:
            rows = [([t, str(i)], float(get(p.log))) for (t, i), p in parts]
            yield gauge(jmx_name("kafka.log", "Log", mbean), doc, labels, rows)

    def _misc(self) -> Iterator[Metric]:
        purgatory = jmx_name("kafka.server", "DelayedOperationPurgatory", "PurgatorySize")
        yield gauge(
            purgatory,
            "Requests parked in the purgatory.",
            ["delayedoperation"],
            [
                (["Produce"], self._broker.replica_manager.delayed_produces.watched_count()),
                (["Fetch"], self._broker.purgatory.watched_count()),
            ],
        )
        yield gauge(
            "kafka_server_socket_server_metrics_connection_count",
            "Open client and broker connections on the Kafka listener.",
            ["listener", "networkprocessor"],
            [(["PLAINTEXT", "0"], self._connections())],
        )
        yield from self._authentication()

    def _authentication(self) -> Iterator[Metric]:
        """SASL logins per listener, as Kafka's socket-server-metrics name them (KIP-368 included)."""
        auth = sorted(self._counters.auth.items())
        for name, attribute, doc in _AUTH_COUNTS:
            rows = [([listener, "0"], float(getattr(c, attribute))) for listener, c in auth]
            yield gauge(
                f"kafka_server_socket_server_metrics_{name}", doc, ["listener", "networkprocessor"], rows
            )

    def _consumer_lag(self) -> Iterator[Metric]:
        hosted = self._broker.replica_manager.partitions
        groups = sorted(self._broker.groups.coordinator.groups.items())
        remote = self._remote.known(tp for _, g in groups for tp in g.offsets if tp not in hosted)
        offsets: list[tuple[list[str], float]] = []
        lags: list[tuple[list[str], float]] = []
        for group_id, group in groups:
            for tp, committed in sorted(group.offsets.items()):
                part = hosted.get(tp)
                high_watermark = part.log.high_watermark if part is not None else remote.get(tp)
                if high_watermark is None:
                    continue
                labels = [group_id, tp[0], str(tp[1])]
                offsets.append((labels, committed.offset))
                lags.append((labels, max(high_watermark - committed.offset, 0)))
        names = ["consumergroup", "topic", "partition"]
        yield gauge("kafka_consumergroup_current_offset", "Committed offset of the group.", names, offsets)
        yield gauge("kafka_consumergroup_lag", "High watermark minus the committed offset.", names, lags)

    def _share_backlog(self) -> Iterator[Metric]:
        """Share groups (KIP-932), exported by the partitions' leaders, where their state lives: the
        start offset and the backlog (records from it to the high watermark not yet done)."""
        shares = self._broker.shares
        starts: list[tuple[list[str], float]] = []
        backlog: list[tuple[list[str], float]] = []
        for (group_id, topic, index), share in sorted(shares.all_partitions().items()):
            labels = [group_id, topic, str(index)]
            starts.append((labels, share.start_offset))
            backlog.append((labels, shares.backlog(group_id, topic, index)))
        names = ["sharegroup", "topic", "partition"]
        yield gauge(
            "kafka_sharegroup_start_offset", "Share-partition start offset of the group.", names, starts
        )
        yield gauge(
            "kafka_sharegroup_backlog",
            "Records of the partition the share group has not finished.",
            names,
            backlog,
        )

    def _group_counts(self) -> Iterator[Metric]:
        """Groups this broker coordinates, by protocol and by state, as Kafka 4's group coordinator
        metrics count them (``kafka.server:type=group-coordinator-metrics``)."""
        service = self._broker.groups
        consumer = service.consumer_groups()
        consumer_ids = {g.group_id for g in consumer}
        # A consumer group's committed offsets live in a classic entry of the same id: not a group.
        classic = [g for gid, g in service.coordinator.groups.items() if gid not in consumer_ids]
        prefix = "kafka_server_group_coordinator_metrics"
        yield gauge(
            f"{prefix}_group_count",
            "Groups this broker coordinates, per protocol.",
            ["protocol"],
            [(["classic"], len(classic)), (["consumer"], len(consumer))],
        )
        classic_states = Counter(g.state.kafka_name.lower() for g in classic)
        yield gauge(
            f"{prefix}_classic_group_count",
            "Classic groups this broker coordinates, per state.",
            ["state"],
            [([s.kafka_name.lower()], classic_states[s.kafka_name.lower()]) for s in GroupState],
        )
        consumer_states = Counter(g.state.value.lower() for g in consumer)
        yield gauge(
            f"{prefix}_consumer_group_count",
            "Consumer groups (KIP-848) this broker coordinates, per state.",
            ["state"],
            [([s.value.lower()], consumer_states[s.value.lower()]) for s in ConsumerGroupState],
        )


def _sum(topics: list[tuple[str, TopicCounters]], attr: str) -> int:
    return sum(getattr(c, attr) for _, c in topics)
