"""`__consumer_offsets` records of a consumer group (KIP-848), and their layouts.

A consumer group lives in the same partition of `__consumer_offsets` as a classic group of the same id
would (`records.partition_for`), next to its committed offsets. Its state is five kinds of records,
Kafka's record types for consumer groups, each keyed so that compaction keeps only the latest:

* ``ConsumerGroupMetadata`` (key version 3, per group): the group epoch, and the partition counts of
  the topics the group subscribes to when that epoch was set (a change of them bumps the epoch);
* ``ConsumerGroupMemberMetadata`` (key version 5, per member): what the member asked for (instance id,
  rack, client id and host, subscribed topic names and regular expression, server assignor, rebalance
  timeout); value version 1 appends, for a member served through the classic protocol, its session
  timeout and the protocols (name, metadata) of its last JoinGroup (Kafka's ``ClassicMemberMetadata``);
* ``ConsumerGroupTargetAssignmentMetadata`` (key version 6, per group): the epoch of the target
  assignment (the group epoch the assignor last ran for);
* ``ConsumerGroupTargetAssignmentMember`` (key version 7, per member): the member's partitions in the
  target assignment;
* ``ConsumerGroupCurrentMemberAssignment`` (key version 8, per member): the member's epoch, its previous
  epoch, its reconciliation state, the partitions it owns and those it still has to revoke.

A member's removal writes tombstones for its keys 8, 7, 5 (in that order), then a new group epoch; the
group's deletion writes tombstones for keys 6 and 3. Replaying the keys in log order rebuilds the group
exactly, so a new coordinator (after a fail-over or a restart) carries on with the same epochs.

Kafka keys partitions by topic id; these records name topics, as the rest of `__consumer_offsets` does
(Strom's layouts follow the classic records' style: big-endian integers, int16-length strings with -1
for null, int32-count arrays; the value's leading int16 is its version, refused when unknown).
Partitions of a topic are a sorted int32 array. Pure: no I/O.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from dataclasses import dataclass

from strom.coordinator.records import RecordFormatError, _Reader, _string

GROUP_METADATA_KEY = 3
MEMBER_METADATA_KEY = 5
TARGET_METADATA_KEY = 6
TARGET_MEMBER_KEY = 7
CURRENT_ASSIGNMENT_KEY = 8
CONSUMER_KEY_VERSIONS = frozenset(
    {GROUP_METADATA_KEY, MEMBER_METADATA_KEY, TARGET_METADATA_KEY, TARGET_MEMBER_KEY, CURRENT_ASSIGNMENT_KEY}
)
VALUE_VERSION = 0
# A member's metadata with its classic protocol metadata appended (a classic member of a consumer group).
CLASSIC_MEMBER_VALUE_VERSION = 1

_I8 = struct.Struct(">b")
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")

# topic -> partitions: how every record and the state machine hold a set of partitions.
Assignment = Mapping[str, frozenset[int]]


def key_version(key: bytes) -> int:
    """The leading int16 of a `__consumer_offsets` key: what kind of record it is (-1 if too short)."""
    return int(_I16.unpack_from(key)[0]) if len(key) >= 2 else -1


@dataclass(frozen=True, slots=True)
class ConsumerKey:
    """Any consumer-group key: ``member_id`` is None for the per-group ones (versions 3 and 6)."""

    version: int
    group: str
    member_id: str | None = None


@dataclass(frozen=True, slots=True)
class GroupMetadataValue:
    epoch: int
    topics: Mapping[str, int]  # subscribed topic -> partition count at that epoch


@dataclass(frozen=True, slots=True)
class ClassicMemberMetadata:
    """A member served through the classic protocol (JoinGroup, SyncGroup, Heartbeat) in a consumer
    group: its session timeout and the ``(name, metadata)`` protocols of its last JoinGroup."""

    session_timeout_ms: int
    protocols: tuple[tuple[str, bytes], ...]


@dataclass(frozen=True, slots=True)
class MemberMetadataValue:
    instance_id: str | None
    rack_id: str | None
    client_id: str
    client_host: str
    subscribed_topic_names: tuple[str, ...]
    subscribed_topic_regex: str | None
    server_assignor: str | None
    rebalance_timeout_ms: int
    classic: ClassicMemberMetadata | None = None


@dataclass(frozen=True, slots=True)
class TargetMetadataValue:
    assignment_epoch: int


@dataclass(frozen=True, slots=True)
class TargetMemberValue:
    partitions: Assignment


@dataclass(frozen=True, slots=True)
class CurrentAssignmentValue:
    member_epoch: int
    previous_member_epoch: int
    state: int  # MemberState's value
    assigned: Assignment
    revoking: Assignment


ConsumerValue = (
    GroupMetadataValue
    | MemberMetadataValue
    | TargetMetadataValue
    | TargetMemberValue
    | CurrentAssignmentValue
)
_PER_GROUP = frozenset({GROUP_METADATA_KEY, TARGET_METADATA_KEY})


# --- writing -----------------------------------------------------------------------------------


def encode_key(key: ConsumerKey) -> bytes:
    return encode_group_key(
        key.version, key.group, None if key.version in _PER_GROUP else key.member_id or ""
    )


def encode_group_key(version: int, group: str, member_id: str | None) -> bytes:
    """A group record's key: version, group, and the member for a per-member kind (``member_id`` not
    None); share groups' keys (`strom.coordinator.share.records`) have the same layout."""
    out = bytearray(_I16.pack(version))
    _string(out, group)
    if member_id is not None:
        _string(out, member_id)
    return bytes(out)


def _assignment(out: bytearray, partitions: Assignment) -> None:
    topics = sorted(t for t, ps in partitions.items() if ps)
    out += _I32.pack(len(topics))
    for topic in topics:
        _string(out, topic)
        ps = sorted(partitions[topic])
        out += _I32.pack(len(ps))
        out += struct.pack(f">{len(ps)}i", *ps)


def encode_value(value: ConsumerValue) -> bytes:
    classic = value.classic if isinstance(value, MemberMetadataValue) else None
    out = bytearray(_I16.pack(VALUE_VERSION if classic is None else CLASSIC_MEMBER_VALUE_VERSION))
    if isinstance(value, GroupMetadataValue):
        out += _I32.pack(value.epoch)
        out += _I32.pack(len(value.topics))
        for topic, count in sorted(value.topics.items()):
            _string(out, topic)
            out += _I32.pack(count)
    elif isinstance(value, MemberMetadataValue):
        _string(out, value.instance_id)
        _string(out, value.rack_id)
        _string(out, value.client_id)
        _string(out, value.client_host)
        out += _I32.pack(len(value.subscribed_topic_names))
        for name in value.subscribed_topic_names:
            _string(out, name)
        _string(out, value.subscribed_topic_regex)
        _string(out, value.server_assignor)
        out += _I32.pack(value.rebalance_timeout_ms)
        if classic is not None:
            out += _I32.pack(classic.session_timeout_ms)
            out += _I32.pack(len(classic.protocols))
            for name, metadata in classic.protocols:
                _string(out, name)
                out += _I32.pack(len(metadata))
                out += metadata
    elif isinstance(value, TargetMetadataValue):
        out += _I32.pack(value.assignment_epoch)
    elif isinstance(value, TargetMemberValue):
        _assignment(out, value.partitions)
    else:
        out += _I32.pack(value.member_epoch)
        out += _I32.pack(value.previous_member_epoch)
        out += _I8.pack(value.state)
        _assignment(out, value.assigned)
        _assignment(out, value.revoking)
    return bytes(out)


# --- reading -----------------------------------------------------------------------------------


def decode_key(data: bytes) -> ConsumerKey:
    return ConsumerKey(*decode_group_key(data, CONSUMER_KEY_VERSIONS, _PER_GROUP, "consumer-group"))


def decode_group_key(
    data: bytes, versions: frozenset[int], per_group: frozenset[int], kind: str
) -> tuple[int, str, str | None]:
    """(version, group, member id or None) of a key of ``versions`` (those in ``per_group`` name no
    member)."""
    r = _Reader(data)
    version = r.i16()
    if version not in versions:
        raise RecordFormatError(f"not a {kind} key version: {version}")
    group = r.string()
    member = None if version in per_group else r.string()
    r.done()
    return version, group, member


def _count(r: _Reader) -> int:
    count = r.i32()
    if count < 0 or count > len(r.data):
        raise RecordFormatError(f"bad array count {count}")
    return count


def _read_assignment(r: _Reader) -> dict[str, frozenset[int]]:
    out: dict[str, frozenset[int]] = {}
    for _ in range(_count(r)):
        topic = r.string()
        out[topic] = frozenset(r.i32() for _ in range(_count(r)))
    return out


def _read_classic(r: _Reader) -> ClassicMemberMetadata:
    session_timeout_ms = r.i32()
    protocols = []
    for _ in range(_count(r)):
        protocols.append((r.string(), r.bytes_()))
    return ClassicMemberMetadata(session_timeout_ms, tuple(protocols))


def decode_value(key: ConsumerKey, data: bytes) -> ConsumerValue:
    r = _Reader(data)
    version = r.i16()
    known = (VALUE_VERSION, CLASSIC_MEMBER_VALUE_VERSION) if key.version == MEMBER_METADATA_KEY else (0,)
    if version not in known:
        raise RecordFormatError(f"unknown consumer-group value version {version} (key {key.version})")
    value: ConsumerValue
    if key.version == GROUP_METADATA_KEY:
        epoch = r.i32()
        value = GroupMetadataValue(epoch, {r.string(): r.i32() for _ in range(_count(r))})
    elif key.version == MEMBER_METADATA_KEY:
        value = MemberMetadataValue(
            instance_id=r.nullable_string(),
            rack_id=r.nullable_string(),
            client_id=r.string(),
            client_host=r.string(),
            subscribed_topic_names=tuple(r.string() for _ in range(_count(r))),
            subscribed_topic_regex=r.nullable_string(),
            server_assignor=r.nullable_string(),
            rebalance_timeout_ms=r.i32(),
            classic=_read_classic(r) if version == CLASSIC_MEMBER_VALUE_VERSION else None,
        )
    elif key.version == TARGET_METADATA_KEY:
        value = TargetMetadataValue(r.i32())
    elif key.version == TARGET_MEMBER_KEY:
        value = TargetMemberValue(_read_assignment(r))
    else:
        value = CurrentAssignmentValue(
            member_epoch=r.i32(),
            previous_member_epoch=r.i32(),
            state=r._take(_I8),
            assigned=_read_assignment(r),
            revoking=_read_assignment(r),
        )
    r.done()
    return value
