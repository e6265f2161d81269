"""DescribeClientQuotas (48) and AlterClientQuotas (49) (KIP-546): the client quotas of users and client ids.

Both read and write the metadata store (cluster/quota_znodes.py), not this broker's copy, so a quota
altered through one broker is described by every other at once; each broker applies the change when its
notification arrives (this one at once: `ConfigEntities.alter_quotas`). Describe needs DESCRIBE_CONFIGS
on the cluster, alter ALTER_CONFIGS (CLUSTER_AUTHORIZATION_FAILED otherwise).

Describe: the filter's components select entities (strom.quota.filters: EXACT, DEFAULT, ANY, strict);
a malformed filter fails the whole request with INVALID_REQUEST. Alter: each entry is one entity and its
operations (set a key to a value, or remove it), validated and applied alone: an unsupported entity
type or a type given twice, or an unknown key, is INVALID_REQUEST; a value Kafka would refuse (not
positive, not whole for a byte rate) is INVALID_CONFIG; ``validate_only`` checks without writing.
"""

from __future__ import annotations

import logging

from strom.broker.handlers.authz import Op, allowed_cluster
from strom.broker.handlers.base import RequestContext, handles
from strom.protocol.api import ApiKey
from strom.protocol.errors import ErrorCode, KafkaError
from strom.protocol.messages import (
    AlterClientQuotasRequest,
    AlterClientQuotasResponse,
    AlterClientQuotasResponseEntryData,
    DescribeClientQuotasRequest,
    DescribeClientQuotasResponse,
    DescribeClientQuotasResponseEntryData,
)
from strom.quota.entity import QUOTA_KEYS, QuotaEntity, check_quota_value
from strom.quota.filters import FilterComponent, InvalidFilter, check_filter, matches

log = logging.getLogger(__name__)


@handles(ApiKey.DESCRIBE_CLIENT_QUOTAS)
async def handle_describe_client_quotas(
    ctx: RequestContext, req: DescribeClientQuotasRequest
) -> DescribeClientQuotasResponse:
    def failed(code: ErrorCode, message: str) -> DescribeClientQuotasResponse:
        return {"throttle_time_ms": 0, "error_code": int(code), "error_message": message, "entries": None}

    if not allowed_cluster(ctx, Op.DESCRIBE_CONFIGS):
        return failed(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "DESCRIBE_CONFIGS on the cluster is needed")
    components = [
        FilterComponent(c["entity_type"], int(c["match_type"]), c["match"]) for c in req["components"]
    ]
    try:
        check_filter(components)
    except InvalidFilter as exc:
        return failed(ErrorCode.INVALID_REQUEST, str(exc))
    try:
        stored = await ctx.ports.config_entities.load_quotas()
    except KafkaError as exc:
        return failed(exc.code, str(exc))
    entries: list[DescribeClientQuotasResponseEntryData] = []
    for entity, values in stored.items():
        if matches(entity, components, bool(req["strict"])):
            entries.append(
                {
                    "entity": [{"entity_type": t, "entity_name": n} for t, n in entity.to_wire()],
                    "values": [{"key": k, "value": v} for k, v in sorted(values.items())],
                }
            )
    return {"throttle_time_ms": 0, "error_code": 0, "error_message": None, "entries": entries}


class _Refused(Exception):
    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code


def _changes(entry_ops: list[tuple[str, float, bool]]) -> dict[str, float | None]:
    changes: dict[str, float | None] = {}
    for key, value, remove in entry_ops:
        if key not in QUOTA_KEYS:
            raise _Refused(ErrorCode.INVALID_REQUEST, f"unknown quota key {key!r}")
        if key in changes:
            raise _Refused(ErrorCode.INVALID_REQUEST, f"quota key {key!r} altered twice")
        if remove:
            changes[key] = None
            continue
        try:
            check_quota_value(key, value)
        except ValueError as exc:
            raise _Refused(ErrorCode.INVALID_CONFIG, str(exc)) from None
        changes[key] = value
    return changes


@handles(ApiKey.ALTER_CLIENT_QUOTAS)
async def handle_alter_client_quotas(
    ctx: RequestContext, req: AlterClientQuotasRequest
) -> AlterClientQuotasResponse:
    may_alter = allowed_cluster(ctx, Op.ALTER_CONFIGS)
    results: list[AlterClientQuotasResponseEntryData] = []
    for entry in req["entries"]:
        out: AlterClientQuotasResponseEntryData = {
            "error_code": 0,
            "error_message": None,
            "entity": [
                {"entity_type": e["entity_type"], "entity_name": e["entity_name"]} for e in entry["entity"]
            ],
        }
        results.append(out)
        try:
            if not may_alter:
                raise _Refused(
                    ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "ALTER_CONFIGS on the cluster is needed"
                )
            components = {e["entity_type"]: e["entity_name"] for e in entry["entity"]}
            if len(components) != len(entry["entity"]):
                raise _Refused(ErrorCode.INVALID_REQUEST, "an entity type is given twice")
            try:
                entity = QuotaEntity.from_wire(components)
            except ValueError as exc:
                raise _Refused(ErrorCode.INVALID_REQUEST, str(exc)) from None
            changes = _changes([(op["key"], float(op["value"]), bool(op["remove"])) for op in entry["ops"]])
            if req["validate_only"] or not changes:
                continue
            try:
                await ctx.ports.config_entities.alter_quotas(entity, changes)
            except KafkaError as exc:
                raise _Refused(exc.code, str(exc)) from None
            log.info("client quotas of %s altered: %s", entity.describe(), changes)
        except _Refused as exc:
            out["error_code"], out["error_message"] = int(exc.code), str(exc)
    return {"throttle_time_ms": 0, "entries": results}
