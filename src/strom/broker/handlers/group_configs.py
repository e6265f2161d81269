"""The GROUP resource (type 32) of DescribeConfigs, AlterConfigs and IncrementalAlterConfigs: a group's
own configs (strom.broker.group_config_service; the names, defaults and bounds are
strom.coordinator.group_configs').

Described, every group config has its effective value: the group's own with source GROUP_CONFIG (8),
else the broker's with DEFAULT_CONFIG (5). ACLs as Kafka's: DESCRIBE_CONFIGS or ALTER_CONFIGS on the
group (GROUP_AUTHORIZATION_FAILED otherwise).
"""

from __future__ import annotations

from collections.abc import Callable

from strom.broker.group_config_service import GroupConfigs
from strom.broker.handlers.authz import Op, Res, denied
from strom.broker.handlers.base import RequestContext
from strom.broker.handlers.config_entries import config_entry
from strom.coordinator.group_configs import GROUP_CONFIGS
from strom.protocol.errors import ErrorCode, KafkaError
from strom.protocol.messages import DescribeConfigsResponseResourceResult

__all__ = ["GROUP", "alter_group_configs", "describe_group_configs"]

GROUP = 32  # the config resource type
SOURCE_GROUP_CONFIG, SOURCE_DEFAULT = 8, 5


def _service(ctx: RequestContext, group_id: str, operation: Op) -> GroupConfigs:
    if denied(ctx, operation, Res.GROUP, group_id):
        raise KafkaError(ErrorCode.GROUP_AUTHORIZATION_FAILED)
    service = ctx.ports.group_configs
    if service is None:
        raise KafkaError(ErrorCode.INVALID_REQUEST, "group configs are not set up on this broker")
    return service


async def describe_group_configs(
    ctx: RequestContext, group_id: str, keys: list[str] | None
) -> list[DescribeConfigsResponseResourceResult]:
    service = _service(ctx, group_id, Op.DESCRIBE_CONFIGS)
    stored = await service.read(group_id)
    entries: list[DescribeConfigsResponseResourceResult] = []
    for name in GROUP_CONFIGS:
        if keys is not None and name not in keys:
            continue
        if name in stored:
            entries.append(config_entry(name, stored[name], SOURCE_GROUP_CONFIG, False))
        else:
            entries.append(config_entry(name, service.value("", name), SOURCE_DEFAULT, True))
    return entries


async def alter_group_configs(
    ctx: RequestContext,
    group_id: str,
    change: Callable[[dict[str, str]], dict[str, str]],
    validate_only: bool,
) -> None:
    await _service(ctx, group_id, Op.ALTER_CONFIGS).alter(group_id, change, validate_only)
