"""DescribeAcls (29), CreateAcls (30), DeleteAcls (31), as Kafka's AclApis answers them.

Without an authorizer all three answer SECURITY_DISABLED. Describe needs DESCRIBE on the cluster,
Create and Delete ALTER (else CLUSTER_AUTHORIZATION_FAILED). v0 knows only LITERAL patterns: a v0
request means LITERAL and a v0 answer leaves PREFIXED bindings out. A creation with an ANY, MATCH or
UNKNOWN code, or a malformed principal, fails alone with INVALID_REQUEST.
"""

from __future__ import annotations

import logging
from typing import TypeVar

from strom.acl.model import (
    CLUSTER_NAME,
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)
from strom.broker.authorization import AclStoreUnavailable, Authorizer
from strom.broker.handlers.base import RequestContext, handles
from strom.protocol.api import ApiKey
from strom.protocol.errors import ErrorCode
from strom.protocol.messages import (
    CreateAclsRequest,
    CreateAclsResponse,
    CreateAclsResponseAclCreationResult,
    DeleteAclsRequest,
    DeleteAclsRequestFilter,
    DeleteAclsResponse,
    DeleteAclsResponseFilterResult,
    DeleteAclsResponseMatchingAcl,
    DescribeAclsRequest,
    DescribeAclsResponse,
    DescribeAclsResponseAclDescription,
    DescribeAclsResponseResource,
)

log = logging.getLogger(__name__)
_LITERAL = int(PatternType.LITERAL)


_E = TypeVar("_E", ResourceType, PatternType, AclOperation, AclPermissionType)


def _code(enum: type[_E], raw: int) -> _E:
    try:
        return enum(raw)
    except ValueError:
        return enum(0)


def _filter(raw: DescribeAclsRequest | DeleteAclsRequestFilter, version: int) -> AclBindingFilter:
    return AclBindingFilter(
        _code(ResourceType, raw["resource_type_filter"]),
        raw.get("resource_name_filter"),
        _code(PatternType, raw.get("pattern_type_filter", _LITERAL) if version >= 1 else _LITERAL),
        raw.get("principal_filter"),
        raw.get("host_filter"),
        _code(AclOperation, raw["operation"]),
        _code(AclPermissionType, raw["permission_type"]),
    )


def _matching(binding: AclBinding) -> DeleteAclsResponseMatchingAcl:
    p, e = binding.pattern, binding.entry
    return {
        "error_code": 0,
        "error_message": None,
        "resource_type": int(p.resource_type),
        "resource_name": p.name,
        "pattern_type": int(p.pattern_type),
        "principal": e.principal,
        "host": e.host,
        "operation": int(e.operation),
        "permission_type": int(e.permission),
    }


def _description(binding: AclBinding) -> DescribeAclsResponseAclDescription:
    e = binding.entry
    return {
        "principal": e.principal,
        "host": e.host,
        "operation": int(e.operation),
        "permission_type": int(e.permission),
    }


def _gate(ctx: RequestContext, operation: AclOperation) -> tuple[Authorizer | None, ErrorCode, str | None]:
    auth = ctx.ports.authorizer
    if auth is None:
        return None, ErrorCode.SECURITY_DISABLED, "no authorizer is configured on the broker"
    if not auth.allowed(ctx.principal, ctx.client_host, operation, ResourceType.CLUSTER, CLUSTER_NAME):
        return None, ErrorCode.CLUSTER_AUTHORIZATION_FAILED, None
    return auth, ErrorCode.NONE, None


def _visible(binding: AclBinding, version: int) -> bool:
    return version >= 1 or binding.pattern.pattern_type == PatternType.LITERAL


@handles(ApiKey.DESCRIBE_ACLS)
async def describe_acls(ctx: RequestContext, body: DescribeAclsRequest) -> DescribeAclsResponse:
    auth, error, message = _gate(ctx, AclOperation.DESCRIBE)
    resources: list[DescribeAclsResponseResource] = []
    if auth is not None:
        acl_filter = _filter(body, ctx.api_version)
        if (reason := acl_filter.invalid()) is not None:
            error, message = ErrorCode.INVALID_REQUEST, reason
        else:
            grouped: dict[ResourcePattern, list[DescribeAclsResponseAclDescription]] = {}
            for b in auth.describe(acl_filter):
                if _visible(b, ctx.api_version):
                    grouped.setdefault(b.pattern, []).append(_description(b))
            resources = [
                {
                    "resource_type": int(p.resource_type),
                    "resource_name": p.name,
                    "pattern_type": int(p.pattern_type),
                    "acls": acls,
                }
                for p, acls in sorted(grouped.items(), key=lambda kv: (kv[0].resource_type, kv[0].name))
            ]
    return {"throttle_time_ms": 0, "error_code": int(error), "error_message": message, "resources": resources}


@handles(ApiKey.CREATE_ACLS)
async def create_acls(ctx: RequestContext, body: CreateAclsRequest) -> CreateAclsResponse:
    creations = body["creations"]
    auth, error, message = _gate(ctx, AclOperation.ALTER)
    if auth is None:
        refused: CreateAclsResponseAclCreationResult = {"error_code": int(error), "error_message": message}
        return {"throttle_time_ms": 0, "results": [refused for _ in creations]}
    bindings = [
        AclBinding(
            ResourcePattern(
                _code(ResourceType, c["resource_type"]),
                c["resource_name"],
                _code(
                    PatternType,
                    c.get("resource_pattern_type", _LITERAL) if ctx.api_version >= 1 else _LITERAL,
                ),
            ),
            AccessControlEntry(
                c["principal"],
                c["host"],
                _code(AclOperation, c["operation"]),
                _code(AclPermissionType, c["permission_type"]),
            ),
        )
        for c in creations
    ]
    try:
        reasons = await auth.create(bindings)
    except AclStoreUnavailable as exc:  # e.g. ZooKeeper unreachable: some may not have been stored
        log.warning("CreateAcls failed: %s", exc)
        failed: CreateAclsResponseAclCreationResult = {
            "error_code": int(ErrorCode.UNKNOWN_SERVER_ERROR),
            "error_message": "ACL store unavailable",
        }
        return {"throttle_time_ms": 0, "results": [failed for _ in creations]}
    results: list[CreateAclsResponseAclCreationResult] = [
        {"error_code": 0, "error_message": None}
        if reason is None
        else {"error_code": int(ErrorCode.INVALID_REQUEST), "error_message": reason}
        for reason in reasons
    ]
    return {"throttle_time_ms": 0, "results": results}


@handles(ApiKey.DELETE_ACLS)
async def delete_acls(ctx: RequestContext, body: DeleteAclsRequest) -> DeleteAclsResponse:
    filters = body["filters"]
    auth, error, message = _gate(ctx, AclOperation.ALTER)
    out: list[DeleteAclsResponseFilterResult] = []
    for raw in filters:
        if auth is None:
            out.append({"error_code": int(error), "error_message": message, "matching_acls": []})
            continue
        acl_filter = _filter(raw, ctx.api_version)
        if (reason := acl_filter.invalid()) is not None:
            out.append(
                {"error_code": int(ErrorCode.INVALID_REQUEST), "error_message": reason, "matching_acls": []}
            )
            continue
        try:
            removed = await auth.delete(acl_filter)
        except AclStoreUnavailable as exc:
            log.warning("DeleteAcls failed: %s", exc)
            out.append(
                {
                    "error_code": int(ErrorCode.UNKNOWN_SERVER_ERROR),
                    "error_message": "ACL store unavailable",
                    "matching_acls": [],
                }
            )
            continue
        matching = [_matching(b) for b in removed if _visible(b, ctx.api_version)]
        out.append({"error_code": 0, "error_message": None, "matching_acls": matching})
    return {"throttle_time_ms": 0, "filter_results": out}
