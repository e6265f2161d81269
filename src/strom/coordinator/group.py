"""One consumer group's membership: members, generation, leader, chosen protocol, committed offsets.

Everything here is a pure decision on in-memory state (no clock reads, no timers, no I/O); the
coordinator (`coordinator.py`) drives it and owns timing and persistence.

Members and the protocols they offer: each member lists ``(name, metadata)`` pairs in its order of
preference, e.g. ``[("cooperative-sticky", ...), ("range", ...)]``. The protocol metadata is opaque to
the broker (the consumer's subscription, encoded by the client's assignor) and is relayed untouched to the
group leader, which computes the assignment on the client side. The group's protocol is chosen as Kafka
does: among the protocols *every* member supports, each member votes for the first one in its own list,
and the most-voted wins (ties go to the protocol the earliest member prefers, to stay deterministic).

Static members (KIP-345) carry a ``group_instance_id``; `static_members` maps it to the member id
currently holding it, so a restarted static consumer can take its old place (and old assignment) back.
Pending members (KIP-394) are member ids handed out by a MEMBER_ID_REQUIRED answer and not yet used.

Not thread-safe; the coordinator calls it from the broker's event loop only.
"""

from __future__ import annotations

import struct
from collections import Counter
from dataclasses import dataclass, field

from strom.coordinator.messages import (
    GroupSummary,
    JoinCallback,
    JoinMember,
    MemberSummary,
    OffsetAndMetadata,
    SyncCallback,
    TopicPartition,
)
from strom.coordinator.state import GroupState, check_transition

CONSUMER_PROTOCOL_TYPE = "consumer"
# Kafka keeps a member that joined but never got a first join response for at most this long, so a
# client that vanished mid-rebalance cannot stall the group for a whole rebalance timeout.
NEW_MEMBER_JOIN_TIMEOUT_MS = 300_000


@dataclass(slots=True, eq=False)
class Member:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    protocols: tuple[tuple[str, bytes], ...]
    assignment: bytes = b""
    join_callback: JoinCallback | None = None
    sync_callback: SyncCallback | None = None
    last_heartbeat_ms: int = 0
    is_new: bool = False
    # True while a session-expiry timer for this member is scheduled (see GroupCoordinator).
    timer_armed: bool = False

    @property
    def awaiting_join(self) -> bool:
        return self.join_callback is not None

    @property
    def awaiting_sync(self) -> bool:
        return self.sync_callback is not None

    def metadata(self, protocol: str) -> bytes:
        for name, data in self.protocols:
            if name == protocol:
                return data
        raise KeyError(f"member {self.member_id} does not support protocol {protocol}")

    def protocol_names(self) -> list[str]:
        return [name for name, _ in self.protocols]

    def matches(self, protocols: tuple[tuple[str, bytes], ...]) -> bool:
        """Same protocols, same order, same metadata: a rejoin that changes nothing."""
        return self.protocols == protocols

    def should_keep_alive(self, now_ms: int) -> bool:
        """Kafka's `shouldKeepAlive`: parked requests keep a member alive, otherwise its heartbeats do.

        A member parked in JoinGroup is waiting on the coordinator, not failing; it is bounded by the
        rebalance timeout instead (new members by NEW_MEMBER_JOIN_TIMEOUT_MS). One parked in SyncGroup
        waits for the leader's assignment.
        """
        if self.awaiting_join:
            return not self.is_new or self.last_heartbeat_ms + NEW_MEMBER_JOIN_TIMEOUT_MS > now_ms
        if self.awaiting_sync:
            return True
        return self.last_heartbeat_ms + self.session_timeout_ms > now_ms


@dataclass(slots=True, eq=False)
class Group:
    group_id: str
    state: GroupState = GroupState.EMPTY
    generation_id: int = 0
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str | None = None
    members: dict[str, Member] = field(default_factory=dict)
    pending_members: set[str] = field(default_factory=set)
    static_members: dict[str, str] = field(default_factory=dict)
    offsets: dict[TopicPartition, OffsetAndMetadata] = field(default_factory=dict)
    # Initial rebalance delay (Kafka's InitialDelayedJoin): set when a member joins during it.
    new_member_added: bool = False
    current_state_timestamp_ms: int = -1

    # --- state ---------------------------------------------------------------------------------
    def transition_to(self, target: GroupState, now_ms: int) -> None:
        check_transition(self.group_id, self.state, target)
        self.state = target
        self.current_state_timestamp_ms = now_ms

    def is_(self, state: GroupState) -> bool:
        return self.state is state

    # --- membership ----------------------------------------------------------------------------
    def has(self, member_id: str) -> bool:
        return member_id in self.members

    def is_leader(self, member_id: str) -> bool:
        return self.leader_id == member_id

    def add(self, member: Member) -> None:
        if not self.members:
            self.protocol_type = member.protocol_type
        self.members[member.member_id] = member
        if member.group_instance_id is not None:
            self.static_members[member.group_instance_id] = member.member_id
        if self.leader_id is None:
            self.leader_id = member.member_id

    def remove(self, member_id: str) -> Member | None:
        member = self.members.pop(member_id, None)
        if member is None:
            return None
        if member.group_instance_id is not None:
            self.static_members.pop(member.group_instance_id, None)
        if self.leader_id == member_id:
            self.leader_id = next(iter(self.members), None)
        return member

    def static_member_id(self, group_instance_id: str | None) -> str | None:
        return None if group_instance_id is None else self.static_members.get(group_instance_id)

    def is_static_member_fenced(self, member_id: str, group_instance_id: str | None) -> bool:
        """A known instance id presented with another member id: an older incarnation (KIP-345)."""
        if group_instance_id is None:
            return False
        current = self.static_members.get(group_instance_id)
        return current is not None and current != member_id

    def replace_static_member(self, group_instance_id: str, old_id: str, new_id: str) -> Member:
        """Give a restarted static member a fresh member id, keeping its place and assignment."""
        member = self.members.pop(old_id)
        member.member_id = new_id
        self.members[new_id] = member
        self.static_members[group_instance_id] = new_id
        if self.leader_id == old_id:
            self.leader_id = new_id
        return member

    # --- rebalance bookkeeping -----------------------------------------------------------------
    def all_members_joined(self) -> bool:
        return all(m.awaiting_join for m in self.members.values()) and not self.pending_members

    def not_yet_rejoined(self) -> list[Member]:
        return [m for m in self.members.values() if not m.awaiting_join]

    def rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    def maybe_elect_joined_leader(self) -> None:
        """If the leader has not rejoined, let a member that has rejoined lead (Kafka does the same)."""
        leader = self.members.get(self.leader_id) if self.leader_id else None
        if leader is not None and leader.awaiting_join:
            return
        joined = next((m.member_id for m in self.members.values() if m.awaiting_join), None)
        if joined is not None:
            self.leader_id = joined

    def init_next_generation(self, now_ms: int) -> None:
        """Close the join phase: bump the generation and pick the protocol (or go Empty)."""
        self.generation_id += 1
        if self.members:
            self.protocol_name = self.select_protocol()
            self.transition_to(GroupState.COMPLETING_REBALANCE, now_ms)
        else:
            self.protocol_name = None
            self.transition_to(GroupState.EMPTY, now_ms)

    def join_members(self) -> tuple[JoinMember, ...]:
        """What the leader receives: every member with its metadata for the chosen protocol."""
        assert self.protocol_name is not None
        return tuple(
            JoinMember(m.member_id, m.group_instance_id, m.metadata(self.protocol_name))
            for m in self.members.values()
        )

    # --- protocols -----------------------------------------------------------------------------
    def candidate_protocols(self) -> set[str]:
        counts = Counter(name for m in self.members.values() for name in m.protocol_names())
        return {name for name, count in counts.items() if count == len(self.members)}

    def supports_protocols(self, protocol_type: str, names: list[str]) -> bool:
        """Whether a (re)joining member's offer is compatible with the group's current members."""
        if not self.members:
            return bool(protocol_type) and bool(names)
        return protocol_type == self.protocol_type and any(n in self.candidate_protocols() for n in names)

    def select_protocol(self) -> str:
        candidates = self.candidate_protocols()
        if not candidates:
            raise ValueError(f"group {self.group_id}: members share no protocol")
        votes: Counter[str] = Counter()
        first_choice: dict[str, int] = {}
        for index, member in enumerate(self.members.values()):
            vote = next(name for name in member.protocol_names() if name in candidates)
            votes[vote] += 1
            first_choice.setdefault(vote, index)
        return max(votes, key=lambda name: (votes[name], -first_choice[name]))

    def subscribed_topics(self) -> set[str] | None:
        """Topics the members subscribe to, if the group uses the consumer protocol (else None).

        Read from the consumer protocol's subscription (`ConsumerProtocolSubscription`: int16 version,
        then an array of topic strings) of the chosen protocol, for OffsetDelete's
        GROUP_SUBSCRIBED_TO_TOPIC check. Unreadable metadata yields None ("unknown").
        """
        if self.protocol_type != CONSUMER_PROTOCOL_TYPE or self.protocol_name is None:
            return None
        topics: set[str] = set()
        for member in self.members.values():
            try:
                topics.update(parse_subscription_topics(member.metadata(self.protocol_name)))
            except (KeyError, ValueError, struct.error):
                return None
        return topics

    # --- descriptions --------------------------------------------------------------------------
    def summary(self) -> GroupSummary:
        stable = self.is_(GroupState.STABLE)
        protocol = self.protocol_name or "" if stable else ""
        return GroupSummary(
            group_id=self.group_id,
            state=self.state.kafka_name,
            protocol_type=self.protocol_type or "",
            protocol_name=protocol,
            members=tuple(
                MemberSummary(
                    m.member_id,
                    m.group_instance_id,
                    m.client_id,
                    m.client_host,
                    m.metadata(protocol) if stable and protocol else b"",
                    m.assignment if stable else b"",
                )
                for m in self.members.values()
            ),
        )

    @property
    def uses_group_management(self) -> bool:
        """False for a group that only stores offsets (standalone consumers, generation -1)."""
        return self.generation_id > 0 or bool(self.members) or self.protocol_type is not None


def parse_subscription_topics(data: bytes) -> list[str]:
    """Topics of a `ConsumerProtocolSubscription` (any version: they all start version, topics)."""
    (_version, count), pos = struct.unpack_from(">hi", data, 0), 6
    if count < 0 or count > len(data):
        raise ValueError("bad topic count")
    topics = []
    for _ in range(count):
        (length,) = struct.unpack_from(">h", data, pos)
        pos += 2
        if length < 0 or pos + length > len(data):
            raise ValueError("bad topic name")
        topics.append(data[pos : pos + length].decode())
        pos += length
    return topics
