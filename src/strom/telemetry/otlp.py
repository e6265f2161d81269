"""The metrics a client pushes (KIP-714): an OpenTelemetry ``MetricsData`` protobuf message, possibly
compressed, folded into the client instance's latest values.

Decoded with the ``opentelemetry-proto`` package (the only importer). Each data point of a gauge, a
sum or a histogram becomes values keyed by (metric name, the point's attributes): a gauge's value; a
sum's, added up when the client pushes deltas (``DeltaTemporality``, which the broker asks for, so
the running total is what /metrics shows) or taken as is when cumulative; a histogram's count and sum
(``<name>.count``, ``<name>.sum``, added up the same way). Only metrics the instance's subscription
asked for are kept (its prefixes, or all for ``*``). A payload that does not decompress or parse is
ValueError (INVALID_RECORD for the client, as Kafka answers); one larger than ``telemetry.max.bytes``
once decompressed is `TelemetryTooLarge`. Pure.
"""

from __future__ import annotations

from collections.abc import Iterable

from google.protobuf.message import DecodeError
from opentelemetry.proto.common.v1.common_pb2 import KeyValue
from opentelemetry.proto.metrics.v1.metrics_pb2 import AggregationTemporality, MetricsData, NumberDataPoint

from strom.protocol.records.compression import CompressionError, decompress
from strom.telemetry.subscriptions import ALL_METRICS, ClientInstance, MetricKey

__all__ = ["TelemetryTooLarge", "fold_push"]

_DELTA = AggregationTemporality.AGGREGATION_TEMPORALITY_DELTA


class TelemetryTooLarge(ValueError):
    """The pushed metrics are larger than ``telemetry.max.bytes`` once decompressed."""


def _text(kv: KeyValue) -> str:
    value = kv.value
    kind = value.WhichOneof("value")
    if kind is None:
        return ""
    return str(getattr(value, kind))


def _key(name: str, attributes: Iterable[KeyValue]) -> MetricKey:
    return name, tuple(sorted((kv.key, _text(kv)) for kv in attributes))


def _wanted(name: str, prefixes: tuple[str, ...]) -> bool:
    return ALL_METRICS in prefixes or any(name.startswith(prefix) for prefix in prefixes)


def fold_push(instance: ClientInstance, compression: int, payload: bytes, max_bytes: int) -> int:
    """Decode a push into the instance's values; how many data points it held (ValueError if bad)."""
    if compression:
        try:
            payload = decompress(compression, payload, max_size=max_bytes)
        except CompressionError as exc:
            if "exceeds" in str(exc) or "too large" in str(exc).lower():
                raise TelemetryTooLarge(str(exc)) from None
            raise ValueError(f"cannot decompress the pushed metrics: {exc}") from None
    if len(payload) > max_bytes:
        raise TelemetryTooLarge(f"{len(payload)} bytes of metrics, more than {max_bytes}")
    data = MetricsData()
    try:
        data.ParseFromString(payload)
    except DecodeError as exc:
        raise ValueError(f"the pushed metrics are not an OpenTelemetry MetricsData: {exc}") from None
    values, points = instance.values, 0
    for resource in data.resource_metrics:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                if not _wanted(metric.name, instance.metrics):
                    continue
                kind = metric.WhichOneof("data")
                if kind == "gauge":
                    for point in metric.gauge.data_points:
                        values[_key(metric.name, point.attributes)] = _number(point)
                        points += 1
                elif kind == "sum":
                    delta = metric.sum.aggregation_temporality == _DELTA
                    for point in metric.sum.data_points:
                        key = _key(metric.name, point.attributes)
                        values[key] = (values.get(key, 0.0) if delta else 0.0) + _number(point)
                        points += 1
                elif kind == "histogram":
                    delta = metric.histogram.aggregation_temporality == _DELTA
                    for hpoint in metric.histogram.data_points:
                        for suffix, value in ((".count", float(hpoint.count)), (".sum", hpoint.sum)):
                            key = _key(metric.name + suffix, hpoint.attributes)
                            values[key] = (values.get(key, 0.0) if delta else 0.0) + value
                        points += 1
    return points


def _number(point: NumberDataPoint) -> float:
    kind = point.WhichOneof("value")
    return float(getattr(point, kind)) if kind else 0.0
