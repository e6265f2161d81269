"""What the handlers of the broker-assigned groups share: KIP-848 consumer groups
(consumer_groups.py) and KIP-932 share groups (share_groups.py).

Both groups' heartbeats answer the same way (an error: no member id, epoch -1, no assignment; else
the member's id, epoch, heartbeat interval and its assignment by topic id, a topic without an id left
out), both describes show an assignment the same way (topic id, name and partitions) and walk the
asked group ids the same way: DESCRIBE on the group (else
GROUP_AUTHORIZATION_FAILED), an empty id INVALID_GROUP_ID, a group this broker does not coordinate
NOT_COORDINATOR or COORDINATOR_LOAD_IN_PROGRESS, one it does not have GROUP_ID_NOT_FOUND, and the
group's authorized operations when asked for and ACLs are on.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Set
from typing import Any, TypeVar

from strom.broker.handlers.authz import Op, Res, authorized_operations
from strom.broker.handlers.base import RequestContext
from strom.broker.handlers.groups import group_refusal
from strom.protocol import messages as m
from strom.protocol.errors import ErrorCode

__all__ = [
    "NO_AUTHORIZED_OPERATIONS",
    "described_assignment",
    "described_error",
    "described_groups",
    "heartbeat_answer",
    "heartbeat_error",
    "topic_ids",
    "wire_assignment",
]

NO_AUTHORIZED_OPERATIONS = -(2**31)  # the wire's "not asked for"

Group = TypeVar("Group")
Described = TypeVar("Described")
Heartbeat = TypeVar("Heartbeat", m.ConsumerGroupHeartbeatResponse, m.ShareGroupHeartbeatResponse)
DescribedGroup = TypeVar(
    "DescribedGroup",
    m.ConsumerGroupDescribeResponseDescribedGroup,
    m.ShareGroupDescribeResponseDescribedGroup,
)
Assignment = Mapping[str, Set[int]]  # topic name -> partitions


def topic_ids(ctx: RequestContext) -> dict[str, bytes]:
    """Every topic's id by name (the wire names topics by id, the coordinators by name)."""
    return {name: info.topic_id for name, info in ctx.ports.metadata.topics.items()}


def wire_assignment(
    assignment: Assignment, ids: Mapping[str, bytes]
) -> list[m.ConsumerGroupHeartbeatResponseTopicPartitions]:
    """A heartbeat's assigned partitions by topic id (a topic without an id is not sent)."""
    return [
        {"topic_id": ids[topic], "partitions": sorted(ps)}
        for topic, ps in sorted(assignment.items())
        if ps and topic in ids
    ]


def heartbeat_answer(
    kind: type[Heartbeat], member_id: str | None, member_epoch: int, interval_ms: int, assignment: Any
) -> Heartbeat:
    """An accepted heartbeat's answer (``kind``: the API's response type)."""
    return kind(
        throttle_time_ms=0,
        error_code=0,
        error_message=None,
        member_id=member_id,
        member_epoch=member_epoch,
        heartbeat_interval_ms=interval_ms,
        assignment=assignment,
    )


def heartbeat_error(kind: type[Heartbeat], code: ErrorCode, message: str | None) -> Heartbeat:
    """A refused heartbeat's answer (``kind``: the API's response type)."""
    return kind(
        throttle_time_ms=0,
        error_code=int(code),
        error_message=message,
        member_id=None,
        member_epoch=-1,
        heartbeat_interval_ms=0,
        assignment=None,
    )


def described_assignment(
    assignment: Assignment, ids: Mapping[str, bytes]
) -> m.ConsumerGroupDescribeResponseDescribedAssignment:
    """A describe's assignment: every topic with partitions, by id (zeros when it has none) and name."""
    return {
        "topic_partitions": [
            {"topic_id": ids.get(topic, bytes(16)), "topic_name": topic, "partitions": sorted(ps)}
            for topic, ps in sorted(assignment.items())
            if ps
        ]
    }


def described_error(kind: type[DescribedGroup], group_id: str, code: ErrorCode) -> DescribedGroup:
    """A describe's entry for a group refused with ``code`` (Dead when there is no such group)."""
    return kind(
        error_code=int(code),
        error_message=None,
        group_id=group_id,
        group_state="Dead" if code is ErrorCode.GROUP_ID_NOT_FOUND else "",
        group_epoch=0,
        assignment_epoch=0,
        assignor_name="",
        members=[],
        authorized_operations=NO_AUTHORIZED_OPERATIONS,
    )


def described_groups(
    ctx: RequestContext,
    group_ids: Iterable[str],
    find: Callable[[str], Group | None],
    describe: Callable[[Group, int], Described],
    refuse: Callable[[str, ErrorCode], Described],
    include_authorized_operations: bool,
) -> list[Described]:
    """Each asked group described (``describe(group, authorized operations)``) or refused
    (``refuse(group id, error)``), in the order asked."""
    out: list[Described] = []
    for group_id in group_ids:
        refused = group_refusal(ctx, group_id, Op.DESCRIBE)
        if not group_id:
            refused = ErrorCode.INVALID_GROUP_ID
        group = None if refused is not None else find(group_id)
        if group is None:
            out.append(refuse(group_id, refused if refused is not None else ErrorCode.GROUP_ID_NOT_FOUND))
            continue
        operations = NO_AUTHORIZED_OPERATIONS
        if ctx.ports.authorizer is not None and include_authorized_operations:
            operations = authorized_operations(ctx, Res.GROUP, group_id)
        out.append(describe(group, operations))
    return out
