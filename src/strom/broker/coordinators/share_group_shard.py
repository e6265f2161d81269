"""One `__consumer_offsets` partition's share groups (KIP-932): membership in memory, session timers.

`GroupShard` (group_service.py) holds one `ShareGroupShard`; share_group_service.py runs each
ShareGroupHeartbeat on it as an operation of the coordinator runtime. The decisions are
`strom.coordinator.share.membership`'s. Membership is not written to `__consumer_offsets` (see
membership.py): the shard starts empty after a load, members rejoin, and `on_unloaded` forgets them.
Each heartbeat re-arms the member's session timer (`group.share.session.timeout.ms`, on the shard's
timer, so it dies with the shard); when it fires the member is removed and the others' assignments
recomputed. A group whose last member left is forgotten.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from strom.broker.config import BrokerConfig
from strom.coordinator.messages import ListedGroup
from strom.coordinator.share import membership
from strom.coordinator.share.membership import HeartbeatAnswer, ShareGroup
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
    """One `__consumer_offsets` partition's share groups, in memory, with their members' sessions."""

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

    def heartbeat(self, req: ShareHeartbeat) -> HeartbeatAnswer:
        group = self.groups.get(req.group_id)
        if group is None:
            if req.member_epoch != membership.JOIN_EPOCH:
                return HeartbeatAnswer(ErrorCode.UNKNOWN_MEMBER_ID, f"Group {req.group_id} has no members.")
            group = self.groups[req.group_id] = ShareGroup(req.group_id)
        answer = membership.heartbeat(
            group,
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
        if not group.members:
            del self.groups[req.group_id]
        if answer.error is ErrorCode.NONE and answer.member_id is not None and not answer.removed:
            self._arm_session(req.group_id, answer.member_id)
        return answer

    def _arm_session(self, group_id: str, member_id: str) -> None:
        self.context.timer.schedule(
            _session_key(group_id, member_id),
            self.session_timeout_of(group_id),
            lambda: self._expire(group_id, member_id),
        )

    def _expire(self, group_id: str, member_id: str) -> CoordinatorResult[object]:
        group = self.groups.get(group_id)
        if group is not None and membership.remove(group, member_id, self.topics()):
            log.info("share group %s: member %s removed (session timeout)", group_id, member_id)
            if not group.members:
                del self.groups[group_id]
        return CoordinatorResult([], None)

    def listing(self) -> list[ListedGroup]:
        """ListGroups' entries: group type and protocol type ``share``."""
        return [
            ListedGroup(g.group_id, SHARE_GROUP_TYPE, g.state, SHARE_GROUP_TYPE) for g in self.groups.values()
        ]

    def on_unloaded(self) -> None:
        self.groups.clear()
