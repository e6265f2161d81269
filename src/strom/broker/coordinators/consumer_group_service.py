"""Consumer groups (KIP-848) on the group coordinator's runtime: heartbeats, describe, list, commits.

A consumer group lives in its `__consumer_offsets` partition's `GroupShard`, in that shard's
`ConsumerGroupShard` (consumer_group_shard.py), next to the classic groups and the committed offsets of
the same partition. This module is what the handlers call:

* `heartbeat`: one ConsumerGroupHeartbeat as a write of the coordinator runtime: the pure decision
  (`strom.coordinator.consumer.heartbeat`) on the group as replayed, its records appended as one batch
  and replayed, the member's timers re-armed, and the answer given once the ISR has the records (a
  failed write maps as Kafka's coordinator maps it: NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE);
`GroupService` itself finds the groups (`consumer_group`, `consumer_groups`) and wires OffsetCommit's
member-epoch rule (`strom.coordinator.consumer.model.commit_error`), and hands the classic APIs of a
consumer group's classic members to group_migration.py.

Online migration (group_migration.py): a heartbeat joining a classic group with members converts it
(`group.consumer.migration.policy` `upgrade` or `bidirectional`; GROUP_ID_NOT_FOUND otherwise, and for
any other heartbeat), in the same batch as the join; a member leaving that leaves only classic members
behind converts the group back (`downgrade` or `bidirectional`). An empty group converts offline, as
Kafka converts it whatever the policy: a heartbeat for an empty classic group makes the consumer group of
that id (the classic entry keeps only its committed offsets, which the consumer group goes on from),
and a JoinGroup for an empty consumer group deletes it (group_service.py) and makes the classic group.
"""

from __future__ import annotations

import logging

from strom.broker.coordinators import group_migration
from strom.broker.coordinators.group_service import GroupService, GroupShard
from strom.broker.coordinators.share_group_service import type_refusal
from strom.coordinator.consumer.heartbeat import HeartbeatOutcome, HeartbeatRequest, Record
from strom.coordinator.consumer.heartbeat import heartbeat as decide
from strom.coordinator.consumer.model import JOIN_EPOCH, ConsumerMember
from strom.coordinator.group_types import GroupType
from strom.coordinator_runtime import CoordinatorError, CoordinatorResult
from strom.protocol.errors import ErrorCode

log = logging.getLogger(__name__)


def _refused(service: GroupService, group_id: str) -> HeartbeatOutcome | None:
    """A share group holds the id: refused (`strom.coordinator.group_types`)."""
    refused = type_refusal(service, group_id, GroupType.CONSUMER)
    return None if refused is None else HeartbeatOutcome(error=refused.error, message=refused.message)


async def heartbeat(service: GroupService, req: HeartbeatRequest) -> HeartbeatOutcome:
    refused = _refused(service, req.group_id)
    if refused is not None:
        return refused
    classic = service.coordinator.store.get(req.group_id)
    if classic is not None and classic.members and req.member_epoch != JOIN_EPOCH:
        return HeartbeatOutcome(
            error=ErrorCode.GROUP_ID_NOT_FOUND, message=f"Group {req.group_id} is not a consumer group."
        )
    service.ensure_offsets_topic()
    partition = service.coordinator.partition_for(req.group_id)

    def operation(shard: GroupShard) -> CoordinatorResult[HeartbeatOutcome]:
        refused = _refused(service, req.group_id)  # a share group's first join may have won the id
        if refused is not None:
            return CoordinatorResult([], refused)
        consumer = shard.consumer
        group = consumer.groups.get(req.group_id)
        converted: list[Record] = []
        live_classic = service.coordinator.store.get(req.group_id)
        if live_classic is not None and live_classic.members:
            # Online upgrade: the classic group becomes a consumer group, then this member joins it.
            upgraded = group_migration.upgrade(service, live_classic, consumer.topics())
            if isinstance(upgraded, ErrorCode):
                message = f"Group {req.group_id} is not a consumer group."
                return CoordinatorResult([], HeartbeatOutcome(error=upgraded, message=message))
            converted = upgraded
            group = group_migration.replayed(req.group_id, converted)
            for member in group.members.values():
                consumer.arm_session(
                    req.group_id, member.member_id, consumer.session_timeout_ms(req.group_id, member)
                )
        old: ConsumerMember | None = None
        if group is not None:
            old = group.members.get(req.member_id)
            if old is None and req.instance_id is not None:
                old = group.static_member(req.instance_id)
        outcome = decide(group, req, consumer.topics(), consumer.config, consumer.partition_racks)
        done = None
        if outcome.error is ErrorCode.NONE and group is not None and outcome.removed:
            # A member leaving may leave only classic members: the downgrade, if the policy allows.
            outcome.records, done = consumer.removal(group, outcome.removed[0])
        if outcome.error is ErrorCode.NONE:
            consumer.after_heartbeat(req.group_id, old, outcome)
        elif converted:
            return CoordinatorResult(converted, outcome)
        return CoordinatorResult(converted + outcome.records, outcome, on_complete=done)

    try:
        return await service.runtime.write(partition, operation, service.commit_timeout_ms)
    except CoordinatorError as exc:
        log.warning("consumer group %s: heartbeat not stored: %s", req.group_id, exc.cause.name)
        return HeartbeatOutcome(error=group_migration.write_error(exc), message=str(exc))
