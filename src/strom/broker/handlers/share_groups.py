"""KIP-932 share groups' membership: ShareGroupHeartbeat and ShareGroupDescribe.

The handlers translate between the wire and the coordinator (topic ids on the wire, names in the
coordinator; an assigned topic without an id is not sent); every decision is the coordinator's
(`strom.broker.coordinators.share_group_service`, `strom.coordinator.share.membership`).
Authorization as Kafka's: READ on the group for the heartbeat, DESCRIBE for describe; a group another
broker coordinates gets NOT_COORDINATOR, one still loading COORDINATOR_LOAD_IN_PROGRESS.
"""

from __future__ import annotations

from strom.broker.coordinators import share_group_service
from strom.broker.coordinators.share_group_shard import ShareHeartbeat
from strom.broker.handlers import group_common as common
from strom.broker.handlers.authz import Op
from strom.broker.handlers.base import RequestContext, handles
from strom.broker.handlers.groups import group_refusal, group_service
from strom.coordinator.share.membership import ASSIGNOR_NAME, ShareGroup
from strom.protocol import messages as m
from strom.protocol.api import ApiKey
from strom.protocol.errors import ErrorCode


@handles(ApiKey.SHARE_GROUP_HEARTBEAT)
async def handle_share_group_heartbeat(
    ctx: RequestContext, req: m.ShareGroupHeartbeatRequest
) -> m.ShareGroupHeartbeatResponse:
    group_id = req["group_id"]
    service = group_service(ctx)
    refused = group_refusal(ctx, group_id, Op.READ)
    if refused is None and not group_id:
        refused = ErrorCode.INVALID_GROUP_ID
    if refused is not None:
        return common.heartbeat_error(m.ShareGroupHeartbeatResponse, refused, None)
    topics = req.get("subscribed_topic_names")
    request = ShareHeartbeat(
        group_id=group_id,
        member_id=req["member_id"] or "",
        member_epoch=int(req["member_epoch"]),
        subscribed_topic_names=None if topics is None else tuple(topics),
        rack_id=req.get("rack_id"),
        client_id=ctx.client_id or "",
        client_host=f"/{ctx.client_host}",
    )
    answer = await share_group_service.heartbeat(service, request)
    if answer.error is not ErrorCode.NONE:
        return common.heartbeat_error(m.ShareGroupHeartbeatResponse, answer.error, answer.message)
    assignment: m.ShareGroupHeartbeatResponseAssignment | None = None
    if answer.assignment is not None:
        assignment = {
            "assigned_topic_partitions": common.wire_assignment(answer.assignment, common.topic_ids(ctx))
        }
    interval_ms = service.share_heartbeat_interval_of(group_id)
    return common.heartbeat_answer(
        m.ShareGroupHeartbeatResponse, answer.member_id, answer.member_epoch, interval_ms, assignment
    )


# --- ShareGroupDescribe --------------------------------------------------------------------------


@handles(ApiKey.SHARE_GROUP_DESCRIBE)
async def handle_share_group_describe(
    ctx: RequestContext, req: m.ShareGroupDescribeRequest
) -> m.ShareGroupDescribeResponse:
    service = group_service(ctx)
    ids = common.topic_ids(ctx)
    groups = common.described_groups(
        ctx,
        req["group_ids"],
        lambda group_id: share_group_service.share_group(service, group_id),
        lambda group, operations: _described(group, ids, operations),
        _described_error,
        bool(req.get("include_authorized_operations")),
    )
    return {"throttle_time_ms": 0, "groups": groups}


def _described(
    group: ShareGroup, ids: dict[str, bytes], operations: int
) -> m.ShareGroupDescribeResponseDescribedGroup:
    return {
        "error_code": 0,
        "error_message": None,
        "group_id": group.group_id,
        "group_state": group.state,
        "group_epoch": group.group_epoch,
        "assignment_epoch": group.assignment_epoch,
        "assignor_name": ASSIGNOR_NAME,
        "members": [
            {
                "member_id": member.member_id,
                "rack_id": member.rack_id,
                "member_epoch": member.member_epoch,
                "client_id": member.client_id,
                "client_host": member.client_host,
                "subscribed_topic_names": list(member.subscribed_topic_names),
                "assignment": common.described_assignment(member.assignment, ids),
            }
            for member in group.members.values()
        ],
        "authorized_operations": operations,
    }


def _described_error(group_id: str, code: ErrorCode) -> m.ShareGroupDescribeResponseDescribedGroup:
    return common.described_error(m.ShareGroupDescribeResponseDescribedGroup, group_id, code)
