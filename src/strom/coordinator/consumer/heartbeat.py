"""ConsumerGroupHeartbeat as a decision: a group and a request in, records and a response out (pure).

The coordinator shard calls `heartbeat` with the group as replayed so far; nothing here changes the
group. The records returned, once appended, are replayed into it (`model.ConsumerGroup.replay`), and
the response is what the member hears. The steps are Kafka's (``GroupMetadataManager``):

1. **Validation**: a group id; a known assignor (UNSUPPORTED_ASSIGNOR); a regular expression that
   compiles (INVALID_REGULAR_EXPRESSION); a member id (generated when a joining member sends none).
2. **Leaving**: epoch -1 removes the member (tombstones for its current assignment, its target and its
   metadata, then a new group epoch); epoch -2 (a static member) keeps its partitions at member epoch
   -2 until it comes back with the same instance id or its session runs out.
3. **The member**: epoch 0 joins (a static member whose instance id is held by a live member gets
   UNRELEASED_INSTANCE_ID; one that left with -2 takes its place and its assignment); a non-zero epoch
   must be the member's (FENCED_MEMBER_EPOCH), or its previous one if it owns nothing beyond its current
   assignment (a lost response), and the member must exist (UNKNOWN_MEMBER_ID). Fields the request
   carries replace the stored ones (a null means unchanged).
4. **Group epoch**: a new member, a changed subscription or assignor, or a change in the subscribed
   topics' partitions (or a regular expression now matching other topics) bumps it.
5. **Target assignment**: when the group epoch is ahead of the assignment epoch, the group's assignor
   runs and the members' changed targets are written with the new assignment epoch.
6. **Reconciliation** of this member (`reconciliation.py`) against its target; its new current
   assignment is written when it changed.

The response carries the assignment when the member joins, when it changed, or when what the member
reports owning differs from it. Regular expressions are Python's `re` (Kafka uses RE2/J: the common
syntax is the same), matched in full against topic names, never internal ones.
"""

from __future__ import annotations

import re
import uuid
from base64 import urlsafe_b64encode
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field, replace

from strom.coordinator.consumer import assignors
from strom.coordinator.consumer.model import (
    JOIN_EPOCH,
    LEAVE_EPOCH,
    LEAVE_STATIC_EPOCH,
    ConsumerGroup,
    ConsumerMember,
    MemberState,
    same_assignment,
)
from strom.coordinator.consumer.reconciliation import reconcile
from strom.coordinator.consumer.records import (
    CURRENT_ASSIGNMENT_KEY,
    GROUP_METADATA_KEY,
    MEMBER_METADATA_KEY,
    TARGET_MEMBER_KEY,
    TARGET_METADATA_KEY,
    Assignment,
    ClassicMemberMetadata,
    ConsumerKey,
    GroupMetadataValue,
    TargetMemberValue,
    TargetMetadataValue,
    encode_key,
    encode_value,
)
from strom.protocol.errors import ErrorCode

Record = tuple[bytes, bytes | None]


@dataclass(frozen=True, slots=True)
class ConsumerGroupConfig:
    heartbeat_interval_ms: int = 5_000
    session_timeout_ms: int = 45_000
    assignors: tuple[str, ...] = (assignors.UNIFORM, assignors.RANGE)
    max_size: int = 2**31 - 1
    migration_policy: str = "bidirectional"  # group.consumer.migration.policy (classic.py)


@dataclass(frozen=True, slots=True)
class HeartbeatRequest:
    group_id: str
    member_id: str
    member_epoch: int
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int = -1
    subscribed_topic_names: tuple[str, ...] | None = None
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    owned: tuple[tuple[str, int], ...] | None = None  # None: not reported in this heartbeat
    client_id: str = ""
    client_host: str = ""
    classic: ClassicMemberMetadata | None = None  # a classic member's JoinGroup (classic.py)


@dataclass
class HeartbeatOutcome:
    error: ErrorCode = ErrorCode.NONE
    message: str | None = None
    member_id: str | None = None
    member_epoch: int = 0
    assignment: Assignment | None = None
    records: list[Record] = field(default_factory=list)
    member: ConsumerMember | None = None  # the member after this heartbeat (None: gone or refused)
    removed: tuple[str, ...] = ()  # member ids this heartbeat removed (their timers go)


def refuse(code: ErrorCode, message: str) -> HeartbeatOutcome:
    return HeartbeatOutcome(error=code, message=message)


def new_member_id() -> str:
    """A random member id in the form Kafka's clients generate (a base64 UUID without padding)."""
    return urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()


# --- records -----------------------------------------------------------------------------------


def _key(version: int, group_id: str, member_id: str | None = None) -> bytes:
    return encode_key(ConsumerKey(version, group_id, member_id))


def member_records(group_id: str, member: ConsumerMember) -> list[Record]:
    return [(_key(MEMBER_METADATA_KEY, group_id, member.member_id), encode_value(member.metadata_value()))]


def assignment_record(group_id: str, member: ConsumerMember) -> Record:
    key = _key(CURRENT_ASSIGNMENT_KEY, group_id, member.member_id)
    return key, encode_value(member.assignment_value())


def epoch_record(group_id: str, epoch: int, topics: Mapping[str, int]) -> Record:
    return _key(GROUP_METADATA_KEY, group_id), encode_value(GroupMetadataValue(epoch, dict(topics)))


def member_tombstones(group_id: str, member_id: str) -> list[Record]:
    return [
        (_key(CURRENT_ASSIGNMENT_KEY, group_id, member_id), None),
        (_key(TARGET_MEMBER_KEY, group_id, member_id), None),
        (_key(MEMBER_METADATA_KEY, group_id, member_id), None),
    ]


def target_records(group_id: str, epoch: int, target: Mapping[str, Assignment]) -> list[Record]:
    """A whole target assignment: each member's partitions, then the assignment epoch."""
    records: list[Record] = [
        (_key(TARGET_MEMBER_KEY, group_id, member_id), encode_value(TargetMemberValue(target[member_id])))
        for member_id in sorted(target)
    ]
    records.append((_key(TARGET_METADATA_KEY, group_id), encode_value(TargetMetadataValue(epoch))))
    return records


def group_tombstones(group_id: str) -> list[Record]:
    return [(_key(TARGET_METADATA_KEY, group_id), None), (_key(GROUP_METADATA_KEY, group_id), None)]


# --- subscriptions -----------------------------------------------------------------------------


def subscribed_topics(member: ConsumerMember, topics: Mapping[str, int]) -> set[str]:
    """The existing topics the member subscribes to: its names, and what its expression matches."""
    out = {t for t in member.subscribed_topic_names if t in topics}
    if member.subscribed_topic_regex:
        try:
            pattern = re.compile(member.subscribed_topic_regex)
        except re.error:
            return out
        out.update(t for t in topics if not t.startswith("__") and pattern.fullmatch(t))
    return out


def group_topics(members: Collection[ConsumerMember], topics: Mapping[str, int]) -> dict[str, int]:
    wanted: set[str] = set()
    for member in members:
        wanted |= subscribed_topics(member, topics)
    return {t: topics[t] for t in sorted(wanted)}


def removal_records(group: ConsumerGroup, member_id: str, topics: Mapping[str, int]) -> list[Record]:
    """A member leaves or is fenced: its tombstones, then a new group epoch without it."""
    rest = [m for mid, m in group.members.items() if mid != member_id]
    records = member_tombstones(group.group_id, member_id)
    records.append(epoch_record(group.group_id, group.group_epoch + 1, group_topics(rest, topics)))
    return records


# --- the heartbeat -----------------------------------------------------------------------------


def heartbeat(
    group: ConsumerGroup | None,
    req: HeartbeatRequest,
    topics: Mapping[str, int],
    config: ConsumerGroupConfig,
    partition_racks: assignors.PartitionRacks = assignors.no_racks,
) -> HeartbeatOutcome:
    """Decide one ConsumerGroupHeartbeat (see the module docstring); ``topics`` maps every existing
    topic to its partition count, ``partition_racks`` a partition to the racks of its replicas (the
    rack-aware ``uniform`` assignor)."""
    refused = _validate(req, config)
    if refused is not None:
        return refused
    if group is None:
        group = ConsumerGroup(req.group_id)
    if req.member_epoch in (LEAVE_EPOCH, LEAVE_STATIC_EPOCH):
        return _leave(group, req, topics)
    found = _member(group, req, config)
    if isinstance(found, HeartbeatOutcome):
        return found
    old, member, records = found
    member = _updated(member, req)
    if old is None or member.metadata_value() != old.metadata_value():
        records += member_records(group.group_id, member)
    members = dict(group.members)
    current_target = dict(group.target)
    if old is not None and old.member_id != member.member_id:
        # A static member's new incarnation: the old id is gone, its target is the new one's.
        del members[old.member_id]
        current_target[member.member_id] = current_target.pop(old.member_id, {})
    members[member.member_id] = member
    new_topics = group_topics(members.values(), topics)
    group_epoch = group.group_epoch
    if (
        old is None
        or _assignment_inputs_changed(old, member, topics)
        or new_topics != group.subscribed_topics
    ):
        group_epoch += 1
        records.append(epoch_record(group.group_id, group_epoch, new_topics))
    target_epoch = group.assignment_epoch
    target = current_target
    if group_epoch > target_epoch:
        target, target_records = _new_target(
            group.group_id, current_target, members, new_topics, config, partition_racks
        )
        records += target_records
        target_epoch = group_epoch
        records.append(
            (_key(TARGET_METADATA_KEY, group.group_id), encode_value(TargetMetadataValue(group_epoch)))
        )
    owned = None if req.owned is None else set(req.owned)
    reconciled = reconcile(
        member,
        target_epoch,
        target.get(member.member_id, {}),
        owned,
        group.owner,
        subscribed_topics(member, topics),
    )
    if old is None or reconciled.assignment_value() != old.assignment_value():
        records.append(assignment_record(group.group_id, reconciled))
    send = (
        req.member_epoch == JOIN_EPOCH
        or old is None
        or not same_assignment(reconciled.assigned, old.assigned)
        or (req.owned is not None and not same_assignment(_grouped(req.owned), reconciled.assigned))
    )
    return HeartbeatOutcome(
        member_id=reconciled.member_id,
        member_epoch=reconciled.member_epoch,
        assignment=reconciled.assigned if send else None,
        records=records,
        member=reconciled,
    )


def _validate(req: HeartbeatRequest, config: ConsumerGroupConfig) -> HeartbeatOutcome | None:
    if not req.group_id:
        return refuse(ErrorCode.INVALID_REQUEST, "GroupId can't be empty.")
    if req.member_epoch < LEAVE_STATIC_EPOCH:
        return refuse(ErrorCode.INVALID_REQUEST, f"MemberEpoch {req.member_epoch} is invalid.")
    if req.member_epoch == LEAVE_STATIC_EPOCH and req.instance_id is None:
        return refuse(ErrorCode.INVALID_REQUEST, "InstanceId can't be null when leaving with epoch -2.")
    if (
        req.member_epoch == JOIN_EPOCH
        and req.subscribed_topic_names is None
        and not req.subscribed_topic_regex
    ):
        return refuse(ErrorCode.INVALID_REQUEST, "SubscribedTopicNames or SubscribedTopicRegex must be set.")
    if req.server_assignor is not None:
        name = assignors.short_name(req.server_assignor)
        if name is None or name not in config.assignors:
            return refuse(
                ErrorCode.UNSUPPORTED_ASSIGNOR, f"ServerAssignor {req.server_assignor} is not supported."
            )
    if req.subscribed_topic_regex:
        try:
            re.compile(req.subscribed_topic_regex)
        except re.error as exc:
            return refuse(ErrorCode.INVALID_REGULAR_EXPRESSION, f"Invalid regular expression: {exc}")
    return None


def _leave(group: ConsumerGroup, req: HeartbeatRequest, topics: Mapping[str, int]) -> HeartbeatOutcome:
    member = group.members.get(req.member_id)
    if member is None and req.instance_id is not None:
        member = group.static_member(req.instance_id)
    if member is None:
        return refuse(ErrorCode.UNKNOWN_MEMBER_ID, f"Member {req.member_id} is not a member of the group.")
    if req.member_epoch == LEAVE_STATIC_EPOCH:
        # The static member keeps its partitions for its next incarnation, until its session ends.
        left = replace(member, member_epoch=LEAVE_STATIC_EPOCH, previous_member_epoch=member.member_epoch)
        return HeartbeatOutcome(
            member_id=member.member_id,
            member_epoch=LEAVE_STATIC_EPOCH,
            records=[assignment_record(group.group_id, left)],
            member=left,
        )
    return HeartbeatOutcome(
        member_id=member.member_id,
        member_epoch=LEAVE_EPOCH,
        records=removal_records(group, member.member_id, topics),
        removed=(member.member_id,),
    )


def _member(
    group: ConsumerGroup, req: HeartbeatRequest, config: ConsumerGroupConfig
) -> HeartbeatOutcome | tuple[ConsumerMember | None, ConsumerMember, list[Record]]:
    """(the member before, the member to update, records so far), or the refusal."""
    if req.member_epoch == JOIN_EPOCH:
        member_id = req.member_id or new_member_id()
        if req.instance_id is not None:
            static = group.static_member(req.instance_id)
            if static is not None and static.member_id != member_id:
                if static.member_epoch != LEAVE_STATIC_EPOCH:
                    return refuse(
                        ErrorCode.UNRELEASED_INSTANCE_ID,
                        f"Static member {static.member_id} with instance id {req.instance_id} is "
                        "present in the consumer group.",
                    )
                return _replace_static(group, static, member_id)
        old = group.members.get(member_id)
        if old is None and len(group.members) >= config.max_size:
            return refuse(
                ErrorCode.GROUP_MAX_SIZE_REACHED, "The consumer group has reached its maximum size."
            )
        if old is not None:
            # A member rejoining under its own id starts over from an empty assignment.
            return old, replace(old, member_epoch=0, state=MemberState.STABLE), []
        return None, ConsumerMember(member_id), []
    member = group.members.get(req.member_id)
    if member is None:
        return refuse(ErrorCode.UNKNOWN_MEMBER_ID, f"Member {req.member_id} is not a member of the group.")
    if req.member_epoch > member.member_epoch:
        return refuse(ErrorCode.FENCED_MEMBER_EPOCH, "The member epoch is ahead of the coordinator's.")
    if req.member_epoch < member.member_epoch:
        owned = set(req.owned or ())
        mine = {(t, p) for t, ps in member.assigned.items() for p in ps}
        if req.member_epoch != member.previous_member_epoch or req.owned is None or not owned <= mine:
            return refuse(ErrorCode.FENCED_MEMBER_EPOCH, "The member epoch is behind the coordinator's.")
    return member, member, []


def _replace_static(
    group: ConsumerGroup, static: ConsumerMember, member_id: str
) -> tuple[ConsumerMember | None, ConsumerMember, list[Record]]:
    """A static member comes back: the new id takes the old one's place, assignment and target."""
    records = member_tombstones(group.group_id, static.member_id)
    member = replace(static, member_id=member_id, member_epoch=static.previous_member_epoch)
    records += member_records(group.group_id, member)
    target = group.target.get(static.member_id)
    if target is not None:
        records.append(
            (_key(TARGET_MEMBER_KEY, group.group_id, member_id), encode_value(TargetMemberValue(target)))
        )
    records.append(assignment_record(group.group_id, member))
    return static, member, records


def _updated(member: ConsumerMember, req: HeartbeatRequest) -> ConsumerMember:
    changes: dict[str, object] = {"client_id": req.client_id, "client_host": req.client_host}
    if req.instance_id is not None:
        changes["instance_id"] = req.instance_id
    if req.rack_id is not None:
        changes["rack_id"] = req.rack_id
    if req.rebalance_timeout_ms > 0:
        changes["rebalance_timeout_ms"] = req.rebalance_timeout_ms
    if req.subscribed_topic_names is not None:
        changes["subscribed_topic_names"] = tuple(sorted(set(req.subscribed_topic_names)))
    if req.subscribed_topic_regex is not None:
        changes["subscribed_topic_regex"] = req.subscribed_topic_regex or None
    if req.server_assignor is not None:
        changes["server_assignor"] = assignors.short_name(req.server_assignor)
    if req.classic is not None:
        changes["classic"] = req.classic
    return replace(member, **changes)  # type: ignore[arg-type]


def _assignment_inputs_changed(old: ConsumerMember, new: ConsumerMember, topics: Mapping[str, int]) -> bool:
    return (
        subscribed_topics(old, topics) != subscribed_topics(new, topics)
        or old.server_assignor != new.server_assignor
        or old.rack_id != new.rack_id
    )


def _new_target(
    group_id: str,
    current: Mapping[str, Assignment],
    members: Mapping[str, ConsumerMember],
    topics: Mapping[str, int],
    config: ConsumerGroupConfig,
    partition_racks: assignors.PartitionRacks,
) -> tuple[dict[str, Assignment], list[Record]]:
    name = assignors.choose(list(config.assignors), [m.server_assignor for m in members.values()])
    subscriptions = {mid: subscribed_topics(m, topics) for mid, m in members.items()}
    member_racks = {mid: m.rack_id for mid, m in members.items()}
    target = assignors.assign(name, subscriptions, topics, current, member_racks, partition_racks)
    records: list[Record] = []
    for member_id in sorted(target):
        if member_id not in current or not same_assignment(target[member_id], current[member_id]):
            value = encode_value(TargetMemberValue(target[member_id]))
            records.append((_key(TARGET_MEMBER_KEY, group_id, member_id), value))
    return target, records


def _grouped(owned: Collection[tuple[str, int]]) -> dict[str, frozenset[int]]:
    out: dict[str, set[int]] = {}
    for topic, p in owned:
        out.setdefault(topic, set()).add(p)
    return {t: frozenset(ps) for t, ps in out.items()}
