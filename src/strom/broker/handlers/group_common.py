"""What the handlers of the broker-assigned groups share: KIP-848 consumer groups
(consumer_groups.py) and KIP-932 share groups (share_groups.py).

Both groups' heartbeats answer an error the same way (no member id, epoch -1, no assignment), and
both describes walk the asked group ids the same way: DESCRIBE on the group (else
GROUP_AUTHORIZATION_FAILED), an empty id INVALID_GROUP_ID, a group this broker does not coordinate
NOT_COORDINATOR or COORDINATOR_LOAD_IN_PROGRESS, one it does not have GROUP_ID_NOT_FOUND, and the
group's authorized operations when asked for and ACLs are on.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TypeVar

from strom.broker.handlers.authz import Op, Res, authorized_operations
from strom.broker.handlers.base import RequestContext
from strom.broker.handlers.groups import group_refusal
from strom.protocol import messages as m
from strom.protocol.errors import ErrorCode

__all__ = ["NO_AUTHORIZED_OPERATIONS", "described_groups", "heartbeat_error"]

NO_AUTHORIZED_OPERATIONS = -(2**31)  # the wire's "not asked for"

Group = TypeVar("Group")
Described = TypeVar("Described")
Heartbeat = TypeVar("Heartbeat", m.ConsumerGroupHeartbeatResponse, m.ShareGroupHeartbeatResponse)


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
