"""`__consumer_offsets` records of a share group (KIP-932): members, epochs and the assignment, durable.

A share group lives in the same `__consumer_offsets` partition as a classic or consumer group of its id
would. Its membership is five kinds of records, Kafka's record types for share groups, each keyed so
that compaction keeps only the latest:

* ``ShareGroupMemberMetadata`` (key version 10, per member): rack, client id and host, subscribed
  topic names;
* ``ShareGroupMetadata`` (key version 11, per group): the group epoch;
* ``ShareGroupTargetAssignmentMetadata`` (key version 12, per group): the assignment epoch;
* ``ShareGroupTargetAssignmentMember`` (key version 13, per member): the member's partitions in the
  target assignment;
* ``ShareGroupCurrentMemberAssignment`` (key version 14, per member): the member's epoch, its previous
  epoch, its state (always stable: share members never revoke) and the partitions it has.
* ``ShareGroupStatePartitionMetadata`` (key version 15, per group): the share-partitions the group
  was ever assigned (so began to read), topic -> partitions: an empty group's offsets are described by
  them. A decision that assigns a partition first adds it (`records_for`, which also drops the topics
  that no longer exist); `forget` drops topics (DeleteShareGroupOffsets); DeleteGroups' tombstones end it.

`records_for` is what a change of a group writes: the difference between the group and the draft a
decision of `strom.coordinator.share.membership` left (only the members the draft changed are looked
at, so a decision's records cost what it changed; a member's removal: tombstones for its keys 14, 13,
10). A group whose last member left stays, Empty, with its epochs, as Kafka keeps it; `tombstones` end
it (DeleteGroups): 12 and 11, whose tombstone removes the group at a replay. `replay` applies one
record to the groups, so replaying a partition in log order rebuilds every share group with its
member ids and epochs (what was last *sent* to a member is not durable: a new coordinator sends each
member its assignment again at its next heartbeat).

The values have the layouts of the consumer group's records of the same roles
(`strom.coordinator.consumer.records`: versions 5, 3, 6, 7 and 8; version 15 that of a target member's
partitions, 7), which name topics rather than ids, as
the rest of `__consumer_offsets` does. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass

from strom.coordinator.consumer import records as consumer
from strom.coordinator.share.membership import GroupDraft, ShareGroup, ShareMember

__all__ = [
    "SHARE_KEY_VERSIONS",
    "ShareKey",
    "decode_key",
    "forget",
    "records_for",
    "replay",
    "tombstones",
]

MEMBER_METADATA_KEY = 10
GROUP_METADATA_KEY = 11
TARGET_METADATA_KEY = 12
TARGET_MEMBER_KEY = 13
CURRENT_ASSIGNMENT_KEY = 14
PARTITION_METADATA_KEY = 15
SHARE_KEY_VERSIONS = frozenset(
    {
        MEMBER_METADATA_KEY,
        GROUP_METADATA_KEY,
        TARGET_METADATA_KEY,
        TARGET_MEMBER_KEY,
        CURRENT_ASSIGNMENT_KEY,
        PARTITION_METADATA_KEY,
    }
)
_PER_GROUP = frozenset({GROUP_METADATA_KEY, TARGET_METADATA_KEY, PARTITION_METADATA_KEY})
# The consumer group's record of the same role, whose value layout a share record has.
_LAYOUT = {
    MEMBER_METADATA_KEY: consumer.MEMBER_METADATA_KEY,
    GROUP_METADATA_KEY: consumer.GROUP_METADATA_KEY,
    TARGET_METADATA_KEY: consumer.TARGET_METADATA_KEY,
    TARGET_MEMBER_KEY: consumer.TARGET_MEMBER_KEY,
    CURRENT_ASSIGNMENT_KEY: consumer.CURRENT_ASSIGNMENT_KEY,
    PARTITION_METADATA_KEY: consumer.TARGET_MEMBER_KEY,
}
STABLE = 0  # a current assignment's state: share members never revoke

Record = tuple[bytes, bytes | None]


@dataclass(frozen=True, slots=True)
class ShareKey:
    """Any share-group key: ``member_id`` is None for the per-group ones (versions 11, 12 and 15)."""

    version: int
    group: str
    member_id: str | None = None


def encode_key(key: ShareKey) -> bytes:
    return consumer.encode_group_key(
        key.version, key.group, None if key.version in _PER_GROUP else key.member_id or ""
    )


def decode_key(data: bytes) -> ShareKey:
    return ShareKey(*consumer.decode_group_key(data, SHARE_KEY_VERSIONS, _PER_GROUP, "share-group"))


def _value(key: ShareKey, data: bytes) -> consumer.ConsumerValue:
    return consumer.decode_value(consumer.ConsumerKey(_LAYOUT[key.version], key.group, key.member_id), data)


# --- writing: what a decision changed -------------------------------------------------------------


def _metadata(member: ShareMember) -> consumer.MemberMetadataValue:
    return consumer.MemberMetadataValue(
        instance_id=None,
        rack_id=member.rack_id,
        client_id=member.client_id,
        client_host=member.client_host,
        subscribed_topic_names=member.subscribed_topic_names,
        subscribed_topic_regex=None,
        server_assignor=None,
        rebalance_timeout_ms=-1,
    )


def _record(version: int, group: str, member: str | None, value: consumer.ConsumerValue | None) -> Record:
    encoded = None if value is None else consumer.encode_value(value)
    return encode_key(ShareKey(version, group, member)), encoded


def _initialized(gid: str, partitions: dict[str, frozenset[int]]) -> Record:
    value = consumer.TargetMemberValue(partitions) if partitions else None
    return _record(PARTITION_METADATA_KEY, gid, None, value)


def _grown(
    before: dict[str, frozenset[int]], assigned: Iterable[ShareMember], live: Collection[str] | None
) -> dict[str, frozenset[int]]:
    """The initialized share-partitions once the members' assignments are added (and, given the live
    topics, the topics that are gone dropped)."""
    out = dict(before) if live is None else {t: p for t, p in before.items() if t in live}
    for member in assigned:
        for topic, partitions in member.assignment.items():
            known = out.get(topic, frozenset())
            if not partitions <= known:
                out[topic] = known | partitions
    return out


def records_for(draft: GroupDraft, live_topics: Collection[str] | None = None) -> list[Record]:
    """The records that turn the draft's group into what the draft decided, in the order a replay
    needs them: only the members the draft changed are compared with the group, so the cost is what
    changed. A group without members stays (Empty, at its epoch), as Kafka keeps it. A partition
    assigned for the first time is added to the group's initialized share-partitions (key 15), from
    which topics no longer in ``live_topics`` (when given) are dropped."""
    gid, before = draft.group_id, draft.base
    old = before.members
    out: list[Record] = []
    initialized = _grown(before.initialized, draft.changed.values(), live_topics)
    if initialized != before.initialized:
        out.append(_initialized(gid, initialized))
    for member_id in sorted(draft.removed):
        for version in (CURRENT_ASSIGNMENT_KEY, TARGET_MEMBER_KEY, MEMBER_METADATA_KEY):
            out.append(_record(version, gid, member_id, None))
    changed = sorted(draft.changed.items())
    for member_id, member in changed:
        was = old.get(member_id)
        if was is None or _metadata(was) != _metadata(member):
            out.append(_record(MEMBER_METADATA_KEY, gid, member_id, _metadata(member)))
    if before.group_epoch != draft.group_epoch:
        out.append(_record(GROUP_METADATA_KEY, gid, None, consumer.GroupMetadataValue(draft.group_epoch, {})))
    for member_id, member in changed:
        was = old.get(member_id)
        if was is None or was.assignment != member.assignment:
            target = consumer.TargetMemberValue(member.assignment)
            out.append(_record(TARGET_MEMBER_KEY, gid, member_id, target))
    if before.assignment_epoch != draft.assignment_epoch:
        epoch = consumer.TargetMetadataValue(draft.assignment_epoch)
        out.append(_record(TARGET_METADATA_KEY, gid, None, epoch))
    for member_id, member in changed:
        was = old.get(member_id)
        if was is None or (was.member_epoch, was.assignment) != (member.member_epoch, member.assignment):
            previous = 0 if was is None else was.member_epoch
            current = consumer.CurrentAssignmentValue(
                member.member_epoch, previous, STABLE, member.assignment, {}
            )
            out.append(_record(CURRENT_ASSIGNMENT_KEY, gid, member_id, current))
    return out


def tombstones(group: ShareGroup) -> list[Record]:
    """The records that delete the group (DeleteGroups of an empty one): its members' keys, then its
    target epoch and its group epoch, whose tombstone ends the group at a replay."""
    gid = group.group_id
    out = [
        _record(version, gid, member_id, None)
        for member_id in sorted(group.members)
        for version in (CURRENT_ASSIGNMENT_KEY, TARGET_MEMBER_KEY, MEMBER_METADATA_KEY)
    ]
    if group.initialized:
        out.append(_initialized(gid, {}))
    out.append(_record(TARGET_METADATA_KEY, gid, None, None))
    out.append(_record(GROUP_METADATA_KEY, gid, None, None))
    return out


def forget(group: ShareGroup, topics: Collection[str]) -> list[Record]:
    """The record that drops topics from the group's initialized share-partitions (their states were
    deleted: DeleteShareGroupOffsets); nothing when it has none of them."""
    kept = {t: p for t, p in group.initialized.items() if t not in topics}
    return [] if kept == group.initialized else [_initialized(group.group_id, kept)]


# --- reading: one record into the groups ----------------------------------------------------------


def replay(groups: dict[str, ShareGroup], key: bytes, value: bytes | None) -> None:
    """Apply one share-group record to ``groups`` (changed in place).

    Raises:
        RecordFormatError: the key or value is not a share-group record this reader knows
            (`strom.coordinator.records.RecordFormatError`).
    """
    decoded = decode_key(key)
    body = None if value is None else _value(decoded, value)
    group = groups.get(decoded.group)
    if group is None:
        if body is None:
            return
        group = groups[decoded.group] = ShareGroup(decoded.group)
    if decoded.member_id is None:
        if body is None:
            if decoded.version == GROUP_METADATA_KEY:
                del groups[decoded.group]
            elif decoded.version == PARTITION_METADATA_KEY:
                group.initialized = {}
        elif isinstance(body, consumer.GroupMetadataValue):
            group.group_epoch = body.epoch
        elif isinstance(body, consumer.TargetMetadataValue):
            group.assignment_epoch = body.assignment_epoch
        elif isinstance(body, consumer.TargetMemberValue):
            group.initialized = dict(body.partitions)
        return
    member_id = decoded.member_id
    if body is None:
        group.members.pop(member_id, None)
        return
    member = group.members.get(member_id)
    if member is None:
        member = group.members[member_id] = ShareMember(member_id, 0, ())
    if isinstance(body, consumer.MemberMetadataValue):
        member.subscribed_topic_names = tuple(body.subscribed_topic_names)
        member.client_id = body.client_id
        member.client_host = body.client_host
        member.rack_id = body.rack_id
    elif isinstance(body, consumer.TargetMemberValue):
        member.assignment = dict(body.partitions)
    elif isinstance(body, consumer.CurrentAssignmentValue):
        member.member_epoch = body.member_epoch
        member.assignment = dict(body.assigned)
