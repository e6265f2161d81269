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
``__consumer_offsets`` (`strom.coordinator.share.records`: it decides on a `GroupDraft` and writes
what the draft changed), so after a coordinator fail-over the members heartbeat on at their epochs;
which records are done is share-partition state, kept by the partitions' leaders. Pure: the caller
supplies the topics and the time.

Cost. A draft copies a member only when the decision changes it, so a heartbeat that changes nothing
costs the same in a group of any size: its one remaining question, whether a subscribed topic
appeared, vanished or grew, is answered from the partition counts the assignment was last checked
against at the group's epoch (`ShareGroup.checked`, a cache the coordinator keeps; recomputed after a
load). A join, a leave or a subscription change recomputes the whole assignment (a new epoch), and
copies the members whose partitions or epoch it changes.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass, field

from strom.coordinator.consumer.heartbeat import new_member_id
from strom.protocol.errors import ErrorCode

__all__ = [
    "LEAVE_EPOCH",
    "Assignment",
    "GroupDraft",
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
    # The share-partitions the group was ever assigned, so read (ShareGroupStatePartitionMetadata):
    # what an empty group's offsets are described by. Kept until DeleteGroups, DeleteShareGroupOffsets
    # of the topic, or the topic's deletion.
    initialized: dict[str, frozenset[int]] = field(default_factory=dict)
    # Not durable, a cache: (group epoch, the partition count of each subscribed topic) for which the
    # assignment at that epoch was checked, so a steady heartbeat compares a few counts instead of
    # recomputing the assignment. None after a load; an entry of an older epoch is not used.
    checked: tuple[int, dict[str, int]] | None = field(default=None, compare=False)

    @property
    def state(self) -> str:
        return "Stable" if self.members else "Empty"

    def subscribed_topics(self) -> set[str]:
        return {t for m in self.members.values() for t in m.subscribed_topic_names}


class GroupDraft:
    """One decision's view of a group, copy-on-write: reads fall through to the group, and a member
    is copied the first time the decision changes it, so the group stays as the log says (the records
    of the decision change it once written) and a decision costs what it changes, not the group's size.
    """

    __slots__ = ("assignment_epoch", "base", "changed", "checked", "group_epoch", "group_id", "removed")

    def __init__(self, base: ShareGroup) -> None:
        self.base = base
        self.group_id = base.group_id
        self.group_epoch = base.group_epoch
        self.assignment_epoch = base.assignment_epoch
        self.changed: dict[str, ShareMember] = {}  # new members and changed copies
        self.removed: set[str] = set()  # members of the base that left
        self.checked: dict[str, int] | None = None  # the topics the assignment was checked against

    def get(self, member_id: str) -> ShareMember | None:
        member = self.changed.get(member_id)
        if member is None and member_id not in self.removed:
            member = self.base.members.get(member_id)
        return member

    def edit(self, member_id: str) -> ShareMember:
        """The member, to change: copied from the group the first time."""
        member = self.changed.get(member_id)
        if member is None:
            member = self.changed[member_id] = copy.copy(self.base.members[member_id])
        return member

    def add(self, member: ShareMember) -> None:
        self.removed.discard(member.member_id)
        self.changed[member.member_id] = member

    def drop(self, member_id: str) -> None:
        self.changed.pop(member_id, None)
        if member_id in self.base.members:
            self.removed.add(member_id)

    def size(self) -> int:
        added = sum(1 for member_id in self.changed if member_id not in self.base.members)
        return len(self.base.members) - len(self.removed) + added

    def members(self) -> list[ShareMember]:
        """Every member after the decision: the group's size (only a rebalance needs them all)."""
        changed, removed = self.changed, self.removed
        out = [changed.get(i, m) for i, m in self.base.members.items() if i not in removed]
        out += [m for i, m in changed.items() if i not in self.base.members]
        return out

    def commit(self) -> ShareGroup:
        """Apply the decision to the group itself (for callers that keep no log)."""
        group = self.base
        for member_id in self.removed:
            del group.members[member_id]
        group.members.update(self.changed)
        group.group_epoch, group.assignment_epoch = self.group_epoch, self.assignment_epoch
        if self.checked is not None:
            group.checked = (self.group_epoch, self.checked)
        return group


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
    group: ShareGroup | GroupDraft,
    member_id: str,
    member_epoch: int,
    subscribed: tuple[str, ...] | None,
    topics: Mapping[str, int],
    client_id: str = "",
    client_host: str = "",
    rack_id: str | None = None,
    max_size: int = 2**31 - 1,
) -> HeartbeatAnswer:
    """Decide one ShareGroupHeartbeat: on a draft (its group unchanged), or on a group, changed in place."""
    draft = group if isinstance(group, GroupDraft) else GroupDraft(group)
    answer = _heartbeat(
        draft, member_id, member_epoch, subscribed, topics, client_id, client_host, rack_id, max_size
    )
    if draft is not group:
        draft.commit()
    return answer


def _heartbeat(
    draft: GroupDraft,
    member_id: str,
    member_epoch: int,
    subscribed: tuple[str, ...] | None,
    topics: Mapping[str, int],
    client_id: str,
    client_host: str,
    rack_id: str | None,
    max_size: int,
) -> HeartbeatAnswer:
    member = draft.get(member_id)
    if member_epoch == LEAVE_EPOCH:
        if member is None:
            return HeartbeatAnswer(ErrorCode.UNKNOWN_MEMBER_ID, f"Member {member_id} is not in the group.")
        draft.drop(member_id)
        _rebalance(draft, topics)
        return HeartbeatAnswer(member_id=member_id, member_epoch=LEAVE_EPOCH, removed=(member_id,))
    if member_epoch == JOIN_EPOCH:
        if not subscribed:
            return HeartbeatAnswer(ErrorCode.INVALID_REQUEST, "SubscribedTopicNames must be set on a join.")
        if member is None and draft.size() >= max_size:
            return HeartbeatAnswer(ErrorCode.GROUP_MAX_SIZE_REACHED, f"Group {draft.group_id} is full.")
        member_id = member_id or new_member_id()
        draft.add(ShareMember(member_id, 0, tuple(subscribed), client_id, client_host, rack_id))
        _rebalance(draft, topics)
    else:
        if member is None:
            return HeartbeatAnswer(ErrorCode.UNKNOWN_MEMBER_ID, f"Member {member_id} is not in the group.")
        if member_epoch > member.member_epoch:
            return HeartbeatAnswer(
                ErrorCode.FENCED_MEMBER_EPOCH, f"Epoch {member_epoch} is not the member's."
            )
        if member_epoch < member.member_epoch:
            # It has not seen its latest assignment (a lost answer): send it again.
            draft.edit(member_id).sent = None
        if subscribed is not None and tuple(subscribed) != member.subscribed_topic_names:
            draft.edit(member_id).subscribed_topic_names = tuple(subscribed)
            _rebalance(draft, topics)
        elif _topics_changed(draft, topics):
            _rebalance(draft, topics)
    member = draft.get(member_id)
    assert member is not None
    changed = member.sent != member.assignment
    if changed:
        member = draft.edit(member_id)
        member.sent = dict(member.assignment)
    return HeartbeatAnswer(
        member_id=member.member_id,
        member_epoch=member.member_epoch,
        assignment=dict(member.assignment) if changed else None,
    )


def remove(group: ShareGroup | GroupDraft, member_id: str, topics: Mapping[str, int]) -> bool:
    """Remove a member whose session ran out (on a draft, or on a group in place); whether it was there."""
    draft = group if isinstance(group, GroupDraft) else GroupDraft(group)
    if draft.get(member_id) is None:
        return False
    draft.drop(member_id)
    _rebalance(draft, topics)
    if draft is not group:
        draft.commit()
    return True


def _subscribed_counts(members: list[ShareMember], topics: Mapping[str, int]) -> dict[str, int]:
    """The partition count (0: no such topic) of every topic the members subscribe to."""
    return {t: topics.get(t, 0) for m in members for t in m.subscribed_topic_names}


def _topics_changed(draft: GroupDraft, topics: Mapping[str, int]) -> bool:
    """Whether a subscribed topic appeared, vanished or grew partitions since the last assignment: a
    few counts compared when the group's assignment was checked at this epoch, else recomputed."""
    checked = draft.base.checked
    # Here the draft differs from its group at most in what was sent to a member.
    if checked is not None and checked[0] == draft.group_epoch:
        return any(topics.get(t, 0) != count for t, count in checked[1].items())
    members = draft.members()
    target = assign(members, topics)
    if any(target[m.member_id] != m.assignment for m in members):
        return True
    draft.checked = _subscribed_counts(members, topics)
    return False


def _rebalance(draft: GroupDraft, topics: Mapping[str, int]) -> None:
    """A new group epoch and the members' assignments at it; only the members whose assignment or
    epoch changes are copied."""
    draft.group_epoch += 1
    members = draft.members()
    target = assign(members, topics)
    for member in members:
        if target[member.member_id] != member.assignment or member.member_epoch == 0:
            changed = draft.edit(member.member_id)
            changed.assignment = target[member.member_id]
            changed.member_epoch = draft.group_epoch
    draft.assignment_epoch = draft.group_epoch
    draft.checked = _subscribed_counts(members, topics)
