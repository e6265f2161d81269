"""KIP-848 consumer groups: ConsumerGroupHeartbeat and ConsumerGroupDescribe.

The handlers translate between the wire and the coordinator's typed requests and results: topic ids
on the wire, topic names in the coordinator (a partition of a topic id this broker does not know is
dropped from what the member reports owning; an assigned topic without an id is not sent). Every
decision is the coordinator's (`strom.broker.coordinators.consumer_group_service`,
`strom.coordinator.consumer`).
Authorization as Kafka's: READ on the group for the heartbeat, DESCRIBE for describe; a group another
broker coordinates gets NOT_COORDINATOR, one still loading COORDINATOR_LOAD_IN_PROGRESS.
"""

from __future__ import annotations

from strom.broker.coordinators import consumer_group_service
from strom.broker.handlers.authz import Op
from strom.broker.handlers.base import RequestContext, handles
from strom.broker.handlers.group_common import (
    described_assignment,
    described_error,
    described_groups,
    heartbeat_answer,
    heartbeat_error,
    topic_ids,
    wire_assignment,
)
from strom.broker.handlers.groups import group_refusal, group_service
from strom.coordinator.consumer import assignors
from strom.coordinator.consumer.heartbeat import HeartbeatRequest
from strom.coordinator.consumer.model import ConsumerGroup
from strom.protocol import messages as m
from strom.protocol.api import ApiKey
from strom.protocol.errors import ErrorCode


@handles(ApiKey.CONSUMER_GROUP_HEARTBEAT)
async def handle_consumer_group_heartbeat(
    ctx: RequestContext, req: m.ConsumerGroupHeartbeatRequest
) -> m.ConsumerGroupHeartbeatResponse:
    group_id = req["group_id"]
    service = group_service(ctx)
    refused = group_refusal(ctx, group_id, Op.READ)
    if refused is not None:
        return heartbeat_error(m.ConsumerGroupHeartbeatResponse, refused, None)
    ids = topic_ids(ctx)
    names = {topic_id: name for name, topic_id in ids.items()}
    owned: tuple[tuple[str, int], ...] | None = None
    if (reported := req.get("topic_partitions")) is not None:
        owned = tuple(
            (names[tp["topic_id"]], int(p))
            for tp in reported
            if tp["topic_id"] in names
            for p in tp["partitions"]
        )
    topic_names = req.get("subscribed_topic_names")
    request = HeartbeatRequest(
        group_id=group_id,
        member_id=req["member_id"] or "",
        member_epoch=int(req["member_epoch"]),
        instance_id=req.get("instance_id"),
        rack_id=req.get("rack_id"),
        rebalance_timeout_ms=int(req.get("rebalance_timeout_ms", -1)),
        subscribed_topic_names=None if topic_names is None else tuple(topic_names),
        subscribed_topic_regex=req.get("subscribed_topic_regex"),
        server_assignor=req.get("server_assignor"),
        owned=owned,
        client_id=ctx.client_id or "",
        client_host=f"/{ctx.client_host}",
    )
    outcome = await consumer_group_service.heartbeat(service, request)
    if outcome.error is not ErrorCode.NONE:
        return heartbeat_error(m.ConsumerGroupHeartbeatResponse, outcome.error, outcome.message)
    assignment: m.ConsumerGroupHeartbeatResponseAssignment | None = None
    if outcome.assignment is not None:
        assignment = {"topic_partitions": wire_assignment(outcome.assignment, ids)}
    interval_ms = service.consumer_heartbeat_interval_of(group_id)
    return heartbeat_answer(
        m.ConsumerGroupHeartbeatResponse, outcome.member_id, outcome.member_epoch, interval_ms, assignment
    )


# --- ConsumerGroupDescribe -----------------------------------------------------------------------


@handles(ApiKey.CONSUMER_GROUP_DESCRIBE)
async def handle_consumer_group_describe(
    ctx: RequestContext, req: m.ConsumerGroupDescribeRequest
) -> m.ConsumerGroupDescribeResponse:
    service = group_service(ctx)
    ids = topic_ids(ctx)
    configured = service.consumer_config.assignors

    def describe(group: ConsumerGroup, operations: int) -> m.ConsumerGroupDescribeResponseDescribedGroup:
        return _described(group, ids, configured, ctx.api_version, operations)

    groups = described_groups(
        ctx,
        req["group_ids"],
        service.consumer_group,
        describe,
        _described_error,
        bool(req.get("include_authorized_operations")),
    )
    return {"throttle_time_ms": 0, "groups": groups}


CLASSIC_MEMBER_TYPE = 0  # a member served through JoinGroup/SyncGroup (online migration)
CONSUMER_MEMBER_TYPE = 1


def _described(
    group: ConsumerGroup, ids: dict[str, bytes], configured: tuple[str, ...], version: int, operations: int
) -> m.ConsumerGroupDescribeResponseDescribedGroup:
    members: list[m.ConsumerGroupDescribeResponseMember] = []
    for member in group.members.values():
        entry: m.ConsumerGroupDescribeResponseMember = {
            "member_id": member.member_id,
            "instance_id": member.instance_id,
            "rack_id": member.rack_id,
            "member_epoch": member.member_epoch,
            "client_id": member.client_id,
            "client_host": member.client_host,
            "subscribed_topic_names": list(member.subscribed_topic_names),
            "subscribed_topic_regex": member.subscribed_topic_regex,
            "assignment": described_assignment(member.assigned, ids),
            "target_assignment": described_assignment(group.target.get(member.member_id, {}), ids),
        }
        if version >= 1:
            classic = member.uses_classic_protocol
            entry["member_type"] = CLASSIC_MEMBER_TYPE if classic else CONSUMER_MEMBER_TYPE
        members.append(entry)
    assignor = assignors.choose(list(configured), [m.server_assignor for m in group.members.values()])
    return {
        "error_code": 0,
        "error_message": None,
        "group_id": group.group_id,
        "group_state": group.state.value,
        "group_epoch": group.group_epoch,
        "assignment_epoch": group.assignment_epoch,
        "assignor_name": assignor,
        "members": members,
        "authorized_operations": operations,
    }


def _described_error(group_id: str, code: ErrorCode) -> m.ConsumerGroupDescribeResponseDescribedGroup:
    return described_error(m.ConsumerGroupDescribeResponseDescribedGroup, group_id, code)
