"""Client telemetry (KIP-714): GetTelemetrySubscriptions (71), PushTelemetry (72), and the CLIENT_METRICS
config resource (type 16) of DescribeConfigs / AlterConfigs / IncrementalAlterConfigs.

The decisions are strom.broker.client_telemetry's (subscriptions, throttling, the pushed metrics).
GetTelemetrySubscriptions answers the client's instance id (a new one for all zeros), its subscription
and the broker's limits: the compression types accepted for pushes (zstd, lz4, gzip, snappy, as Kafka
prefers them), ``telemetry.max.bytes``, delta temporality. Neither API needs an ACL (as in Kafka); the
config resource needs DESCRIBE_CONFIGS / ALTER_CONFIGS on the cluster (configs.py checks it). A
subscription's configs: ``metrics``, ``interval.ms``, ``match``; described, a config it does not set
shows Kafka's default with source DEFAULT_CONFIG, one it sets CLIENT_METRICS_CONFIG (7).
"""

from __future__ import annotations

from collections.abc import Callable

from strom.broker.client_telemetry import ClientTelemetry
from strom.broker.handlers.base import RequestContext, handles
from strom.broker.handlers.config_entries import config_entry
from strom.protocol.api import ApiKey
from strom.protocol.errors import ErrorCode, KafkaError
from strom.protocol.messages import (
    DescribeConfigsResponseResourceResult,
    GetTelemetrySubscriptionsRequest,
    GetTelemetrySubscriptionsResponse,
    PushTelemetryRequest,
    PushTelemetryResponse,
)
from strom.telemetry.subscriptions import CLIENT_METRICS_CONFIGS, INTERVAL_DEFAULT_MS, INTERVAL_MS

__all__ = ["CLIENT_METRICS", "alter_client_metrics", "describe_client_metrics"]

CLIENT_METRICS = 16  # the config resource type
SOURCE_CLIENT_METRICS, SOURCE_DEFAULT = 7, 5
_DEFAULTS = {"metrics": "", INTERVAL_MS: str(INTERVAL_DEFAULT_MS), "match": ""}


def _service(ctx: RequestContext) -> ClientTelemetry:
    telemetry = ctx.ports.client_telemetry
    if telemetry is None:
        raise KafkaError(ErrorCode.UNSUPPORTED_VERSION, "client telemetry is not set up on this broker")
    return telemetry


@handles(ApiKey.GET_TELEMETRY_SUBSCRIPTIONS)
async def handle_get_telemetry_subscriptions(
    ctx: RequestContext, req: GetTelemetrySubscriptionsRequest
) -> GetTelemetrySubscriptionsResponse:
    telemetry = _service(ctx)
    attributes = telemetry.attributes(ctx.client_id, ctx.client_host, ctx.client_info)
    instance, error = telemetry.get(bytes(req["client_instance_id"]), attributes)
    return {
        "throttle_time_ms": 0,
        "error_code": error,
        "client_instance_id": instance.instance_id,
        "subscription_id": instance.subscription_id,
        "accepted_compression_types": telemetry.accepted_compression,
        "push_interval_ms": instance.push_interval_ms,
        "telemetry_max_bytes": telemetry.max_bytes,
        "delta_temporality": True,
        "requested_metrics": list(instance.metrics),
    }


@handles(ApiKey.PUSH_TELEMETRY)
async def handle_push_telemetry(ctx: RequestContext, req: PushTelemetryRequest) -> PushTelemetryResponse:
    telemetry = _service(ctx)
    error = telemetry.push(
        bytes(req["client_instance_id"]),
        telemetry.attributes(ctx.client_id, ctx.client_host, ctx.client_info),
        int(req["subscription_id"]),
        bool(req["terminating"]),
        int(req["compression_type"]),
        bytes(req["metrics"] or b""),
    )
    return {"throttle_time_ms": 0, "error_code": error}


async def describe_client_metrics(
    ctx: RequestContext, name: str, keys: list[str] | None
) -> list[DescribeConfigsResponseResourceResult]:
    stored = await _service(ctx).read(name)
    entries: list[DescribeConfigsResponseResourceResult] = []
    for key in CLIENT_METRICS_CONFIGS:
        if keys is not None and key not in keys:
            continue
        source = SOURCE_CLIENT_METRICS if key in stored else SOURCE_DEFAULT
        entries.append(config_entry(key, stored.get(key, _DEFAULTS[key]), source, source == SOURCE_DEFAULT))
    return entries


async def alter_client_metrics(
    ctx: RequestContext, name: str, change: Callable[[dict[str, str]], dict[str, str]], validate_only: bool
) -> None:
    await _service(ctx).alter(name, change, validate_only)
