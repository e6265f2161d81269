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

from strom._util.errors import ConfigError
from strom.broker.config import BrokerConfig
from strom.coordinator.consumer import assignors, classic
from strom.coordinator.consumer.heartbeat import ConsumerGroupConfig, HeartbeatOutcome
from strom.coordinator.consumer.model import ConsumerGroup, ConsumerMember, MemberState
from strom.coordinator.consumer.records import decode_key, decode_value
from strom.coordinator.records import RecordFormatError
from strom.coordinator_runtime import CoordinatorResult, ShardContext
from strom.protocol.errors import ErrorCode

log = logging.getLogger(__name__)

TopicsView = Callable[[], Mapping[str, int]]  # every topic -> its partition count, now
# Told the id of a group converted to a classic group once the conversion's records are applied.
Downgraded = Callable[[str], None]


def _session_key(group_id: str, member_id: str) -> str:
    return f"consumer-session {group_id} {member_id}"


def _revocation_key(group_id: str, member_id: str) -> str:
    return f"consumer-revocation {group_id} {member_id}"


class ConsumerGroupShard:
    def __init__(
        self,
        context: ShardContext,
        config: ConsumerGroupConfig,
        topics: TopicsView,
        downgraded: Downgraded | None = None,
        partition_racks: assignors.PartitionRacks = assignors.no_racks,
    ) -> None:
        self.context = context
        self.config = config
        self.topics = topics
        self.partition_racks = partition_racks  # the racks of a partition's replicas, now
        self.groups: dict[str, ConsumerGroup] = {}
        self._downgraded = downgraded
        # A group's session timeout: its own config (the GROUP resource; set by the group service).
        self.session_timeout_of: Callable[[str], int] = lambda _group_id: config.session_timeout_ms

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
                self.arm_session(
                    group.group_id, member.member_id, self.session_timeout_ms(group.group_id, member)
                )

    def on_unloaded(self) -> None:
        self.groups.clear()

    # --- timers --------------------------------------------------------------------------------
    def session_timeout_ms(self, group_id: str, member: ConsumerMember) -> int:
        """The group's session timeout (its own config, else the broker's), or a classic member's own
        (from its JoinGroup)."""
        if member.classic is not None:
            return member.classic.session_timeout_ms
        return self.session_timeout_of(group_id)

    def arm_session(self, group_id: str, member_id: str, timeout_ms: int) -> None:
        self.context.timer.schedule(
            _session_key(group_id, member_id),
            timeout_ms,
            lambda: self._fence(group_id, member_id, None, "session timeout"),
        )

    def forget_timers(self, group_id: str, member_id: str) -> None:
        self.context.timer.cancel(_session_key(group_id, member_id))
        self.context.timer.cancel(_revocation_key(group_id, member_id))

    def after_heartbeat(self, group_id: str, old: ConsumerMember | None, outcome: HeartbeatOutcome) -> None:
        """Re-arm or cancel the timers of the heartbeat's member (and of members it removed)."""
        timer = self.context.timer
        for member_id in outcome.removed:
            self.forget_timers(group_id, member_id)
        member = outcome.member
        if member is None:
            return
        if old is not None and old.member_id != member.member_id:
            # A static member's new incarnation replaced the old one.
            self.forget_timers(group_id, old.member_id)
        self.arm_session(group_id, member.member_id, self.session_timeout_ms(group_id, member))
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
        self.forget_timers(group_id, member_id)
        records, done = self.removal(group, member_id)
        return CoordinatorResult(records, None, on_complete=done)

    def removal(
        self, group: ConsumerGroup, member_id: str
    ) -> tuple[list[tuple[bytes, bytes | None]], Callable[[ErrorCode], None] | None]:
        """A member's removal records (a downgrade to a classic group when only classic members
        remain and the policy allows it), and what to run once the write completes."""
        now_ms = self.context.clock.time_ms()
        records, downgraded = classic.removal(
            group, member_id, self.topics(), self.config.migration_policy, now_ms
        )
        if not downgraded or self._downgraded is None:
            return records, None
        log.info("consumer group %s converted to a classic group", group.group_id)
        notify, group_id = self._downgraded, group.group_id

        def done(_code: ErrorCode) -> None:
            # The runtime replays records at their append, before it waits for the ISR: when the wait
            # fails (a timeout) the classic group is in memory all the same and its members need their
            # sessions, or nothing would ever expire them. A refused append replayed nothing: the
            # consumer group is still here and keeps its timers.
            if group_id not in self.groups:
                notify(group_id)

        return records, done


def consumer_group_config(config: BrokerConfig) -> ConsumerGroupConfig:
    """KIP-848 groups' settings; the interval and timeout must lie within their min/max bounds."""
    get = config.get
    interval = int(get("group.consumer.heartbeat.interval.ms"))
    session = int(get("group.consumer.session.timeout.ms"))
    bounds = {
        "group.consumer.heartbeat.interval.ms": (
            interval,
            "group.consumer.min.heartbeat.interval.ms",
            "group.consumer.max.heartbeat.interval.ms",
        ),
        "group.consumer.session.timeout.ms": (
            session,
            "group.consumer.min.session.timeout.ms",
            "group.consumer.max.session.timeout.ms",
        ),
    }
    for name, (value, low, high) in bounds.items():
        if not int(get(low)) <= value <= int(get(high)):
            raise ConfigError(f"{name}={value} must be within [{low}, {high}]")
    if interval >= session:
        raise ConfigError(
            "group.consumer.heartbeat.interval.ms must be below group.consumer.session.timeout.ms"
        )
    names: list[str] = []
    for raw in str(get("group.consumer.assignors")).split(","):
        if not raw.strip():
            continue
        short = assignors.short_name(raw)
        if short is None:
            raise ConfigError(f"group.consumer.assignors: unknown assignor {raw.strip()!r}")
        names.append(short)
    if not names:
        raise ConfigError("group.consumer.assignors must name at least one assignor")
    policy = str(get("group.consumer.migration.policy")).strip().lower()
    if policy not in classic.MIGRATION_POLICIES:
        raise ConfigError(
            f"group.consumer.migration.policy must be one of {', '.join(classic.MIGRATION_POLICIES)}"
        )
    return ConsumerGroupConfig(
        heartbeat_interval_ms=interval,
        session_timeout_ms=session,
        assignors=tuple(names),
        max_size=int(get("group.consumer.max.size")),
        migration_policy=policy,
    )
