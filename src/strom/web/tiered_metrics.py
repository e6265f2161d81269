"""Tiered storage's metrics for ``/metrics`` (a broker with ``remote.log.storage.system.enable`` only),
named as Kafka's (KIP-405, KIP-963) through the JMX exporter's rules (`strom.metrics.families`):

* meters of ``kafka.server:type=BrokerTopicMetrics`` per topic and broker-wide: ``RemoteCopyBytesPerSec``,
  ``RemoteCopyRequestsPerSec``, ``RemoteCopyErrorsPerSec``, ``RemoteFetchBytesPerSec``,
  ``RemoteFetchRequestsPerSec``, ``RemoteFetchErrorsPerSec``, ``RemoteDeleteRequestsPerSec``,
  ``RemoteDeleteErrorsPerSec`` (counters ``kafka_server_brokertopicmetrics_remotecopybytes_total``, ...);
* gauges per topic over the partitions this broker leads: ``RemoteCopyLagBytes`` and
  ``RemoteCopyLagSegments`` (rolled segments below the last stable offset not yet remote) and
  ``RemoteLogSizeBytes`` (the remote log's size).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator

from prometheus_client.core import Metric

from strom.broker.replication.partition import Partition
from strom.broker.tiered.remote_log_manager import RemoteLogManager
from strom.metrics.families import counter, gauge, jmx_name

_METERS: tuple[tuple[str, str, str], ...] = (
    ("RemoteCopyBytesPerSec", "copy_bytes", "Bytes of segments copied to remote storage."),
    ("RemoteCopyRequestsPerSec", "copy_requests", "Segments copied to remote storage."),
    ("RemoteCopyErrorsPerSec", "copy_errors", "Copy rounds stopped by an error (store, metadata)."),
    ("RemoteFetchBytesPerSec", "fetch_bytes", "Bytes read from remote storage for consumers."),
    ("RemoteFetchRequestsPerSec", "fetch_requests", "Partition reads served from remote storage."),
    ("RemoteFetchErrorsPerSec", "fetch_errors", "Remote reads that failed (store errors)."),
    ("RemoteDeleteRequestsPerSec", "delete_requests", "Remote segments deleted."),
    ("RemoteDeleteErrorsPerSec", "delete_errors", "Remote segment deletions that failed."),
)


def remote_storage_families(rlm: RemoteLogManager, partitions: list[Partition]) -> Iterator[Metric]:
    topics = sorted(rlm.stats.items())
    for mbean, attr, doc in _METERS:
        name = jmx_name("kafka.server", "BrokerTopicMetrics", mbean)
        family = counter(name, doc, ["topic"], [([t], getattr(s, attr)) for t, s in topics])
        family.add_sample(f"{name}_total", {}, float(sum(getattr(s, attr) for _, s in topics)))
        yield family
    lag_bytes: dict[str, int] = defaultdict(int)
    lag_segments: dict[str, int] = defaultdict(int)
    size: dict[str, int] = defaultdict(int)
    for part in partitions:
        state = rlm.state_of(part.topic, part.index)
        if state is None or not part.is_leader:
            continue
        segments, nbytes = rlm.copy_lag(part)
        lag_segments[part.topic] += segments
        lag_bytes[part.topic] += nbytes
        size[part.topic] += state.size_bytes
    for mbean, values, doc in (
        ("RemoteCopyLagBytes", lag_bytes, "Bytes of led partitions' segments due for copy, not yet remote."),
        ("RemoteCopyLagSegments", lag_segments, "Led partitions' segments due for copy, not yet remote."),
        ("RemoteLogSizeBytes", size, "Size of the led partitions' remote logs."),
    ):
        rows = [([t], float(v)) for t, v in sorted(values.items())]
        yield gauge(jmx_name("kafka.server", "BrokerTopicMetrics", mbean), doc, ["topic"], rows)
