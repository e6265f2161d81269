"""One `__consumer_offsets` partition's consumer groups (KIP-848): replay, operations, session timers.

`GroupShard` (group_service.py) hands every consumer-group record of its partition (key versions 3-8,
`strom.coordinator.consumer.records`) to its `ConsumerGroupShard`, while loading and after each write, so
the groups here are always what the log says. Operations run as writes of the coordinator runtime: they
read the groups, decide with `strom.coordinator.consumer.heartbeat` (pure) and return the records; the
runtime appends them, replays them here, and answers once the ISR has them.

Timers (on the runtime's shard timer, so they die with the shard):

* **session** (`group.consumer.session.timeout.ms`), re-armed by every heartbeat of the member: when it
  fires the member is removed (fenced) and the group epoch bumped, so the others get its partitions;
* **revocation** (the member's rebalance timeout), armed when a member must revoke partitions: if it
  still has not revoked them (same member epoch, still UNREVOKED_PARTITIONS) when it fires, the member
  is removed, so its partitions can move on.

After a load every member gets a fresh session timer: a member that no longer heartbeats to the new
coordinator is removed one session timeout later, as Kafka does.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping

from strom.coordinator.consumer.heartbeat import ConsumerGroupConfig, HeartbeatOutcome, removal_records
from strom.coordinator.consumer.model import ConsumerGroup, ConsumerMember, MemberState
from strom.coordinator.consumer.records import decode_key, decode_value
from strom.coordinator.records import RecordFormatError
from strom.coordinator_runtime import CoordinatorResult, ShardContext

log = logging.getLogger(__name__)

TopicsView = Callable[[], Mapping[str, int]]  # every topic -> its partition count, now


def _session_key(group_id: str, member_id: str) -> str:
    return f"consumer-session {group_id} {member_id}"


def _revocation_key(group_id: str, member_id: str) -> str:
    return f"consumer-revocation {group_id} {member_id}"


class ConsumerGroupShard:
    def __init__(self, context: ShardContext, config: ConsumerGroupConfig, topics: TopicsView) -> None:
        self.context = context
        self.config = config
        self.topics = topics
        self.groups: dict[str, ConsumerGroup] = {}

    # --- replay --------------------------------------------------------------------------------
    def replay(self, key: bytes, value: bytes | None) -> None:
        try:
            decoded = decode_key(key)
            body = None if value is None else decode_value(decoded, value)
        except RecordFormatError as exc:
            log.warning("skipping unreadable consumer-group record: %s", exc)
            return
        group = self.groups.get(decoded.group)
        if group is None:
            if body is None:
                return
            group = self.groups[decoded.group] = ConsumerGroup(decoded.group)
        group.replay(decoded, body)
        if group.deleted:
            del self.groups[decoded.group]

    def on_loaded(self) -> None:
        for group in self.groups.values():
            for member in group.members.values():
                self.arm_session(group.group_id, member.member_id)

    def on_unloaded(self) -> None:
        self.groups.clear()

    # --- timers --------------------------------------------------------------------------------
    def arm_session(self, group_id: str, member_id: str) -> None:
        self.context.timer.schedule(
            _session_key(group_id, member_id),
            self.config.session_timeout_ms,
            lambda: self._fence(group_id, member_id, None, "session timeout"),
        )

    def after_heartbeat(self, group_id: str, old: ConsumerMember | None, outcome: HeartbeatOutcome) -> None:
        """Re-arm or cancel the timers of the heartbeat's member (and of members it removed)."""
        timer = self.context.timer
        for member_id in outcome.removed:
            timer.cancel(_session_key(group_id, member_id))
            timer.cancel(_revocation_key(group_id, member_id))
        member = outcome.member
        if member is None:
            return
        if old is not None and old.member_id != member.member_id:
            # A static member's new incarnation replaced the old one.
            timer.cancel(_session_key(group_id, old.member_id))
            timer.cancel(_revocation_key(group_id, old.member_id))
        self.arm_session(group_id, member.member_id)
        revoking = member.state is MemberState.UNREVOKED_PARTITIONS
        if not revoking:
            timer.cancel(_revocation_key(group_id, member.member_id))
        elif old is None or old.state is not MemberState.UNREVOKED_PARTITIONS:
            epoch = member.member_epoch
            timer.schedule(
                _revocation_key(group_id, member.member_id),
                member.rebalance_timeout_ms,
                lambda: self._fence(group_id, member.member_id, epoch, "revocation timeout"),
            )

    def _fence(self, group_id: str, member_id: str, epoch: int | None, why: str) -> CoordinatorResult[object]:
        """Remove a member whose session (or revocation, at ``epoch``) ran out."""
        group = self.groups.get(group_id)
        member = None if group is None else group.members.get(member_id)
        if group is None or member is None:
            return CoordinatorResult([], None)
        if epoch is not None and (
            member.member_epoch != epoch or member.state is not MemberState.UNREVOKED_PARTITIONS
        ):
            return CoordinatorResult([], None)
        log.info("consumer group %s: member %s removed (%s)", group_id, member_id, why)
        self.context.timer.cancel(_session_key(group_id, member_id))
        self.context.timer.cancel(_revocation_key(group_id, member_id))
        return CoordinatorResult(removal_records(group, member_id, self.topics()), None)
