"""Group membership APIs: FindCoordinator (also for transactional ids, key type 1), JoinGroup, SyncGroup,
Heartbeat, LeaveGroup, and the admin APIs DescribeGroups, ListGroups, DeleteGroups (which deletes an
empty share group's share-partition states too).

Each handler only translates between the wire dict of the negotiated version and the coordinator's typed
requests and results (`strom.coordinator.messages`); every decision is the coordinator's. JoinGroup and
SyncGroup may be parked by the coordinator (until a rebalance completes or the leader's assignment
arrives); the handler then awaits the result, holding back later requests on that connection exactly as
Kafka's muted channel does. Until the group service is up, group requests get COORDINATOR_NOT_AVAILABLE
(retriable: clients look the coordinator up again).
"""

from __future__ import annotations

from strom.broker.coordinators import group_migration, share_group_service
from strom.broker.coordinators.group_service import GroupService
from strom.broker.coordinators.transaction_service import TransactionService
from strom.broker.handlers.authz import Op, Res, allowed, allowed_cluster, authorized_operations, denied
from strom.broker.handlers.base import RequestContext, handles, until_listed
from strom.coordinator import JoinGroupRequest, SyncGroupRequest
from strom.protocol import messages as m
from strom.protocol.api import ApiKey
from strom.protocol.errors import ErrorCode, KafkaError

COORDINATOR_KEY_TYPE_GROUP = 0
COORDINATOR_KEY_TYPE_TRANSACTION = 1
BATCHED_FIND_VERSION = 4  # FindCoordinator v4+: coordinator_keys (KIP-699)
GROUP_NOT_FOUND_VERSION = 6  # DescribeGroups v6+: GROUP_ID_NOT_FOUND for an unknown group (KIP-1043)


def group_service(ctx: RequestContext) -> GroupService:
    return ctx.ports.groups


def group_refusal(ctx: RequestContext, group_id: str, operation: Op = Op.READ) -> ErrorCode | None:
    """Why this broker does not serve the group request: the sender lacks `operation` on the group
    (GROUP_AUTHORIZATION_FAILED; READ for membership APIs), or another broker coordinates it
    (NOT_COORDINATOR), or this one is still loading it (COORDINATOR_LOAD_IN_PROGRESS)."""
    if denied(ctx, operation, Res.GROUP, group_id):
        return ErrorCode.GROUP_AUTHORIZATION_FAILED
    return group_service(ctx).coordinator_error(group_id)


# --- FindCoordinator -----------------------------------------------------------------------------


@handles(ApiKey.FIND_COORDINATOR)
async def handle_find_coordinator(
    ctx: RequestContext, req: m.FindCoordinatorRequest
) -> m.FindCoordinatorResponse:
    key_type = int(req.get("key_type", COORDINATOR_KEY_TYPE_GROUP))
    if ctx.api_version < BATCHED_FIND_VERSION:
        one = await _find_one(ctx, key_type, str(req.get("key", "")))
        return {
            "throttle_time_ms": 0,
            "error_code": one["error_code"],
            "error_message": one["error_message"],
            "node_id": one["node_id"],
            "host": one["host"],
            "port": one["port"],
        }
    # v4+ (KIP-699): several keys of one type in one request, one answer each
    keys = [str(key) for key in req.get("coordinator_keys", ())]
    return {"throttle_time_ms": 0, "coordinators": [await _find_one(ctx, key_type, key) for key in keys]}


async def _find_one(ctx: RequestContext, key_type: int, key: str) -> m.FindCoordinatorResponseCoordinator:
    service: GroupService | TransactionService = group_service(ctx)
    if key_type == COORDINATOR_KEY_TYPE_TRANSACTION:
        service = ctx.ports.transactions
    elif key_type != COORDINATOR_KEY_TYPE_GROUP:
        # (key type 2, v6's share coordinator of KIP-932, included: share groups are not served)
        return _find_error(key, ErrorCode.INVALID_REQUEST, f"unknown coordinator key type {key_type}")
    if ctx.ports.authorizer is not None:
        if key_type == COORDINATOR_KEY_TYPE_GROUP and denied(ctx, Op.DESCRIBE, Res.GROUP, key):
            return _find_error(key, ErrorCode.GROUP_AUTHORIZATION_FAILED, "")
        if key_type == COORDINATOR_KEY_TYPE_TRANSACTION and denied(
            ctx, Op.DESCRIBE, Res.TRANSACTIONAL_ID, key
        ):
            return _find_error(key, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, "")
    await until_listed(ctx.ports)  # the coordinator's topic is known only then (base.py)
    try:
        service.ensure_topic()
    except KafkaError as exc:
        message = f"cannot create the coordinator topic: {exc}"
        return _find_error(key, ErrorCode.COORDINATOR_NOT_AVAILABLE, message)
    # The coordinator is the leader of the key's __consumer_offsets / __transaction_state partition.
    found = service.coordinator_endpoint(key)
    if found is None:
        return _find_error(key, ErrorCode.COORDINATOR_NOT_AVAILABLE, "the key's partition has no leader yet")
    node_id, host, port = found
    # The coordinator's address on the listener this client is connected to.
    live = ctx.ports.metadata.brokers.get(node_id)
    endpoint = live.endpoint(ctx.listener) if live is not None else None
    if endpoint is not None:
        host, port = endpoint
    return {
        "key": key,
        "error_code": 0,
        "error_message": None,
        "node_id": node_id,
        "host": host,
        "port": port,
    }


def _find_error(key: str, code: ErrorCode, message: str) -> m.FindCoordinatorResponseCoordinator:
    return {
        "key": key,
        "error_code": int(code),
        "error_message": message,
        "node_id": -1,
        "host": "",
        "port": -1,
    }


# --- JoinGroup / SyncGroup -----------------------------------------------------------------------


@handles(ApiKey.JOIN_GROUP)
async def handle_join_group(ctx: RequestContext, req: m.JoinGroupRequest) -> m.JoinGroupResponse:
    group_id = req["group_id"]
    member_id = req["member_id"] or ""
    error = group_refusal(ctx, group_id)
    service = group_service(ctx)
    if error is not None:
        return _join_response(error, member_id)
    version = ctx.api_version
    session_timeout_ms = int(req["session_timeout_ms"])
    rebalance_timeout_ms = int(req.get("rebalance_timeout_ms", -1)) if version >= 1 else -1
    request = JoinGroupRequest(
        group_id=group_id,
        member_id=member_id,
        group_instance_id=req.get("group_instance_id") if version >= 5 else None,
        protocol_type=req["protocol_type"],
        protocols=tuple((p["name"], bytes(p["metadata"])) for p in req["protocols"]),
        session_timeout_ms=session_timeout_ms,
        # v0 has no rebalance timeout: Kafka uses the session timeout for it.
        rebalance_timeout_ms=rebalance_timeout_ms if rebalance_timeout_ms > 0 else session_timeout_ms,
        client_id=ctx.client_id or "",
        client_host=f"/{ctx.client_host}",
        require_known_member_id=version >= 4,
    )
    result = await group_migration.join_group(service, request)
    body = _join_response(result.error, result.member_id)
    if result.error is ErrorCode.NONE:
        body["generation_id"] = result.generation_id
        body["protocol_type"] = result.protocol_type or req["protocol_type"]  # v7+
        body["protocol_name"] = result.protocol_name or ""
        body["leader"] = result.leader
        body["members"] = [
            {
                "member_id": member.member_id,
                "group_instance_id": member.group_instance_id,
                "metadata": member.metadata,
            }
            for member in result.members
        ]
    return body


def _join_response(code: ErrorCode, member_id: str) -> m.JoinGroupResponse:
    return {
        "throttle_time_ms": 0,
        "error_code": int(code),
        "generation_id": -1,
        "protocol_type": None,
        "protocol_name": "",
        "leader": "",
        "skip_assignment": False,
        "member_id": member_id,
        "members": [],
    }


@handles(ApiKey.SYNC_GROUP)
async def handle_sync_group(ctx: RequestContext, req: m.SyncGroupRequest) -> m.SyncGroupResponse:
    group_id = req["group_id"]
    error = group_refusal(ctx, group_id)
    service = group_service(ctx)
    if error is not None:
        return {
            "throttle_time_ms": 0,
            "error_code": int(error),
            "assignment": b"",
        }
    request = SyncGroupRequest(
        group_id=group_id,
        generation_id=int(req["generation_id"]),
        member_id=req["member_id"] or "",
        group_instance_id=req.get("group_instance_id") if ctx.api_version >= 3 else None,
        protocol_type=req.get("protocol_type"),  # v5+: checked against the group's
        protocol_name=req.get("protocol_name"),
        assignments=tuple((a["member_id"], bytes(a["assignment"])) for a in req["assignments"]),
    )
    result = await group_migration.sync_group(service, request)
    if result.error is ErrorCode.NONE:
        # Cluster mode: the stored assignment must be on the ISR before members act on it (acks=-1).
        replicated = await service.wait_for_replication(group_id)
        if replicated is not ErrorCode.NONE:
            return {"throttle_time_ms": 0, "error_code": int(replicated), "assignment": b""}
    return {
        "throttle_time_ms": 0,
        "error_code": int(result.error),
        "protocol_type": result.protocol_type,  # v5+
        "protocol_name": result.protocol_name,
        "assignment": result.assignment,
    }


# --- Heartbeat / LeaveGroup ----------------------------------------------------------------------


@handles(ApiKey.HEARTBEAT)
async def handle_heartbeat(ctx: RequestContext, req: m.HeartbeatRequest) -> m.HeartbeatResponse:
    group_id = req["group_id"]
    error = group_refusal(ctx, group_id)
    service = group_service(ctx)
    if error is None and service is not None:
        error = group_migration.heartbeat(
            service,
            group_id,
            int(req["generation_id"]),
            req["member_id"] or "",
            req.get("group_instance_id") if ctx.api_version >= 3 else None,
        )
    # (ErrorCode.NONE is falsy: compare with None, never use `or` on error codes.)
    code = ErrorCode.COORDINATOR_NOT_AVAILABLE if error is None else error
    return {"throttle_time_ms": 0, "error_code": int(code)}


@handles(ApiKey.LEAVE_GROUP)
async def handle_leave_group(ctx: RequestContext, req: m.LeaveGroupRequest) -> m.LeaveGroupResponse:
    group_id = req["group_id"]
    if ctx.api_version >= 3:
        leaving = [(m["member_id"] or "", m.get("group_instance_id")) for m in req["members"]]
    else:
        leaving = [(req["member_id"] or "", None)]
    error = group_refusal(ctx, group_id)
    service = group_service(ctx)
    if error is not None:
        code = int(error)
        return {"throttle_time_ms": 0, "error_code": code, "members": []}
    errors = await group_migration.leave_group(service, group_id, leaving)
    if ctx.api_version < 3:
        # One member, no per-member list: its error is the response's error.
        return {"throttle_time_ms": 0, "error_code": int(errors[0])}
    members: list[m.LeaveGroupResponseMemberResponse] = [
        {"member_id": member_id, "group_instance_id": instance_id, "error_code": int(code)}
        for (member_id, instance_id), code in zip(leaving, errors, strict=True)
    ]
    return {"throttle_time_ms": 0, "error_code": 0, "members": members}


# --- DescribeGroups / ListGroups / DeleteGroups --------------------------------------------------


@handles(ApiKey.DESCRIBE_GROUPS)
async def handle_describe_groups(
    ctx: RequestContext, req: m.DescribeGroupsRequest
) -> m.DescribeGroupsResponse:
    service = group_service(ctx)
    groups: list[m.DescribeGroupsResponseDescribedGroup] = []
    for group_id in req["groups"]:
        error = group_refusal(ctx, group_id, Op.DESCRIBE)
        if error is not None:
            # Cluster mode: only the group's coordinator describes it (NOT_COORDINATOR elsewhere).
            groups.append(_described(group_id, error))
            continue
        summary = group_migration.describe_group(service, group_id)
        described = _described(group_id, summary.error)
        if (
            ctx.api_version >= GROUP_NOT_FOUND_VERSION
            and summary.error is ErrorCode.NONE
            and summary.state == "Dead"
        ):
            described["error_code"] = int(ErrorCode.GROUP_ID_NOT_FOUND)  # KIP-1043 (earlier: Dead, no error)
            described["error_message"] = f"Group {group_id} not found."
            groups.append(described)
            continue
        described["group_state"] = summary.state
        described["protocol_type"] = summary.protocol_type
        described["protocol_data"] = summary.protocol_name
        described["members"] = [
            {
                "member_id": member.member_id,
                "group_instance_id": member.group_instance_id,
                "client_id": member.client_id,
                "client_host": member.client_host,
                "member_metadata": member.metadata,
                "member_assignment": member.assignment,
            }
            for member in summary.members
        ]
        if ctx.ports.authorizer is not None and req.get("include_authorized_operations"):
            described["authorized_operations"] = authorized_operations(ctx, Res.GROUP, group_id)
        groups.append(described)
    return {"throttle_time_ms": 0, "groups": groups}


def _described(group_id: str, code: ErrorCode) -> m.DescribeGroupsResponseDescribedGroup:
    return {
        "error_code": int(code),
        "error_message": None,
        "group_id": group_id,
        "group_state": "",
        "protocol_type": "",
        "protocol_data": "",
        "members": [],
    }


@handles(ApiKey.LIST_GROUPS)
async def handle_list_groups(ctx: RequestContext, req: m.ListGroupsRequest) -> m.ListGroupsResponse:
    service = group_service(ctx)
    # v4 filters by state, v5 by group type; both compared lower-cased, as Kafka does.
    states = frozenset(s.lower() for s in req.get("states_filter", ()))
    types = frozenset(t.lower() for t in req.get("types_filter", ()))
    groups: list[m.ListGroupsResponseListedGroup] = [
        {
            "group_id": g.group_id,
            "protocol_type": g.protocol_type,
            "group_state": g.state,
            "group_type": g.group_type,
        }
        for g in service.coordinator.list_groups()
        if g.matches(states, types)
    ]
    if ctx.ports.authorizer is not None and not allowed_cluster(ctx, Op.DESCRIBE):
        # Kafka: without DESCRIBE on the cluster, only the groups the sender may DESCRIBE are listed.
        groups = [g for g in groups if allowed(ctx, Op.DESCRIBE, Res.GROUP, g["group_id"])]
    return {"throttle_time_ms": 0, "error_code": 0, "groups": groups}


@handles(ApiKey.DELETE_GROUPS)
async def handle_delete_groups(ctx: RequestContext, req: m.DeleteGroupsRequest) -> m.DeleteGroupsResponse:
    service = group_service(ctx)
    names: list[str] = list(req["groups_names"])
    refusals = {n: group_refusal(ctx, n, Op.DELETE) for n in names}
    mine = [n for n, refused in refusals.items() if refused is None]
    codes = {n: refused or ErrorCode.NONE for n, refused in refusals.items()}
    codes.update(service.coordinator.delete_groups(mine))
    for name in mine:
        if codes[name] is ErrorCode.GROUP_ID_NOT_FOUND:
            codes[name] = await _delete_share_group(ctx, name)
    return {
        "throttle_time_ms": 0,
        "results": [{"group_id": name, "error_code": int(codes[name])} for name in names],
    }


async def _delete_share_group(ctx: RequestContext, group_id: str) -> ErrorCode:
    """DeleteGroups of an id no classic or consumer group holds: a share group (KIP-932) with members
    answers NON_EMPTY_GROUP; else, with the group held empty (no member joins meanwhile:
    `share_group_service.held_empty`), its share-partition states are removed from every share
    coordinator, then the Empty group itself (its records get tombstones). GROUP_ID_NOT_FOUND when
    there was neither a group nor a stored state."""
    service = group_service(ctx)
    async with share_group_service.held_empty(service, group_id) as refused:
        if refused is not ErrorCode.NONE:
            return refused
        found = share_group_service.share_group(service, group_id)
        persister = ctx.ports.share_persister
        removed = 0
        if persister is not None:
            code, removed = await persister.delete_group(group_id)
            if code is not ErrorCode.NONE:
                return code
        if found is not None:
            return await share_group_service.delete_group(service, group_id)
        return ErrorCode.NONE if removed else ErrorCode.GROUP_ID_NOT_FOUND
