"""A consumer group (KIP-848) in memory: members, epochs, target assignment, owners; rebuilt by replay.

The state changes only by replaying records (`records.py`): a heartbeat computes the records of its
decision and the coordinator runtime replays them once they are appended, exactly as it replays the log
when it loads a partition. So what a new coordinator rebuilds after a fail-over is what the old one
held: the group epoch, each member's epoch and previous epoch, its reconciliation state, the partitions
it owns and those it is revoking, and the target assignment with its epoch.

Vocabulary (Kafka's):

* **group epoch**: bumped whenever what the assignor depends on changes (a member joins or leaves,
  changes its subscription or its assignor, a subscribed topic gains partitions or appears);
* **assignment epoch**: the group epoch the target assignment was computed for;
* **member epoch**: the epoch of the assignment the member has reconciled to; it reaches the assignment
  epoch once the member revoked what it no longer owns in the target (`reconciliation.py`).

Group states (Kafka's ``ConsumerGroup.ConsumerGroupState``), derived from the above: EMPTY (no members),
ASSIGNING (group epoch ahead of the assignment epoch), RECONCILING (a member not yet at the assignment
epoch, or not STABLE), STABLE; DEAD once deleted. Member states (``MemberState``): STABLE,
UNREVOKED_PARTITIONS (must revoke before moving on), UNRELEASED_PARTITIONS (waits for partitions another
member still owns), UNKNOWN.

`owners` maps each (topic, partition) to the member that owns it or is still revoking it: a partition
goes to its new owner only once it is free there.
"""

from __future__ import annotations

import enum
from collections.abc import Iterator
from dataclasses import dataclass, field, replace

from strom.coordinator.consumer.records import (
    CURRENT_ASSIGNMENT_KEY,
    GROUP_METADATA_KEY,
    MEMBER_METADATA_KEY,
    TARGET_MEMBER_KEY,
    TARGET_METADATA_KEY,
    Assignment,
    ClassicMemberMetadata,
    ConsumerKey,
    ConsumerValue,
    CurrentAssignmentValue,
    GroupMetadataValue,
    MemberMetadataValue,
    TargetMemberValue,
    TargetMetadataValue,
)
from strom.protocol.errors import ErrorCode

LEAVE_EPOCH = -1  # a dynamic member leaves
LEAVE_STATIC_EPOCH = -2  # a static member leaves, to come back with the same instance id
JOIN_EPOCH = 0
NO_EPOCH = -1


class MemberState(enum.Enum):
    STABLE = 0
    UNREVOKED_PARTITIONS = 1
    UNRELEASED_PARTITIONS = 2
    UNKNOWN = 3


class ConsumerGroupState(enum.Enum):
    EMPTY = "Empty"
    ASSIGNING = "Assigning"
    RECONCILING = "Reconciling"
    STABLE = "Stable"
    DEAD = "Dead"


@dataclass(frozen=True, slots=True)
class ConsumerMember:
    member_id: str
    instance_id: str | None = None
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    subscribed_topic_names: tuple[str, ...] = ()
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    rebalance_timeout_ms: int = 300_000
    member_epoch: int = 0
    previous_member_epoch: int = NO_EPOCH
    state: MemberState = MemberState.STABLE
    assigned: Assignment = field(default_factory=dict)
    revoking: Assignment = field(default_factory=dict)
    # Set for a member served through JoinGroup/SyncGroup/Heartbeat (online migration, KIP-848).
    classic: ClassicMemberMetadata | None = None

    @property
    def uses_classic_protocol(self) -> bool:
        return self.classic is not None

    def metadata_value(self) -> MemberMetadataValue:
        return MemberMetadataValue(
            self.instance_id,
            self.rack_id,
            self.client_id,
            self.client_host,
            self.subscribed_topic_names,
            self.subscribed_topic_regex,
            self.server_assignor,
            self.rebalance_timeout_ms,
            self.classic,
        )

    def assignment_value(self) -> CurrentAssignmentValue:
        return CurrentAssignmentValue(
            self.member_epoch, self.previous_member_epoch, self.state.value, self.assigned, self.revoking
        )

    def with_metadata(self, value: MemberMetadataValue) -> ConsumerMember:
        return replace(
            self,
            instance_id=value.instance_id,
            rack_id=value.rack_id,
            client_id=value.client_id,
            client_host=value.client_host,
            subscribed_topic_names=value.subscribed_topic_names,
            subscribed_topic_regex=value.subscribed_topic_regex,
            server_assignor=value.server_assignor,
            rebalance_timeout_ms=value.rebalance_timeout_ms,
            classic=value.classic,
        )

    def with_assignment(self, value: CurrentAssignmentValue) -> ConsumerMember:
        return replace(
            self,
            member_epoch=value.member_epoch,
            previous_member_epoch=value.previous_member_epoch,
            state=MemberState(value.state),
            assigned=dict(value.assigned),
            revoking=dict(value.revoking),
        )


def partitions_of(assignment: Assignment) -> Iterator[tuple[str, int]]:
    for topic, ps in assignment.items():
        for p in ps:
            yield topic, p


def same_assignment(a: Assignment, b: Assignment) -> bool:
    return {t: ps for t, ps in a.items() if ps} == {t: ps for t, ps in b.items() if ps}


@dataclass
class ConsumerGroup:
    group_id: str
    group_epoch: int = 0
    assignment_epoch: int = 0
    subscribed_topics: dict[str, int] = field(default_factory=dict)  # topic -> partitions at the epoch
    members: dict[str, ConsumerMember] = field(default_factory=dict)
    target: dict[str, Assignment] = field(default_factory=dict)
    owners: dict[tuple[str, int], str] = field(default_factory=dict)
    deleted: bool = False

    @property
    def state(self) -> ConsumerGroupState:
        if self.deleted:
            return ConsumerGroupState.DEAD
        if not self.members:
            return ConsumerGroupState.EMPTY
        if self.group_epoch > self.assignment_epoch:
            return ConsumerGroupState.ASSIGNING
        for member in self.members.values():
            if member.member_epoch != self.assignment_epoch or member.state is not MemberState.STABLE:
                return ConsumerGroupState.RECONCILING
        return ConsumerGroupState.STABLE

    def static_member(self, instance_id: str) -> ConsumerMember | None:
        for member in self.members.values():
            if member.instance_id == instance_id:
                return member
        return None

    def owner(self, topic: str, partition: int) -> str | None:
        return self.owners.get((topic, partition))

    def classic_only_without(self, member_id: str) -> bool:
        """Whether every member but ``member_id`` uses the classic protocol, and there is one."""
        rest = [m for mid, m in self.members.items() if mid != member_id]
        return bool(rest) and all(m.uses_classic_protocol for m in rest)

    def waiting_on_unreleased(self, member: ConsumerMember) -> bool:
        """Whether a partition of the member's target that it does not have yet is still owned by
        another member (Kafka's ``waitingOnUnreleasedPartition``)."""
        have = set(partitions_of(member.assigned))
        for tp in partitions_of(self.target.get(member.member_id, {})):
            owner = self.owners.get(tp)
            if tp not in have and owner is not None and owner != member.member_id:
                return True
        return False

    def is_empty_shell(self) -> bool:
        """No member, nothing assigned: the group may go once its offsets are gone."""
        return not self.members

    # --- replay --------------------------------------------------------------------------------
    def replay(self, key: ConsumerKey, value: ConsumerValue | None) -> None:
        """Apply one record of this group (a None value is a tombstone)."""
        version = key.version
        if version == GROUP_METADATA_KEY:
            if value is None:
                self.deleted = True
                return
            assert isinstance(value, GroupMetadataValue)
            self.deleted = False
            self.group_epoch = value.epoch
            self.subscribed_topics = dict(value.topics)
            return
        if version == TARGET_METADATA_KEY:
            self.assignment_epoch = 0 if value is None else _target_epoch(value)
            return
        member_id = key.member_id or ""
        if version == MEMBER_METADATA_KEY:
            if value is None:
                self._drop_member(member_id)
                return
            assert isinstance(value, MemberMetadataValue)
            known = self.members.get(member_id) or ConsumerMember(member_id)
            self.members[member_id] = known.with_metadata(value)
        elif version == TARGET_MEMBER_KEY:
            if value is None:
                self.target.pop(member_id, None)
            else:
                assert isinstance(value, TargetMemberValue)
                self.target[member_id] = dict(value.partitions)
        elif version == CURRENT_ASSIGNMENT_KEY:
            old = self.members.get(member_id)
            if old is not None:
                self._release(old)
            if value is None:
                if old is not None:
                    self.members[member_id] = replace(old, assigned={}, revoking={}, member_epoch=0)
                return
            assert isinstance(value, CurrentAssignmentValue)
            member = (old or ConsumerMember(member_id)).with_assignment(value)
            self.members[member_id] = member
            for tp in (*partitions_of(member.assigned), *partitions_of(member.revoking)):
                self.owners[tp] = member_id

    def _release(self, member: ConsumerMember) -> None:
        for tp in (*partitions_of(member.assigned), *partitions_of(member.revoking)):
            if self.owners.get(tp) == member.member_id:
                del self.owners[tp]

    def _drop_member(self, member_id: str) -> None:
        member = self.members.pop(member_id, None)
        if member is not None:
            self._release(member)


def _target_epoch(value: ConsumerValue) -> int:
    assert isinstance(value, TargetMetadataValue)
    return value.assignment_epoch


def commit_error(group: ConsumerGroup | None, member_id: str, member_epoch: int) -> ErrorCode | None:
    """An OffsetCommit to a consumer group (Kafka's ``ConsumerGroup.validateOffsetCommit``): None if
    there is no such group (the classic rules apply); NONE, UNKNOWN_MEMBER_ID (not a member; a commit
    without member id and epoch, from a tool or ``assign()``, only while the group has no members), or
    STALE_MEMBER_EPOCH (another epoch than the member's)."""
    if group is None:
        return None
    if member_epoch < 0 and not member_id:
        return ErrorCode.NONE if not group.members else ErrorCode.UNKNOWN_MEMBER_ID
    member = group.members.get(member_id)
    if member is None:
        return ErrorCode.UNKNOWN_MEMBER_ID
    return _epoch_error(member, member_epoch)


def fetch_error(group: ConsumerGroup | None, member_id: str | None, member_epoch: int) -> ErrorCode:
    """An OffsetFetch v9+ naming a member (Kafka's ``ConsumerGroup.validateOffsetFetch``): NONE when
    there is no such consumer group (a classic group checks nothing) or the request names no member
    (null member id and a negative epoch: an admin tool, or a client that does not say); else
    UNKNOWN_MEMBER_ID (not a member) or an epoch error (`_epoch_error`), so a fenced member cannot
    resume from offsets that another member is committing meanwhile."""
    if group is None or (member_id is None and member_epoch < 0):
        return ErrorCode.NONE
    member = group.members.get(member_id or "")
    if member is None:
        return ErrorCode.UNKNOWN_MEMBER_ID
    return _epoch_error(member, member_epoch)


def _epoch_error(member: ConsumerMember, member_epoch: int) -> ErrorCode:
    """NONE for the member's own epoch; else STALE_MEMBER_EPOCH, or ILLEGAL_GENERATION for a classic
    member (its epoch is its generation), as Kafka's ``validateMemberEpoch``."""
    if member_epoch == member.member_epoch:
        return ErrorCode.NONE
    return ErrorCode.ILLEGAL_GENERATION if member.uses_classic_protocol else ErrorCode.STALE_MEMBER_EPOCH
