"""One `__consumer_offsets` partition's share groups (KIP-932): membership as records, session timers.

`GroupShard` (group_service.py) holds one `ShareGroupShard` and hands it every share-group record of its
partition (key versions 10-14, `strom.coordinator.share.records`), while loading and after each write,
so the groups here are always what the log says. share_group_service.py runs each ShareGroupHeartbeat
as an operation of the coordinator runtime: `heartbeat` decides on a copy-on-write draft of the group
(`strom.coordinator.share.membership.GroupDraft`: only the members the decision changes are copied) and
returns the records of what it changed; the runtime appends them, replays them here, and answers once
the ISR has them. So a coordinator fail-over keeps the
members, their ids and epochs and the assignment: the new coordinator replays them and the members'
heartbeats go on. What was last sent to each member is not durable: it is set once the write is
(``on_complete``), and a new coordinator sends every member its assignment again.

Each heartbeat re-arms the member's session timer (`group.share.session.timeout.ms`, on the shard's
timer, so it dies with the shard); when it fires the member is removed (its records get tombstones)
and the others' assignments recomputed. After a load every member gets a fresh session timer, as
Kafka does. A group whose last member left stays, Empty, at its epochs (its group records stay, so it
outlives a fail-over too), until DeleteGroups deletes it (`delete`: tombstones for its group records).
The share-partitions the group was ever assigned are kept with it (key 15, `records`), so an empty
group's offsets can be described; `forget` drops topics whose states DeleteShareGroupOffsets deleted.

An admin change of the stored share-partition states (DeleteGroups, DeleteShareGroupOffsets,
AlterShareGroupOffsets) awaits the share coordinators, so it cannot be one operation of this shard.
Instead `hold` checks that the group is empty and holds it in the same operation, and until `release`
a join answers COORDINATOR_NOT_AVAILABLE (the client retries): no member is ever attached to state
deleted or replaced under it. A join after the change makes a member of what the change left (a
fresh group after DeleteGroups, whose partitions start at ``share.auto.offset.reset``). The hold is not
durable: a coordinator that moves mid-change drops it, and the change's last write then fails with
NOT_COORDINATOR (the admin client retries it at the new coordinator).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from strom.broker.config import BrokerConfig
from strom.coordinator.messages import ListedGroup
from strom.coordinator.records import RecordFormatError
from strom.coordinator.share import membership, records
from strom.coordinator.share.membership import Assignment, GroupDraft, HeartbeatAnswer, ShareGroup
from strom.coordinator_runtime import CoordinatorResult, ShardContext
from strom.protocol.errors import ErrorCode

log = logging.getLogger(__name__)

SHARE_GROUP_TYPE = "share"  # ListGroups' group type and protocol type of share groups (KIP-932)
TopicsView = Callable[[], Mapping[str, int]]  # every topic -> its partition count, now


@dataclass(frozen=True, slots=True)
class ShareGroupConfig:
    heartbeat_interval_ms: int = 5000
    session_timeout_ms: int = 45000
    max_size: int = 200
    max_share_sessions: int = 2000
    record_lock_duration_ms: int = 30000
    delivery_count_limit: int = 5
    auto_offset_reset: str = "latest"


def share_group_config(config: BrokerConfig) -> ShareGroupConfig:
    get = config.get
    return ShareGroupConfig(
        heartbeat_interval_ms=int(get("group.share.heartbeat.interval.ms")),
        session_timeout_ms=int(get("group.share.session.timeout.ms")),
        max_size=int(get("group.share.max.size")),
        max_share_sessions=int(get("group.share.max.share.sessions")),
        record_lock_duration_ms=int(get("group.share.record.lock.duration.ms")),
        delivery_count_limit=int(get("group.share.delivery.count.limit")),
        auto_offset_reset=str(get("share.auto.offset.reset")),
    )


def _session_key(group_id: str, member_id: str) -> str:
    return f"share-session {group_id} {member_id}"


@dataclass(frozen=True, slots=True)
class ShareHeartbeat:
    group_id: str
    member_id: str
    member_epoch: int
    subscribed_topic_names: tuple[str, ...] | None
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""


class ShareGroupShard:
    """One `__consumer_offsets` partition's share groups, replayed from its records, with their
    members' sessions."""

    def __init__(
        self,
        context: ShardContext,
        config: ShareGroupConfig,
        topics: TopicsView,
        session_timeout_of: Callable[[str], int] | None = None,
    ) -> None:
        self.context = context
        self.config = config
        self.topics = topics
        # A group's session timeout: its own config (the GROUP resource), else the broker's.
        self.session_timeout_of = session_timeout_of or (lambda _group_id: config.session_timeout_ms)
        self.groups: dict[str, ShareGroup] = {}
        # Group id -> admin changes under way (`hold`): no member may join until they end. In memory,
        # like the shard's timers: a new coordinator starts with none.
        self.held: dict[str, int] = {}

    # --- replay --------------------------------------------------------------------------------
    def replay(self, key: bytes, value: bytes | None) -> None:
        try:
            records.replay(self.groups, key, value)
        except RecordFormatError as exc:
            log.warning("skipping unreadable share-group record: %s", exc)

    def on_loaded(self) -> None:
        for group in self.groups.values():
            for member_id in group.members:
                self._arm_session(group.group_id, member_id)

    def on_unloaded(self) -> None:
        self.groups.clear()
        self.held.clear()

    # --- operations ----------------------------------------------------------------------------
    def heartbeat(self, req: ShareHeartbeat) -> CoordinatorResult[HeartbeatAnswer]:
        """One ShareGroupHeartbeat: the records of what it changed, and its answer. Decided on a draft
        of the group (`membership.GroupDraft`), so a heartbeat that changes nothing costs the same in
        a group of any size."""
        if req.group_id in self.held and req.member_epoch == membership.JOIN_EPOCH:
            # An admin change of the empty group is under way (its share-partition states may be
            # going): the member retries, as after a moved coordinator, and joins what it leaves.
            answer = HeartbeatAnswer(
                ErrorCode.COORDINATOR_NOT_AVAILABLE, f"Group {req.group_id} is being changed by an admin."
            )
            return CoordinatorResult([], answer)
        current = self.groups.get(req.group_id)
        if current is None and req.member_epoch != membership.JOIN_EPOCH:
            answer = HeartbeatAnswer(ErrorCode.UNKNOWN_MEMBER_ID, f"Group {req.group_id} has no members.")
            return CoordinatorResult([], answer)
        draft = GroupDraft(current if current is not None else ShareGroup(req.group_id))
        answer = membership.heartbeat(
            draft,
            req.member_id,
            req.member_epoch,
            req.subscribed_topic_names,
            self.topics(),
            req.client_id,
            req.client_host,
            req.rack_id,
            self.config.max_size,
        )
        for gone in answer.removed:
            self.context.timer.cancel(_session_key(req.group_id, gone))
        if answer.error is ErrorCode.NONE and answer.member_id is not None and not answer.removed:
            self._arm_session(req.group_id, answer.member_id)
        self._remember_checked(current, draft)
        member = draft.get(answer.member_id or "")
        sent = None if member is None else member.sent
        done = self._sent(req.group_id, answer.member_id, sent)
        return CoordinatorResult(records.records_for(draft, self.topics()), answer, on_complete=done)

    @staticmethod
    def _remember_checked(current: ShareGroup | None, draft: GroupDraft) -> None:
        """Keep the topics the decision checked the assignment against, keyed by its group epoch (a
        cache: valid once the decision's records are replayed, never used at another epoch)."""
        if current is not None and draft.checked is not None:
            current.checked = (draft.group_epoch, draft.checked)

    def _sent(
        self, group_id: str, member_id: str | None, sent: Assignment | None
    ) -> Callable[[ErrorCode], None]:
        """Once the heartbeat's records are durable: what its answer sent the member."""

        def done(code: ErrorCode) -> None:
            group = self.groups.get(group_id)
            member = None if group is None or member_id is None else group.members.get(member_id)
            if code is ErrorCode.NONE and member is not None:
                member.sent = sent

        return done

    def _arm_session(self, group_id: str, member_id: str) -> None:
        self.context.timer.schedule(
            _session_key(group_id, member_id),
            self.session_timeout_of(group_id),
            lambda: self._expire(group_id, member_id),
        )

    def _expire(self, group_id: str, member_id: str) -> CoordinatorResult[object]:
        current = self.groups.get(group_id)
        if current is None or member_id not in current.members:
            return CoordinatorResult([], None)
        draft = GroupDraft(current)
        membership.remove(draft, member_id, self.topics())
        self._remember_checked(current, draft)
        log.info("share group %s: member %s removed (session timeout)", group_id, member_id)
        return CoordinatorResult(records.records_for(draft, self.topics()), None)

    def hold(self, group_id: str, refused: ErrorCode | None) -> CoordinatorResult[ErrorCode]:
        """The first step of an admin change of a share group's stored state (DeleteGroups,
        DeleteShareGroupOffsets, AlterShareGroupOffsets): the check that the group has no members and
        the hold that keeps new members out until `release`, in one operation of the shard, so no
        member can join between the check and the change and be served from state deleted under it
        (Kafka marks the group's share-partitions deleting in the same write as its check).
        ``refused`` is the caller's refusal of the id, decided in the same operation."""
        group = self.groups.get(group_id)
        if refused is None and group is not None and group.members:
            refused = ErrorCode.NON_EMPTY_GROUP
        if refused is None:
            self.held[group_id] = self.held.get(group_id, 0) + 1
        return CoordinatorResult([], refused or ErrorCode.NONE)

    def release(self, group_id: str) -> None:
        """An admin change that `hold` admitted is over: members may join again."""
        left = self.held.get(group_id, 0) - 1
        if left > 0:
            self.held[group_id] = left
        else:
            self.held.pop(group_id, None)

    def delete(self, group_id: str) -> CoordinatorResult[ErrorCode]:
        """DeleteGroups of a share group (its share-partition states already deleted): the tombstones
        of an empty one; NON_EMPTY_GROUP if a member joined meanwhile, GROUP_ID_NOT_FOUND if it is gone."""
        group = self.groups.get(group_id)
        if group is None:
            return CoordinatorResult([], ErrorCode.GROUP_ID_NOT_FOUND)
        if group.members:
            return CoordinatorResult([], ErrorCode.NON_EMPTY_GROUP)
        return CoordinatorResult(records.tombstones(group), ErrorCode.NONE)

    def forget(self, group_id: str, topics: list[str]) -> CoordinatorResult[None]:
        """DeleteShareGroupOffsets deleted these topics' states: the group no longer lists them among
        the share-partitions it initialized."""
        group = self.groups.get(group_id)
        return CoordinatorResult([] if group is None else records.forget(group, topics), None)

    def listing(self) -> list[ListedGroup]:
        """ListGroups' entries: group type and protocol type ``share``."""
        return [
            ListedGroup(g.group_id, SHARE_GROUP_TYPE, g.state, SHARE_GROUP_TYPE) for g in self.groups.values()
        ]
