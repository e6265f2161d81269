"""Share groups (KIP-932) on the group coordinator's runtime: what the handlers call.

The groups live in `ShareGroupShard`s (share_group_shard.py), one per `__consumer_offsets` partition
this broker leads. `heartbeat` runs one ShareGroupHeartbeat as an operation of the coordinator runtime
that writes the membership's records (ordered with the shard's other work; answered once they are
durable; refused while the shard loads or after it moved: NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS,
other failures COORDINATOR_NOT_AVAILABLE).
A share group and a classic or consumer group cannot share an id (`strom.coordinator.group_types`
decides, `group_type` finds which type holds an id): a share heartbeat for an id that a group of another
type holds answers GROUP_ID_NOT_FOUND, and so do a ConsumerGroupHeartbeat (consumer_group_service.py)
and a JoinGroup (group_migration.py, INCONSISTENT_GROUP_PROTOCOL) for a share group's id. The heartbeats
decide again inside their write, against the shard's groups, so two first joins of different types
racing for one id cannot both make a group.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from strom.broker.coordinators.group_service import GroupService, GroupShard
from strom.broker.coordinators.share_group_shard import ShareGroupShard, ShareHeartbeat
from strom.coordinator.group_types import GroupType, Refusal, refusal
from strom.coordinator.share.membership import HeartbeatAnswer, ShareGroup
from strom.coordinator_runtime import CoordinatorError, CoordinatorResult
from strom.protocol.errors import ErrorCode


def group_type(service: GroupService, group_id: str) -> GroupType | None:
    """The type of the group holding that id on this broker: a share group (with members or Empty), a
    consumer group, a classic group with members; None when none does (a classic entry keeping only
    committed offsets converts, so it holds no type here)."""
    if share_group(service, group_id) is not None:
        return GroupType.SHARE
    if service.consumer_group(group_id) is not None:
        return GroupType.CONSUMER
    classic = service.coordinator.store.get(group_id)
    return GroupType.CLASSIC if classic is not None and classic.members else None


def type_refusal(service: GroupService, group_id: str, asked: GroupType) -> Refusal | None:
    """Why a request of type `asked` may not use that id here: a group of another type holds it."""
    return refusal(group_id, asked, group_type(service, group_id))


def _refused(service: GroupService, group_id: str) -> HeartbeatAnswer | None:
    refused = type_refusal(service, group_id, GroupType.SHARE)
    return None if refused is None else HeartbeatAnswer(refused.error, refused.message)


async def heartbeat(service: GroupService, req: ShareHeartbeat) -> HeartbeatAnswer:
    refused = _refused(service, req.group_id)
    if refused is not None:
        return refused
    service.ensure_offsets_topic()
    partition = service.coordinator.partition_for(req.group_id)

    def operation(shard: GroupShard) -> CoordinatorResult[HeartbeatAnswer]:
        refused = _refused(service, req.group_id)  # a first join of another type may have won the id
        if refused is not None:
            return CoordinatorResult([], refused)
        return shard.share.heartbeat(req)

    try:
        return await service.runtime.write(partition, operation, service.commit_timeout_ms)
    except CoordinatorError as exc:
        return HeartbeatAnswer(_retriable(exc.code), str(exc))


def _retriable(code: ErrorCode) -> ErrorCode:
    """A failed write's answer: the runtime's refusal, any other failure COORDINATOR_NOT_AVAILABLE."""
    if code in (ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS):
        return code
    return ErrorCode.COORDINATOR_NOT_AVAILABLE


async def delete_group(service: GroupService, group_id: str) -> ErrorCode:
    """DeleteGroups' last step for a share group kept Empty: its records get tombstones (the caller
    deleted its share-partition states first, as Kafka does)."""
    partition = service.coordinator.partition_for(group_id)

    def operation(shard: GroupShard) -> CoordinatorResult[ErrorCode]:
        return shard.share.delete(group_id)

    try:
        return await service.runtime.write(partition, operation, service.commit_timeout_ms)
    except CoordinatorError as exc:
        return _retriable(exc.code)


async def forget_topics(service: GroupService, group_id: str, topics: list[str]) -> ErrorCode:
    """After DeleteShareGroupOffsets: the group's initialized share-partitions lose these topics."""
    partition = service.coordinator.partition_for(group_id)

    def operation(shard: GroupShard) -> CoordinatorResult[None]:
        return shard.share.forget(group_id, topics)

    try:
        await service.runtime.write(partition, operation, service.commit_timeout_ms)
    except CoordinatorError as exc:
        return _retriable(exc.code)
    return ErrorCode.NONE


def share_group(service: GroupService, group_id: str) -> ShareGroup | None:
    """The share group of that id, if this broker coordinates it (with members or Empty)."""
    shard = service.runtime.active_shards().get(service.coordinator.partition_for(group_id))
    return None if shard is None else shard.share.groups.get(group_id)


def share_groups(service: GroupService) -> list[ShareGroup]:
    """Every share group this broker coordinates."""
    return [g for shard in service.runtime.active_shards().values() for g in shard.share.groups.values()]


@asynccontextmanager
async def held_empty(service: GroupService, group_id: str) -> AsyncIterator[ErrorCode]:
    """An admin change of the share group's stored state runs inside: yields NONE once the group is
    checked empty and held so (`ShareGroupShard.hold`, one operation of the coordinator runtime; no
    member joins until the block ends), else the refusal (`admin_refusal`'s, or the runtime's)."""
    partition = service.coordinator.partition_for(group_id)
    held: list[ShareGroupShard] = []

    def operation(shard: GroupShard) -> CoordinatorResult[ErrorCode]:
        result = shard.share.hold(group_id, admin_refusal(service, group_id))
        if result.response is ErrorCode.NONE:
            held.append(shard.share)
        return result

    try:
        code = await service.runtime.write(partition, operation, service.commit_timeout_ms)
    except CoordinatorError as exc:
        code = _retriable(exc.code)  # the hold, if taken, is released below
    try:
        yield code
    finally:
        for shard in held:
            shard.release(group_id)


def admin_refusal(service: GroupService, group_id: str) -> ErrorCode | None:
    """Why an admin may not change the share group's offsets: a classic or consumer group holds the id
    (GROUP_ID_NOT_FOUND: it is not a share group), or the share group has members (NON_EMPTY_GROUP)."""
    if service.coordinator.store.get(group_id) is not None or service.consumer_group(group_id) is not None:
        return ErrorCode.GROUP_ID_NOT_FOUND
    found = share_group(service, group_id)
    return ErrorCode.NON_EMPTY_GROUP if found is not None and found.members else None
