"""KIP-714's client telemetry APIs, which the installed specs lack, in the JSON spec format of spec.py.

kafka-python's spec folder has neither GetTelemetrySubscriptions (71) nor PushTelemetry (72). These
descriptions follow KIP-714 and Kafka's protocol documentation (the wire layout is a fact of the
protocol; the names are Kafka's, so the generated codec and types read like the rest). Both are v0
only and flexible:

* GetTelemetrySubscriptions: the client names its instance id (all zeros the first time: the broker
  assigns one) and learns its subscription: an id for it, the compression types the broker accepts
  for pushes (preferred first), the push interval, the largest push, whether sums are deltas, and the
  metric name prefixes wanted (empty: push nothing; ``*``: every metric).
* PushTelemetry: the instance id, the subscription id it pushes for, whether the client is closing
  (its last push), the compression of ``Metrics`` and the metrics themselves, an OpenTelemetry
  ``MetricsData`` protobuf message.
"""

from __future__ import annotations

from strom.protocol.spec_json import FieldJson, SpecJson, message_json
from strom.protocol.spec_json import field_json as _f

__all__ = ["TELEMETRY_SPECS"]


def _message(name: str, kind: str, api_key: int, fields: list[FieldJson]) -> SpecJson:
    return message_json(name, kind, api_key, "0", fields)


TELEMETRY_SPECS: list[SpecJson] = [
    _message("GetTelemetrySubscriptionsRequest", "request", 71, [_f("ClientInstanceId", "uuid")]),
    _message(
        "GetTelemetrySubscriptionsResponse",
        "response",
        71,
        [
            _f("ThrottleTimeMs", "int32"),
            _f("ErrorCode", "int16"),
            _f("ClientInstanceId", "uuid"),
            _f("SubscriptionId", "int32"),
            _f("AcceptedCompressionTypes", "[]int8"),
            _f("PushIntervalMs", "int32"),
            _f("TelemetryMaxBytes", "int32"),
            _f("DeltaTemporality", "bool"),
            _f("RequestedMetrics", "[]string"),
        ],
    ),
    _message(
        "PushTelemetryRequest",
        "request",
        72,
        [
            _f("ClientInstanceId", "uuid"),
            _f("SubscriptionId", "int32"),
            _f("Terminating", "bool"),
            _f("CompressionType", "int8"),
            _f("Metrics", "bytes"),
        ],
    ),
    _message(
        "PushTelemetryResponse", "response", 72, [_f("ThrottleTimeMs", "int32"), _f("ErrorCode", "int16")]
    ),
]
