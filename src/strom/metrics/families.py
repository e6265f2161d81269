"""Prometheus metric families named as the Prometheus JMX exporter's usual Kafka rules name the MBeans.

The rules (``lowercaseOutputName: true``, ``lowercaseOutputLabelNames: true``) map
``kafka.<domain><type=T, name=N, k=v><>Value`` to the gauge ``kafka_<domain>_<t>_<n>{k="v"}``, a
``...PerSec`` meter's ``Count`` to the counter ``kafka_<domain>_<t>_<n without PerSec>_total``, and a
histogram's percentiles to ``kafka_<domain>_<t>_<n>{quantile="0.99"}`` with ``_count``. So Kafka's
``kafka.server:type=BrokerTopicMetrics,name=MessagesInPerSec,topic=T`` is
``kafka_server_brokertopicmetrics_messagesin_total{topic="T"}`` here, and dashboards built on the JMX
exporter find the same series. `jmx_name` builds those names; the helpers build families of each kind.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.samples import Sample

Rows = Iterable[tuple[Sequence[str], float]]


def jmx_name(domain: str, mbean_type: str, name: str) -> str:
    """``kafka.server``, ``ReplicaManager``, ``IsrShrinksPerSec``
    → ``kafka_server_replicamanager_isrshrinks``.

    ``PerSec`` is dropped from meter names (the counter family adds ``_total``).
    """
    if name.endswith("PerSec"):
        name = name[: -len("PerSec")]
    raw = f"{domain}_{mbean_type}_{name}".lower()
    return "".join(c if c.isalnum() else "_" for c in raw)


def counter(
    name: str, doc: str, labels: Sequence[str], rows: Iterable[tuple[Sequence[str], float]]
) -> Metric:
    """A counter family; ``name`` without ``_total`` (the exposition adds it)."""
    family = CounterMetricFamily(name, doc, labels=list(labels))
    for values, value in rows:
        family.add_metric(list(values), value)
    return family


def gauge(name: str, doc: str, labels: Sequence[str], rows: Rows) -> Metric:
    family = GaugeMetricFamily(name, doc, labels=list(labels))
    # Samples built directly: add_metric re-validates every row, which dominates a scrape of
    # thousands of per-partition series (names and label names are fixed here).
    family.samples = [Sample(name, dict(zip(labels, values, strict=True)), float(v)) for values, v in rows]
    return family


def summary(
    name: str,
    doc: str,
    labels: Sequence[str],
    rows: Iterable[tuple[Sequence[str], Sequence[tuple[float, float]], int, float]],
) -> Metric:
    """A summary family: per label set (quantile, value) pairs, the count and the sum."""
    family = Metric(name, doc, "summary")
    for values, quantiles, count, total in rows:
        base = dict(zip(labels, values, strict=True))
        for q, v in quantiles:
            family.add_sample(name, {**base, "quantile": _quantile_label(q)}, v)
        family.add_sample(f"{name}_count", base, count)
        family.add_sample(f"{name}_sum", base, total)
    return family


def _quantile_label(q: float) -> str:
    """0.5 → "0.50", 0.999 → "0.999", as the JMX exporter labels Kafka's 50thPercentile, 999thPercentile."""
    text = f"{q:.3f}".rstrip("0")
    return text + "0" if len(text) < 4 else text
