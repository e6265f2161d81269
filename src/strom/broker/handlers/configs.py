"""DescribeConfigs (32), AlterConfigs (33), IncrementalAlterConfigs (44) for topics, brokers, loggers.

A topic's config is its overrides on top of the broker's defaults. DescribeConfigs reports every topic
config with its effective value and where it comes from: DYNAMIC_TOPIC_CONFIG for an override,
DYNAMIC_BROKER_CONFIG / DYNAMIC_DEFAULT_BROKER_CONFIG / STATIC_BROKER_CONFIG when a broker-level
default supplies it, DEFAULT_CONFIG otherwise. AlterConfigs replaces the whole override set (Kafka's
legacy semantics); IncrementalAlterConfigs edits it (SET, DELETE, APPEND, SUBTRACT). Invalid names or
values fail that resource with INVALID_CONFIG. The BROKER (dynamic broker configs, KIP-226) and
BROKER_LOGGER (log levels) resources are broker_configs.py's, CLIENT_METRICS (KIP-714 subscriptions)
telemetry.py's, GROUP (a group's own configs) group_configs.py's.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

from strom.broker.handlers.authz import Op, Res, allowed_cluster, denied
from strom.broker.handlers.base import HandlerPorts, RequestContext, handles
from strom.broker.handlers.broker_configs import (
    BROKER,
    BROKER_LOGGER,
    alter_broker,
    alter_broker_loggers,
    describe_broker,
    describe_broker_loggers,
)
from strom.broker.handlers.config_entries import config_entry
from strom.broker.handlers.group_configs import GROUP, alter_group_configs, describe_group_configs
from strom.broker.handlers.telemetry import CLIENT_METRICS, alter_client_metrics, describe_client_metrics
from strom.protocol.api import ApiKey
from strom.protocol.errors import ErrorCode, KafkaError
from strom.protocol.messages import (
    AlterConfigsRequest,
    AlterConfigsRequestAlterableConfig,
    AlterConfigsResponse,
    AlterConfigsResponseResourceResponse,
    DescribeConfigsRequest,
    DescribeConfigsResponse,
    DescribeConfigsResponseResourceResult,
    DescribeConfigsResponseResult,
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsRequestAlterableConfig,
    IncrementalAlterConfigsResponse,
)
from strom.storage.config import LogConfig

TOPIC = 2
SOURCE_DYNAMIC_TOPIC = 1
SOURCE_DEFAULT = 5
OP_SET, OP_DELETE, OP_APPEND, OP_SUBTRACT = 0, 1, 2, 3


def _describe_topic(
    ports: HandlerPorts, name: str, keys: list[str] | None
) -> list[DescribeConfigsResponseResourceResult]:
    info = ports.metadata.topics.get(name)
    if info is None:
        raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {name!r} does not exist")
    return topic_config_entries(ports, info.configs, keys)


def topic_config_entries(
    ports: HandlerPorts, overrides: dict[str, str], keys: list[str] | None = None
) -> list[DescribeConfigsResponseResourceResult]:
    """Every topic config with its effective value and source, for a topic with these overrides
    (DescribeConfigs, and CreateTopics v5+ for the topic it creates)."""
    effective = LogConfig.from_properties(overrides, ports.topics.default_log_config).to_properties()
    entries: list[DescribeConfigsResponseResourceResult] = []
    for key, value in sorted(effective.items()):
        if keys is not None and key not in keys:
            continue
        if key in overrides:
            entries.append(config_entry(key, value, SOURCE_DYNAMIC_TOPIC, False))
        elif (source := ports.config_entities.dynamic.source_of_topic_default(key)) is not None:
            entries.append(config_entry(key, value, source, False))
        else:
            entries.append(config_entry(key, value, SOURCE_DEFAULT, True))
    return entries


def _authorize(ctx: RequestContext, rtype: int, name: str, operation: Op) -> None:
    """ACLs: a topic's configs need the operation on the topic (29), a broker's on the cluster (31)."""
    if ctx.ports.authorizer is None:
        return
    if rtype == TOPIC and denied(ctx, operation, Res.TOPIC, name):
        raise KafkaError(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
    if rtype in (BROKER, BROKER_LOGGER, CLIENT_METRICS) and not allowed_cluster(ctx, operation):
        raise KafkaError(ErrorCode.CLUSTER_AUTHORIZATION_FAILED)


@handles(ApiKey.DESCRIBE_CONFIGS)
async def handle_describe_configs(
    ctx: RequestContext, req: DescribeConfigsRequest
) -> DescribeConfigsResponse:
    results: list[DescribeConfigsResponseResult] = []
    for res in req["resources"]:
        rtype, name = int(res["resource_type"]), res["resource_name"]
        keys = res.get("configuration_keys")
        out: DescribeConfigsResponseResult = {
            "error_code": 0,
            "error_message": None,
            "resource_type": rtype,
            "resource_name": name,
            "configs": [],
        }
        try:
            _authorize(ctx, rtype, name, Op.DESCRIBE_CONFIGS)
            if rtype == TOPIC:
                out["configs"] = _describe_topic(ctx.ports, name, keys)
            elif rtype == BROKER:
                synonyms, docs = bool(req.get("include_synonyms")), bool(req.get("include_documentation"))
                out["configs"] = describe_broker(ctx.ports, name, keys, synonyms, docs)
            elif rtype == BROKER_LOGGER:
                out["configs"] = describe_broker_loggers(ctx.ports, name, keys)
            elif rtype == CLIENT_METRICS:
                out["configs"] = await describe_client_metrics(ctx, name, keys)
            elif rtype == GROUP:
                out["configs"] = await describe_group_configs(ctx, name, keys)
            else:
                raise KafkaError(ErrorCode.INVALID_REQUEST, f"unsupported resource type {rtype}")
        except KafkaError as exc:
            out["error_code"], out["error_message"] = int(exc.code), exc.message
        results.append(out)
    return {"throttle_time_ms": 0, "results": results}


def _apply_incremental(
    current: dict[str, str], ops: list[IncrementalAlterConfigsRequestAlterableConfig], defaults: LogConfig
) -> dict[str, str]:
    updated = dict(current)
    for op in ops:
        key, value, kind = op["name"], op["value"], int(op["config_operation"])
        if kind == OP_SET:
            if value is None:
                raise KafkaError(ErrorCode.INVALID_CONFIG, f"null value for {key}")
            updated[key] = value
        elif kind == OP_DELETE:
            updated.pop(key, None)
        elif kind in (OP_APPEND, OP_SUBTRACT):
            # A list without an override starts from its default, as in Kafka (APPEND compact to the
            # default cleanup.policy is delete,compact).
            start = updated[key] if key in updated else defaults.to_properties().get(key, "")
            items = [v for v in start.split(",") if v]
            given = [v for v in (value or "").split(",") if v]
            if kind == OP_APPEND:
                items += [v for v in given if v not in items]
            else:
                items = [v for v in items if v not in given]
            updated[key] = ",".join(items)
        else:
            raise KafkaError(ErrorCode.INVALID_REQUEST, f"unknown config operation {kind}")
    return updated


# A resource to alter: (resource type, name, new configs from the current ones, the configs the
# request names one by one: IncrementalAlterConfigs' operations, none for AlterConfigs' replacement).
_Change = tuple[int, str, Callable[[dict[str, str]], dict[str, str]], frozenset[str]]


async def _alter(
    ctx: RequestContext, changes: list[_Change], validate_only: bool, incremental: bool
) -> list[AlterConfigsResponseResourceResponse]:
    responses: list[AlterConfigsResponseResourceResponse] = []
    for rtype, name, change, named in changes:
        out: AlterConfigsResponseResourceResponse = {
            "error_code": 0,
            "error_message": None,
            "resource_type": rtype,
            "resource_name": name,
        }
        try:
            _authorize(ctx, rtype, name, Op.ALTER_CONFIGS)
            if rtype == BROKER:
                await alter_broker(ctx.ports, name, change, validate_only, named)
            elif rtype == BROKER_LOGGER:
                if not incremental:
                    raise KafkaError(
                        ErrorCode.INVALID_REQUEST, "loggers are altered with IncrementalAlterConfigs"
                    )
                alter_broker_loggers(ctx.ports, name, change, validate_only)
            elif rtype == CLIENT_METRICS:
                await alter_client_metrics(ctx, name, change, validate_only)
            elif rtype == GROUP:
                await alter_group_configs(ctx, name, change, validate_only)
            elif rtype == TOPIC:
                info = ctx.ports.metadata.topics.get(name)
                if info is None:
                    raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {name!r} does not exist")
                ctx.ports.topics.set_topic_configs(name, change(info.configs), validate_only)
            else:
                raise KafkaError(ErrorCode.INVALID_REQUEST, f"unsupported resource type {rtype}")
        except KafkaError as exc:
            out["error_code"], out["error_message"] = int(exc.code), exc.message
        responses.append(out)
    return responses


def _replace(configs: list[AlterConfigsRequestAlterableConfig]) -> Callable[[dict[str, str]], dict[str, str]]:
    """AlterConfigs: the given configs replace the resource's (a null value is left out)."""
    new = {c["name"]: c["value"] for c in configs if c["value"] is not None}
    return lambda _current: new


@handles(ApiKey.ALTER_CONFIGS)
async def handle_alter_configs(ctx: RequestContext, req: AlterConfigsRequest) -> AlterConfigsResponse:
    changes = [
        (int(r["resource_type"]), r["resource_name"], _replace(r["configs"]), frozenset[str]())
        for r in req["resources"]
    ]
    validate_only = bool(req.get("validate_only", False))
    return {"throttle_time_ms": 0, "responses": await _alter(ctx, changes, validate_only, incremental=False)}


@handles(ApiKey.INCREMENTAL_ALTER_CONFIGS)
async def handle_incremental_alter_configs(
    ctx: RequestContext, req: IncrementalAlterConfigsRequest
) -> IncrementalAlterConfigsResponse:
    changes: list[_Change] = [
        (
            int(r["resource_type"]),
            r["resource_name"],
            functools.partial(
                _apply_incremental, ops=r["configs"], defaults=ctx.ports.topics.default_log_config
            ),
            frozenset(op["name"] for op in r["configs"]),
        )
        for r in req["resources"]
    ]
    responses = await _alter(ctx, changes, bool(req.get("validate_only", False)), incremental=True)
    return {"throttle_time_ms": 0, "responses": responses}
