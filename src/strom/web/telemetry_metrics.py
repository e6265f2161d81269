"""The metrics clients push (KIP-714) on ``/metrics``: one gauge family per pushed metric name, one
series per client instance and data point.

A name is the client's OpenTelemetry metric name with every character Prometheus does not allow made
``_`` (``org.apache.kafka.producer.node.request.latency.avg`` is
``org_apache_kafka_producer_node_request_latency_avg``); the labels are ``client_instance_id``,
``client_id`` and the data point's attributes (``node_id``, ``topic``, ...; one a series lacks is
empty). Sums are running totals (the broker asks clients for deltas and adds them up), histograms
their ``.count`` and ``.sum``. Kafka hands these to a reporter plugin; Strom shows them itself. Plus
``strom_client_telemetry_instances`` (client instances known) and ``strom_client_telemetry_pushes``
(pushes accepted with metrics).
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterator

from prometheus_client.core import Metric

from strom.broker.client_telemetry import ClientTelemetry
from strom.metrics.families import counter, gauge

__all__ = ["client_telemetry_families"]

_NOT_ALLOWED = re.compile(r"[^a-zA-Z0-9_]")


def _prometheus_name(name: str) -> str:
    cleaned = _NOT_ALLOWED.sub("_", name)
    return cleaned if not cleaned[:1].isdigit() else f"_{cleaned}"


def client_telemetry_families(telemetry: ClientTelemetry) -> Iterator[Metric]:
    instances = list(telemetry.subscriptions.instances.values())
    yield gauge("strom_client_telemetry_instances", "Client instances known.", [], [([], len(instances))])
    yield counter("strom_client_telemetry_pushes", "Metric pushes accepted.", [], [([], telemetry.pushes)])
    by_name: dict[str, list[tuple[dict[str, str], float]]] = defaultdict(list)
    for instance in instances:
        base = {
            "client_instance_id": instance.attributes["client_instance_id"],
            "client_id": instance.attributes.get("client_id", ""),
        }
        for (name, attributes), value in instance.values.items():
            labels = {**{_prometheus_name(k): v for k, v in attributes}, **base}
            by_name[_prometheus_name(name)].append((labels, value))
    for name, series in sorted(by_name.items()):
        keys = sorted({k for labels, _ in series for k in labels})
        rows = [([labels.get(k, "") for k in keys], value) for labels, value in series]
        yield gauge(name, "Pushed by clients (KIP-714).", keys, rows)
