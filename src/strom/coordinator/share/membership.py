"""Share groups' membership (KIP-932): members, epochs, and the server-side assignment.

Theory of operation. A share group has a **group epoch**, bumped whenever its membership or a
member's subscription changes, and each member a **member epoch**: the group epoch of the assignment
it was last given. ShareGroupHeartbeat (`heartbeat`) joins a member (epoch 0), keeps it (its epoch,
or an older one of its own: a lost response), or removes it (-1). The response carries the member's
assignment when it differs from what the member was last sent (on a join, always).

Assignment (`assign`, Kafka's "simple" assignor in spirit): a share group does not need a partition
to have a single owner, since records are handed out one at a time under locks. Every partition of
the subscribed topics goes to at least one member, and every member gets at least one partition
when there are any: with fewer members than partitions each partition has one member (round robin
over the members sorted by id), with more members than partitions each member gets one partition
(round robin over the partitions), so several members share a partition. Members never revoke: a
partition leaving a member's assignment simply stops being fetched by it, and what it holds there
is released by its share session closing or its locks running out.

The group's coordinator keeps the members, their epochs and the assignment as records in
``__consumer_offsets`` (`strom.coordinator.share.records`: it decides on a copy of the group and writes
the difference), so after a coordinator fail-over the members heartbeat on at their epochs; which
records are done is share-partition state, kept by the partitions' leaders. Pure: the caller supplies
the topics and the time.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from strom.coordinator.consumer.heartbeat import new_member_id
from strom.protocol.errors import ErrorCode

__all__ = [
    "LEAVE_EPOCH",
    "Assignment",
    "HeartbeatAnswer",
    "ShareGroup",
    "ShareMember",
    "assign",
    "heartbeat",
]

LEAVE_EPOCH = -1
JOIN_EPOCH = 0
ASSIGNOR_NAME = "simple"

Assignment = dict[str, frozenset[int]]  # topic -> partitions


@dataclass(slots=True)
class ShareMember:
    member_id: str
    member_epoch: int
    subscribed_topic_names: tuple[str, ...]
    client_id: str = ""
    client_host: str = ""
    rack_id: str | None = None
    assignment: Assignment = field(default_factory=dict)
    sent: Assignment | None = None  # the assignment last sent to the member (None: never)


@dataclass(slots=True)
class ShareGroup:
    group_id: str
    group_epoch: int = 0
    assignment_epoch: int = 0
    members: dict[str, ShareMember] = field(default_factory=dict)

    @property
    def state(self) -> str:
        return "Stable" if self.members else "Empty"

    def subscribed_topics(self) -> set[str]:
        return {t for m in self.members.values() for t in m.subscribed_topic_names}


@dataclass(frozen=True, slots=True)
class HeartbeatAnswer:
    error: ErrorCode = ErrorCode.NONE
    message: str | None = None
    member_id: str | None = None
    member_epoch: int = -1
    assignment: Assignment | None = None  # None: unchanged since the last answer
    removed: tuple[str, ...] = ()


def assign(members: list[ShareMember], topics: Mapping[str, int]) -> dict[str, Assignment]:
    """Every subscribed partition to at least one member, every member at least one partition when
    there are any (see the module docstring). Deterministic: members by id, partitions by topic."""
    result: dict[str, Assignment] = {m.member_id: {} for m in members}
    by_topic: dict[str, list[ShareMember]] = {}
    for member in sorted(members, key=lambda m: m.member_id):
        for topic in member.subscribed_topic_names:
            if topic in topics:
                by_topic.setdefault(topic, []).append(member)
    for topic, subscribers in sorted(by_topic.items()):
        partitions = range(topics[topic])
        pairs: list[tuple[str, int]] = []
        if len(subscribers) <= len(partitions):
            pairs = [(subscribers[p % len(subscribers)].member_id, p) for p in partitions]
        elif partitions:
            pairs = [(m.member_id, i % len(partitions)) for i, m in enumerate(subscribers)]
        for member_id, partition in pairs:
            owned = result[member_id].get(topic, frozenset())
            result[member_id][topic] = owned | {partition}
    return result


def heartbeat(
    group: ShareGroup,
    member_id: str,
    member_epoch: int,
    subscribed: tuple[str, ...] | None,
    topics: Mapping[str, int],
    client_id: str = "",
    client_host: str = "",
    rack_id: str | None = None,
    max_size: int = 2**31 - 1,
) -> HeartbeatAnswer:
    """Decide one ShareGroupHeartbeat on ``group`` (changed in place)."""
    member = group.members.get(member_id)
    if member_epoch == LEAVE_EPOCH:
        if member is None:
            return HeartbeatAnswer(ErrorCode.UNKNOWN_MEMBER_ID, f"Member {member_id} is not in the group.")
        del group.members[member_id]
        _rebalance(group, topics)
        return HeartbeatAnswer(member_id=member_id, member_epoch=LEAVE_EPOCH, removed=(member_id,))
    if member_epoch == JOIN_EPOCH:
        if not subscribed:
            return HeartbeatAnswer(ErrorCode.INVALID_REQUEST, "SubscribedTopicNames must be set on a join.")
        if member is None and len(group.members) >= max_size:
            return HeartbeatAnswer(ErrorCode.GROUP_MAX_SIZE_REACHED, f"Group {group.group_id} is full.")
        member_id = member_id or new_member_id()
        member = ShareMember(member_id, 0, tuple(subscribed), client_id, client_host, rack_id)
        group.members[member_id] = member
        _rebalance(group, topics)
    else:
        if member is None:
            return HeartbeatAnswer(ErrorCode.UNKNOWN_MEMBER_ID, f"Member {member_id} is not in the group.")
        if member_epoch > member.member_epoch:
            return HeartbeatAnswer(
                ErrorCode.FENCED_MEMBER_EPOCH, f"Epoch {member_epoch} is not the member's."
            )
        if member_epoch < member.member_epoch:
            member.sent = None  # it has not seen its latest assignment (a lost answer): send it again
        if subscribed is not None and tuple(subscribed) != member.subscribed_topic_names:
            member.subscribed_topic_names = tuple(subscribed)
            _rebalance(group, topics)
        elif _topics_changed(group, topics):
            _rebalance(group, topics)
    changed = member.sent != member.assignment
    if changed:
        member.sent = dict(member.assignment)
    return HeartbeatAnswer(
        member_id=member.member_id,
        member_epoch=member.member_epoch,
        assignment=dict(member.assignment) if changed else None,
    )


def remove(group: ShareGroup, member_id: str, topics: Mapping[str, int]) -> bool:
    """Remove a member whose session ran out; whether it was there."""
    if group.members.pop(member_id, None) is None:
        return False
    _rebalance(group, topics)
    return True


def _topics_changed(group: ShareGroup, topics: Mapping[str, int]) -> bool:
    """Whether a subscribed topic appeared, vanished or grew partitions since the last assignment."""
    target = assign(list(group.members.values()), topics)
    return any(target[m.member_id] != m.assignment for m in group.members.values())


def _rebalance(group: ShareGroup, topics: Mapping[str, int]) -> None:
    """A new group epoch and the members' assignments at it."""
    group.group_epoch += 1
    target = assign(list(group.members.values()), topics)
    for member in group.members.values():
        if target[member.member_id] != member.assignment or member.member_epoch == 0:
            member.assignment = target[member.member_id]
            member.member_epoch = group.group_epoch
    group.assignment_epoch = group.group_epoch
