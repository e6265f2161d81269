"""Consumer groups (KIP-848) on the group coordinator's runtime: heartbeats, describe, list, commits.

A consumer group lives in its `__consumer_offsets` partition's `GroupShard`, in that shard's
`ConsumerGroupShard` (consumer_group_shard.py), next to the classic groups and the committed offsets of
the same partition. This module is what the handlers call:

* `heartbeat`: one ConsumerGroupHeartbeat as a write of the coordinator runtime: the pure decision
  (`strom.coordinator.consumer.heartbeat`) on the group as replayed, its records appended as one batch
  and replayed, the member's timers re-armed, and the answer given once the ISR has the records (a
  failed write maps as Kafka's coordinator maps it: NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE);
`GroupService` itself finds the groups (`consumer_group`, `consumer_groups`) and wires OffsetCommit's
member-epoch rule (`strom.coordinator.consumer.model.commit_error`), and refuses a JoinGroup for a
consumer group's id.

A classic group with members and a consumer group cannot share an id: a heartbeat for a live classic
group gets GROUP_ID_NOT_FOUND, and a JoinGroup for a consumer group with members
INCONSISTENT_GROUP_PROTOCOL (Kafka's answers with `group.consumer.migration.policy=disabled`; the online
conversions of the other policies are not implemented). An empty group converts offline, as Kafka
converts it whatever the policy: a heartbeat for an empty classic group makes the consumer group of
that id (the classic entry keeps only its committed offsets, which the consumer group goes on from),
and a JoinGroup for an empty consumer group deletes it (group_service.py) and makes the classic group.
"""

from __future__ import annotations

import logging

from strom.broker.coordinators.group_service import _COORDINATOR_ERRORS, GroupService, GroupShard
from strom.coordinator.consumer.heartbeat import HeartbeatOutcome, HeartbeatRequest
from strom.coordinator.consumer.heartbeat import heartbeat as decide
from strom.coordinator.consumer.model import ConsumerMember
from strom.coordinator_runtime import CoordinatorError, CoordinatorResult
from strom.protocol.errors import ErrorCode

log = logging.getLogger(__name__)


async def heartbeat(service: GroupService, req: HeartbeatRequest) -> HeartbeatOutcome:
    classic = service.coordinator.store.get(req.group_id)
    if classic is not None and classic.members:
        return HeartbeatOutcome(
            error=ErrorCode.GROUP_ID_NOT_FOUND, message=f"Group {req.group_id} is not a consumer group."
        )
    service.ensure_offsets_topic()
    partition = service.coordinator.partition_for(req.group_id)

    def operation(shard: GroupShard) -> CoordinatorResult[HeartbeatOutcome]:
        consumer = shard.consumer
        group = consumer.groups.get(req.group_id)
        old: ConsumerMember | None = None
        if group is not None:
            old = group.members.get(req.member_id)
            if old is None and req.instance_id is not None:
                old = group.static_member(req.instance_id)
        outcome = decide(group, req, consumer.topics(), consumer.config)
        if outcome.error is ErrorCode.NONE:
            consumer.after_heartbeat(req.group_id, old, outcome)
        return CoordinatorResult(outcome.records, outcome)

    try:
        return await service.runtime.write(partition, operation, service.commit_timeout_ms)
    except CoordinatorError as exc:
        log.warning("consumer group %s: heartbeat not stored: %s", req.group_id, exc.cause.name)
        code = _COORDINATOR_ERRORS.get(exc.code, exc.code)
        if code not in (ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS):
            code = ErrorCode.COORDINATOR_NOT_AVAILABLE
        return HeartbeatOutcome(error=code, message=str(exc))
