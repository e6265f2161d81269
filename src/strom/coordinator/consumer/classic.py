"""Classic members of a consumer group, and online conversion between the two group types (pure).

KIP-848's online migration lets a group change protocol while its members keep consuming:

* **Upgrade**: a ConsumerGroupHeartbeat for a classic group with members (``group.consumer.migration.
  policy`` ``upgrade`` or ``bidirectional``, the group on the ``consumer`` protocol type) turns it into a
  consumer group at once (`upgrade_records`): each classic member becomes a member at member epoch =
  the generation, owning what its last SyncGroup gave it (the target assignment too, so nothing moves
  yet); the classic group's membership is written empty (its committed offsets stay where they are).
  The joining member then bumps the group epoch like any newcomer.
* **Classic members** (whatever the policy, as Kafka): a JoinGroup, SyncGroup, Heartbeat or LeaveGroup
  for a consumer group with members is served there. A JoinGroup is the member's heartbeat in the
  consumer group's terms (`join_request`): its subscription is read from the consumer protocol
  metadata of its first protocol, the partitions it still owns from that subscription (cooperative
  clients list them; an eager client has revoked everything before rejoining), and the same
  reconciliation as for every member decides what it gets: the JoinGroup answer carries its member
  epoch as the generation and no leader (the broker assigns), the SyncGroup answer its partitions. A
  Heartbeat answers REBALANCE_IN_PROGRESS when the member must rejoin to move on (`heartbeat_error`:
  the group epoch moved past it, it has partitions to revoke, or partitions it waits for are free).
* **Downgrade**: when the last member on the consumer protocol leaves or is removed and the others all
  use the classic protocol (policy ``downgrade`` or ``bidirectional``), the consumer group's records get
  tombstones and a classic group takes its place (`downgrade_records`), at generation = the group
  epoch, with the members, their protocols and their partitions; the caller then starts a classic
  rebalance, so the members rejoin and their leader assigns.

Subscriptions and assignments are the consumer protocol's embedded formats (``ConsumerProtocol
Subscription`` v0-v3: version, topics, user data, then owned partitions, generation, rack;
``ConsumerProtocolAssignment``: version, partitions by topic, user data); unreadable metadata makes a
conversion or a join impossible (GROUP_ID_NOT_FOUND, INCONSISTENT_GROUP_PROTOCOL).
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from dataclasses import dataclass

from strom.coordinator.consumer.heartbeat import (
    HeartbeatRequest,
    Record,
    assignment_record,
    epoch_record,
    group_tombstones,
    member_records,
    member_tombstones,
    removal_records,
    target_records,
)
from strom.coordinator.consumer.model import ConsumerGroup, ConsumerMember, MemberState
from strom.coordinator.consumer.records import Assignment, ClassicMemberMetadata
from strom.coordinator.group import CONSUMER_PROTOCOL_TYPE, Group, Member
from strom.coordinator.messages import GroupSummary, MemberSummary
from strom.coordinator.records import GroupMetadataKey
from strom.coordinator.records import encode_key as classic_key
from strom.coordinator.records import encode_value as classic_value
from strom.coordinator.store import group_metadata_value
from strom.protocol.errors import ErrorCode

MIGRATION_POLICIES = ("disabled", "downgrade", "upgrade", "bidirectional")


def upgrade_enabled(policy: str) -> bool:
    return policy in ("upgrade", "bidirectional")


def downgrade_enabled(policy: str) -> bool:
    return policy in ("downgrade", "bidirectional")


# --- the embedded consumer protocol ------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Subscription:
    topics: tuple[str, ...]
    owned: tuple[tuple[str, int], ...] = ()
    rack_id: str | None = None


class _Cursor:
    def __init__(self, data: bytes) -> None:
        self.data, self.pos = data, 0

    def unpack(self, fmt: str) -> int:
        (value,) = struct.unpack_from(fmt, self.data, self.pos)
        self.pos += struct.calcsize(fmt)
        return int(value)

    def count(self) -> int:
        n = self.unpack(">i")
        if n > len(self.data):
            raise ValueError("bad array length")
        return max(n, 0)

    def string(self) -> str | None:
        n = self.unpack(">h")
        if n < 0:
            return None
        if self.pos + n > len(self.data):
            raise ValueError("string past the end")
        text = self.data[self.pos : self.pos + n].decode()
        self.pos += n
        return text

    def skip_bytes(self) -> None:
        n = self.unpack(">i")
        if n > 0:
            self.pos += n
        if self.pos > len(self.data):
            raise ValueError("bytes past the end")

    def partitions(self) -> list[tuple[str, int]]:
        out = []
        for _ in range(self.count()):
            topic = self.string() or ""
            out += [(topic, self.unpack(">i")) for _ in range(self.count())]
        return out


def parse_subscription(data: bytes) -> Subscription:
    """A ``ConsumerProtocolSubscription`` (v0-v3). Raises ValueError when it is not one."""
    try:
        cur = _Cursor(data)
        version = cur.unpack(">h")
        if version < 0:
            raise ValueError(f"subscription version {version}")
        topics = tuple(cur.string() or "" for _ in range(cur.count()))
        cur.skip_bytes()  # user data
        owned: list[tuple[str, int]] = []
        rack = None
        if version >= 1 and cur.pos < len(data):
            owned = cur.partitions()
        if version >= 2 and cur.pos < len(data):
            cur.unpack(">i")  # generation
        if version >= 3 and cur.pos < len(data):
            rack = cur.string()
    except (struct.error, UnicodeDecodeError) as exc:
        raise ValueError(f"unreadable consumer protocol subscription: {exc}") from None
    return Subscription(topics, tuple(owned), rack)


def parse_assignment(data: bytes) -> dict[str, frozenset[int]]:
    """The partitions of a ``ConsumerProtocolAssignment`` (empty bytes: none). Raises ValueError."""
    if not data:
        return {}
    try:
        cur = _Cursor(data)
        cur.unpack(">h")
        out: dict[str, set[int]] = {}
        for topic, p in cur.partitions():
            out.setdefault(topic, set()).add(p)
    except (struct.error, UnicodeDecodeError) as exc:
        raise ValueError(f"unreadable consumer protocol assignment: {exc}") from None
    return {t: frozenset(ps) for t, ps in out.items()}


def encode_assignment(assigned: Assignment) -> bytes:
    """A version 0 ``ConsumerProtocolAssignment`` of the partitions, with empty user data."""
    out = bytearray(struct.pack(">h", 0))
    topics = sorted(t for t, ps in assigned.items() if ps)
    out += struct.pack(">i", len(topics))
    for topic in topics:
        name = topic.encode()
        ps = sorted(assigned[topic])
        out += struct.pack(">h", len(name)) + name + struct.pack(f">i{len(ps)}i", len(ps), *ps)
    out += struct.pack(">i", 0)
    return bytes(out)


def encode_subscription(topics: tuple[str, ...]) -> bytes:
    """A version 0 ``ConsumerProtocolSubscription`` of the topics, without user data."""
    out = bytearray(struct.pack(">hi", 0, len(topics)))
    for topic in topics:
        name = topic.encode()
        out += struct.pack(">h", len(name)) + name
    out += struct.pack(">i", -1)
    return bytes(out)


def described(group: ConsumerGroup, assignor: str) -> GroupSummary:
    """DescribeGroups (the classic API) of a consumer group, as Kafka describes one: protocol type
    ``consumer``, the assignor as protocol, the state in lower case, and each member with its
    subscription and partitions in the embedded consumer protocol."""
    return GroupSummary(
        group.group_id,
        group.state.value.lower(),
        CONSUMER_PROTOCOL_TYPE,
        assignor,
        tuple(
            MemberSummary(
                m.member_id,
                m.instance_id,
                m.client_id,
                m.client_host,
                encode_subscription(m.subscribed_topic_names),
                encode_assignment(m.assigned),
            )
            for m in group.members.values()
        ),
    )


def subscription_of(protocols: tuple[tuple[str, bytes], ...]) -> Subscription:
    """The subscription a classic member sends, read from its first protocol (they all carry it)."""
    if not protocols:
        raise ValueError("no protocol")
    return parse_subscription(protocols[0][1])


# --- classic members in a consumer group -------------------------------------------------------


def supports_classic_protocols(group: ConsumerGroup, protocol_type: str, names: list[str]) -> bool:
    """A joining classic member must use the consumer protocol type and share a protocol name with
    the classic members already there (Kafka's ``supportsClassicProtocols``)."""
    if protocol_type != CONSUMER_PROTOCOL_TYPE or not names:
        return False
    common = set(names)
    for member in group.members.values():
        if member.classic is not None:
            common &= {name for name, _ in member.classic.protocols}
    return bool(common)


def join_request(
    group: ConsumerGroup,
    member_id: str,
    instance_id: str | None,
    protocols: tuple[tuple[str, bytes], ...],
    session_timeout_ms: int,
    rebalance_timeout_ms: int,
    client_id: str,
    client_host: str,
) -> HeartbeatRequest:
    """A classic member's JoinGroup as the heartbeat that reconciles it. Raises ValueError when its
    subscription cannot be read."""
    subscription = subscription_of(protocols)
    known = group.members.get(member_id)
    return HeartbeatRequest(
        group_id=group.group_id,
        member_id=member_id,
        # A known member passes the epoch check; a new one joins.
        member_epoch=known.member_epoch if known is not None and known.member_epoch > 0 else 0,
        instance_id=instance_id,
        rack_id=subscription.rack_id,
        rebalance_timeout_ms=rebalance_timeout_ms,
        subscribed_topic_names=subscription.topics,
        owned=subscription.owned,
        client_id=client_id,
        client_host=client_host,
        classic=ClassicMemberMetadata(session_timeout_ms, protocols),
    )


def classic_member(
    group: ConsumerGroup | None, member_id: str, instance_id: str | None, generation_id: int
) -> ConsumerMember | ErrorCode:
    """The classic member a SyncGroup or Heartbeat names, or why not: UNKNOWN_MEMBER_ID (not a member,
    or not a classic one), FENCED_INSTANCE_ID (its instance id is another member's), ILLEGAL_GENERATION
    (the generation is not its member epoch)."""
    member = None if group is None else group.members.get(member_id)
    if group is not None and instance_id is not None:
        static = group.static_member(instance_id)
        if static is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if static.member_id != member_id:
            return ErrorCode.FENCED_INSTANCE_ID
    if member is None or member.classic is None:
        return ErrorCode.UNKNOWN_MEMBER_ID
    if generation_id != member.member_epoch:
        return ErrorCode.ILLEGAL_GENERATION
    return member


def heartbeat_error(group: ConsumerGroup, member: ConsumerMember) -> ErrorCode:
    """REBALANCE_IN_PROGRESS when the classic member must rejoin to make progress: the group epoch is
    past its epoch, it must revoke partitions, or partitions it waits for have been released."""
    if (
        member.member_epoch < group.group_epoch
        or member.state is MemberState.UNREVOKED_PARTITIONS
        or (member.state is MemberState.UNRELEASED_PARTITIONS and not group.waiting_on_unreleased(member))
    ):
        return ErrorCode.REBALANCE_IN_PROGRESS
    return ErrorCode.NONE


def sync_error(
    group: ConsumerGroup, member: ConsumerMember, protocol_type: str | None, name: str | None
) -> ErrorCode:
    """A classic member's SyncGroup: INCONSISTENT_GROUP_PROTOCOL for another protocol than its own,
    REBALANCE_IN_PROGRESS when it must rejoin first (it is behind the group epoch with nothing to
    revoke)."""
    assert member.classic is not None
    if (protocol_type is not None and protocol_type != CONSUMER_PROTOCOL_TYPE) or (
        name is not None and name not in {n for n, _ in member.classic.protocols}
    ):
        return ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    if group.group_epoch > member.member_epoch and member.state is not MemberState.UNREVOKED_PARTITIONS:
        return ErrorCode.REBALANCE_IN_PROGRESS
    return ErrorCode.NONE


# --- conversions -------------------------------------------------------------------------------


def upgrade_records(classic: Group, topics: Mapping[str, int]) -> list[Record]:
    """The records that turn a classic group with members into a consumer group (see the module
    docstring): its membership written empty, then the consumer group at the classic generation.
    Raises ValueError when a member's subscription or assignment cannot be read."""
    if classic.protocol_type != CONSUMER_PROTOCOL_TYPE:
        raise ValueError(f"protocol type {classic.protocol_type!r} is not the consumer protocol")
    group_id, epoch = classic.group_id, classic.generation_id
    members: list[ConsumerMember] = []
    for m in classic.members.values():
        data = m.metadata(classic.protocol_name) if classic.protocol_name else m.protocols[0][1]
        subscription = parse_subscription(data)
        assigned = {t: ps for t, ps in parse_assignment(m.assignment).items() if t in topics}
        members.append(
            ConsumerMember(
                m.member_id,
                instance_id=m.group_instance_id,
                rack_id=subscription.rack_id,
                client_id=m.client_id,
                client_host=m.client_host,
                subscribed_topic_names=tuple(sorted(set(subscription.topics))),
                rebalance_timeout_ms=m.rebalance_timeout_ms,
                member_epoch=epoch,
                previous_member_epoch=epoch,
                assigned=assigned,
                classic=ClassicMemberMetadata(m.session_timeout_ms, m.protocols),
            )
        )
    subscribed = {t for m in members for t in m.subscribed_topic_names if t in topics}
    # The classic group without members: what a replay rebuilds is its committed offsets only.
    emptied = group_metadata_value(
        Group(group_id, generation_id=epoch, current_state_timestamp_ms=classic.current_state_timestamp_ms)
    )
    records: list[Record] = [(classic_key(GroupMetadataKey(group_id)), classic_value(emptied))]
    records.append(epoch_record(group_id, epoch, {t: topics[t] for t in sorted(subscribed)}))
    for member in members:
        records += member_records(group_id, member)
    records += target_records(group_id, epoch, {m.member_id: m.assigned for m in members})
    records += [assignment_record(group_id, member) for member in members]
    return records


def downgrade_records(group: ConsumerGroup, leaving_member_id: str, now_ms: int) -> list[Record]:
    """The records that turn a consumer group into a classic group once ``leaving_member_id`` (its
    last member on the consumer protocol) is gone: tombstones for every consumer-group record, then
    the classic group's membership at generation = the group epoch, each member with its protocols
    and its partitions. Raises ValueError when the members share no protocol."""
    stay = [m for mid, m in group.members.items() if mid != leaving_member_id and m.classic is not None]
    protocol = _common_protocol([m.classic for m in stay if m.classic is not None])
    records: list[Record] = []
    for member_id in group.members:
        records += member_tombstones(group.group_id, member_id)
    records += group_tombstones(group.group_id)
    classic_group = Group(
        group.group_id,
        generation_id=group.group_epoch,
        protocol_type=CONSUMER_PROTOCOL_TYPE,
        protocol_name=protocol,
        current_state_timestamp_ms=now_ms,
    )
    for m in stay:
        assert m.classic is not None
        member = Member(
            m.member_id,
            m.instance_id,
            m.client_id,
            m.client_host,
            m.rebalance_timeout_ms,
            m.classic.session_timeout_ms,
            CONSUMER_PROTOCOL_TYPE,
            m.classic.protocols,
            assignment=encode_assignment(m.assigned),
        )
        classic_group.add(member)
    value = group_metadata_value(classic_group)
    records.append((classic_key(GroupMetadataKey(group.group_id)), classic_value(value)))
    return records


def _common_protocol(classics: list[ClassicMemberMetadata]) -> str:
    """The protocol every member supports that most of them prefer (first in their own lists)."""
    common = set.intersection(*({n for n, _ in c.protocols} for c in classics)) if classics else set()
    if not common:
        raise ValueError("the classic members share no protocol")
    votes: dict[str, int] = {}
    for c in classics:
        first = next(n for n, _ in c.protocols if n in common)
        votes[first] = votes.get(first, 0) + 1
    return max(sorted(votes), key=lambda n: votes[n])


def removal(
    group: ConsumerGroup, member_id: str, topics: Mapping[str, int], policy: str, now_ms: int
) -> tuple[list[Record], bool]:
    """A member leaving or removed: its removal records, or (True) the downgrade's when only classic
    members would remain and ``policy`` allows it (a downgrade the members' protocols rule out is
    an ordinary removal)."""
    if downgrade_enabled(policy) and group.classic_only_without(member_id):
        try:
            return downgrade_records(group, member_id, now_ms), True
        except ValueError:
            pass
    return removal_records(group, member_id, topics), False
