"""Online migration between classic and consumer groups (KIP-848) on the coordinator runtime.

The decisions are `strom.coordinator.consumer.classic`'s; this module runs them where the groups live:

* `classic_join`, `classic_sync`, `classic_heartbeat`, `classic_leave`: the classic APIs for a consumer
  group with members (None when the id is not such a group: the classic coordinator answers). A join or
  a leave is a write of the runtime (its records appended, replayed, answered once the ISR has them); a
  sync or a heartbeat writes nothing and re-arms the member's session (its JoinGroup's session timeout);
* `upgrade`: the records that convert a classic group with members, prepended to the joining
  member's heartbeat in the same batch; the classic group's parked JoinGroup and SyncGroup requests are
  answered REBALANCE_IN_PROGRESS (their members rejoin the consumer group) and its join timer cancelled;
* a member leaving or removed, when only classic members remain and the policy allows it, is the
  downgrade (`ConsumerGroupShard.removal`); `GroupService.after_downgrade` then arms the classic
  members' sessions and starts the classic rebalance in which they rejoin.

The handlers of the classic APIs call `join_group`, `sync_group`, `heartbeat`, `leave_group` and
`describe_group` here, which fall back to the classic coordinator for any other group. A JoinGroup for
an id that a share group holds is refused (INCONSISTENT_GROUP_PROTOCOL, `strom.coordinator.group_types`)
before either: no classic group of that id is made.

Call only from the broker's event loop.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping

from strom.broker.coordinators.group_service import _COORDINATOR_ERRORS, GroupService, GroupShard
from strom.broker.coordinators.share_group_service import type_refusal
from strom.coordinator.consumer import assignors, classic
from strom.coordinator.consumer.heartbeat import HeartbeatOutcome, Record, new_member_id
from strom.coordinator.consumer.heartbeat import heartbeat as decide
from strom.coordinator.consumer.model import ConsumerGroup, ConsumerMember
from strom.coordinator.consumer.records import CONSUMER_KEY_VERSIONS, decode_key, decode_value, key_version
from strom.coordinator.group import CONSUMER_PROTOCOL_TYPE, Group
from strom.coordinator.group_types import GroupType
from strom.coordinator.messages import (
    GroupSummary,
    JoinGroupRequest,
    JoinResult,
    SyncGroupRequest,
    SyncResult,
)
from strom.coordinator_runtime import CoordinatorError, CoordinatorResult
from strom.protocol.errors import ErrorCode

log = logging.getLogger(__name__)

Operation = Callable[[GroupShard], CoordinatorResult[HeartbeatOutcome]]


def _consumer_group(service: GroupService, group_id: str) -> ConsumerGroup | None:
    group = service.consumer_group(group_id)
    return group if group is not None and group.members else None


def _shard(service: GroupService, group_id: str) -> GroupShard | None:
    return service.runtime.active_shards().get(service.coordinator.partition_for(group_id))


# --- the classic APIs: a consumer group's classic members, else the classic coordinator --------


async def join_group(service: GroupService, req: JoinGroupRequest) -> JoinResult:
    refused = type_refusal(service, req.group_id, GroupType.CLASSIC)
    if refused is not None:
        log.info("JoinGroup refused: %s", refused.message)
        return JoinResult(refused.error)  # no member id, as Kafka answers it
    joined = await classic_join(service, req)
    return joined if joined is not None else await service.join_group(req)


async def sync_group(service: GroupService, req: SyncGroupRequest) -> SyncResult:
    synced = classic_sync(service, req)
    return synced if synced is not None else await service.sync_group(req)


def heartbeat(
    service: GroupService, group_id: str, generation_id: int, member_id: str, instance_id: str | None
) -> ErrorCode:
    found = classic_heartbeat(service, group_id, generation_id, member_id, instance_id)
    if found is not None:
        return found
    return service.coordinator.heartbeat(group_id, generation_id, member_id, instance_id)


async def leave_group(
    service: GroupService, group_id: str, members: list[tuple[str, str | None]]
) -> list[ErrorCode]:
    left = await classic_leave(service, group_id, members)
    return left if left is not None else service.coordinator.leave_group(group_id, members)


def describe_group(service: GroupService, group_id: str) -> GroupSummary:
    """DescribeGroups: a consumer group as Kafka describes one to the classic API, else the classic
    group (or Dead)."""
    group = service.consumer_group(group_id)
    if group is None:
        return service.coordinator.describe_group(group_id)
    config = service.consumer_config
    assignor = assignors.choose(list(config.assignors), [m.server_assignor for m in group.members.values()])
    return classic.described(group, assignor)


# --- classic members of a consumer group -------------------------------------------------------


async def classic_join(service: GroupService, req: JoinGroupRequest) -> JoinResult | None:
    group = _consumer_group(service, req.group_id)
    if group is None:
        return None
    names = [name for name, _ in req.protocols]
    if not classic.supports_classic_protocols(group, req.protocol_type, names):
        return JoinResult(ErrorCode.INCONSISTENT_GROUP_PROTOCOL, req.member_id)
    member_id = req.member_id
    if not member_id:
        member_id = new_member_id()
        if req.require_known_member_id and req.group_instance_id is None:
            # KIP-394, as for classic groups; the id is not kept: a join naming an id it does not
            # know makes a new member of that id (as Kafka's consumer groups do).
            return JoinResult(ErrorCode.MEMBER_ID_REQUIRED, member_id)
    try:
        request = classic.join_request(
            group,
            member_id,
            req.group_instance_id,
            req.protocols,
            req.session_timeout_ms,
            req.rebalance_timeout_ms,
            req.client_id,
            req.client_host,
        )
    except ValueError as exc:
        log.info("consumer group %s: JoinGroup of %s refused: %s", req.group_id, member_id, exc)
        return JoinResult(ErrorCode.INCONSISTENT_GROUP_PROTOCOL, member_id)

    def operation(shard: GroupShard) -> CoordinatorResult[HeartbeatOutcome]:
        consumer = shard.consumer
        current = consumer.groups.get(req.group_id)
        old = None if current is None else current.members.get(member_id)
        outcome = decide(current, request, consumer.topics(), consumer.config, consumer.partition_racks)
        if outcome.error is ErrorCode.NONE:
            consumer.after_heartbeat(req.group_id, old, outcome)
        return CoordinatorResult(outcome.records, outcome)

    outcome = await _write(service, req.group_id, operation)
    if outcome.error is not ErrorCode.NONE or outcome.member is None:
        return JoinResult(outcome.error, member_id)
    return JoinResult(
        ErrorCode.NONE,
        member_id=outcome.member.member_id,
        generation_id=outcome.member.member_epoch,
        protocol_type=CONSUMER_PROTOCOL_TYPE,
        protocol_name=req.protocols[0][0],
        leader="",  # the broker assigns: no member leads
    )


def classic_sync(service: GroupService, req: SyncGroupRequest) -> SyncResult | None:
    group = _consumer_group(service, req.group_id)
    if group is None:
        return None
    found = classic.classic_member(group, req.member_id, req.group_instance_id, req.generation_id)
    if isinstance(found, ErrorCode):
        return SyncResult(found)
    error = classic.sync_error(group, found, req.protocol_type, req.protocol_name)
    if error is not ErrorCode.NONE:
        return SyncResult(error)
    _keep_alive(service, group, found)
    assert found.classic is not None
    name = req.protocol_name or found.classic.protocols[0][0]
    return SyncResult(ErrorCode.NONE, classic.encode_assignment(found.assigned), CONSUMER_PROTOCOL_TYPE, name)


def classic_heartbeat(
    service: GroupService, group_id: str, generation_id: int, member_id: str, instance_id: str | None
) -> ErrorCode | None:
    group = _consumer_group(service, group_id)
    if group is None:
        return None
    found = classic.classic_member(group, member_id, instance_id, generation_id)
    if isinstance(found, ErrorCode):
        return found
    _keep_alive(service, group, found)
    return classic.heartbeat_error(group, found)


async def classic_leave(
    service: GroupService, group_id: str, members: list[tuple[str, str | None]]
) -> list[ErrorCode] | None:
    group = _consumer_group(service, group_id)
    if group is None:
        return None
    codes: list[ErrorCode] = []
    for member_id, instance_id in members:
        current = _consumer_group(service, group_id)
        member = None if current is None else current.members.get(member_id)
        if member is None and current is not None and instance_id is not None:
            member = current.static_member(instance_id)
        if current is None or member is None or member.classic is None:
            codes.append(ErrorCode.UNKNOWN_MEMBER_ID)
            continue
        codes.append(await _remove(service, group_id, member.member_id))
    return codes


async def _remove(service: GroupService, group_id: str, member_id: str) -> ErrorCode:
    def operation(shard: GroupShard) -> CoordinatorResult[ErrorCode]:
        group = shard.consumer.groups.get(group_id)
        if group is None or member_id not in group.members:
            return CoordinatorResult([], ErrorCode.UNKNOWN_MEMBER_ID)
        shard.consumer.forget_timers(group_id, member_id)
        records, done = shard.consumer.removal(group, member_id)
        log.info("consumer group %s: classic member %s left", group_id, member_id)
        return CoordinatorResult(records, ErrorCode.NONE, on_complete=done)

    try:
        return await service.runtime.write(
            service.coordinator.partition_for(group_id), operation, service.commit_timeout_ms
        )
    except CoordinatorError as exc:
        return write_error(exc)


def _keep_alive(service: GroupService, group: ConsumerGroup, member: ConsumerMember) -> None:
    shard = _shard(service, group.group_id)
    if shard is not None:
        timeout = shard.consumer.session_timeout_ms(group.group_id, member)
        shard.consumer.arm_session(group.group_id, member.member_id, timeout)


# --- conversions -------------------------------------------------------------------------------


def upgrade(service: GroupService, group: Group, topics: Mapping[str, int]) -> list[Record] | ErrorCode:
    """The conversion of a classic group with members (see the module docstring), or why not."""
    config = service.consumer_config
    if not classic.upgrade_enabled(config.migration_policy) or len(group.members) > config.max_size:
        return ErrorCode.GROUP_ID_NOT_FOUND
    try:
        records = classic.upgrade_records(group, topics)
    except ValueError as exc:
        log.info("classic group %s not converted: %s", group.group_id, exc)
        return ErrorCode.GROUP_ID_NOT_FOUND
    service.coordinator.membership.release_members(group, ErrorCode.REBALANCE_IN_PROGRESS)
    log.info("classic group %s is now a consumer group (%d members)", group.group_id, len(group.members))
    return records


def replayed(group_id: str, records: list[Record]) -> ConsumerGroup:
    """The consumer group that ``records`` describe (the classic ones among them skipped)."""
    group = ConsumerGroup(group_id)
    for key, value in records:
        if key_version(key) in CONSUMER_KEY_VERSIONS:
            decoded = decode_key(key)
            group.replay(decoded, None if value is None else decode_value(decoded, value))
    return group


async def _write(service: GroupService, group_id: str, operation: Operation) -> HeartbeatOutcome:
    try:
        return await service.runtime.write(
            service.coordinator.partition_for(group_id), operation, service.commit_timeout_ms
        )
    except CoordinatorError as exc:
        log.warning("consumer group %s: classic join not stored: %s", group_id, exc.cause.name)
        return HeartbeatOutcome(error=write_error(exc), message=str(exc))


def write_error(exc: CoordinatorError) -> ErrorCode:
    """What a member hears when its heartbeat's or join's records were not stored: NOT_COORDINATOR and
    COORDINATOR_LOAD_IN_PROGRESS as they are, any other failure COORDINATOR_NOT_AVAILABLE."""
    code = _COORDINATOR_ERRORS.get(exc.code, exc.code)
    if code not in (ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS):
        code = ErrorCode.COORDINATOR_NOT_AVAILABLE
    return code
