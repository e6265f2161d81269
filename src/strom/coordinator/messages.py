"""Typed inputs and outputs of the group coordinator (the handlers translate them to and from wire dicts).

The coordinator never sees protocol dicts or versions: a handler builds one of these requests, and turns
the result back into the response of whatever version the client spoke. Error codes are Kafka's
`ErrorCode` values because that is the vocabulary clients react to.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import NamedTuple

from strom.protocol.errors import ErrorCode

NO_GENERATION = -1
UNKNOWN_MEMBER_ID = ""
UNKNOWN_LEADER_EPOCH = -1


class TopicPartition(NamedTuple):
    topic: str
    partition: int


@dataclass(frozen=True, slots=True)
class JoinGroupRequest:
    group_id: str
    member_id: str
    group_instance_id: str | None
    protocol_type: str
    protocols: tuple[tuple[str, bytes], ...]  # (name, metadata) in the member's order of preference
    session_timeout_ms: int
    rebalance_timeout_ms: int
    client_id: str
    client_host: str
    # KIP-394: JoinGroup v4+ clients can take a MEMBER_ID_REQUIRED round trip.
    require_known_member_id: bool


@dataclass(frozen=True, slots=True)
class JoinMember:
    member_id: str
    group_instance_id: str | None
    metadata: bytes


@dataclass(frozen=True, slots=True)
class JoinResult:
    error: ErrorCode
    member_id: str = UNKNOWN_MEMBER_ID
    generation_id: int = NO_GENERATION
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str = ""
    members: tuple[JoinMember, ...] = ()  # only the leader gets the member list


@dataclass(frozen=True, slots=True)
class SyncGroupRequest:
    group_id: str
    generation_id: int
    member_id: str
    group_instance_id: str | None
    protocol_type: str | None
    protocol_name: str | None
    assignments: tuple[tuple[str, bytes], ...]  # (member_id, assignment); only the leader sends them


@dataclass(frozen=True, slots=True)
class SyncResult:
    error: ErrorCode
    assignment: bytes = b""
    protocol_type: str | None = None
    protocol_name: str | None = None


JoinCallback = Callable[[JoinResult], None]
SyncCallback = Callable[[SyncResult], None]


@dataclass(frozen=True, slots=True)
class OffsetAndMetadata:
    offset: int
    leader_epoch: int = UNKNOWN_LEADER_EPOCH
    metadata: str = ""
    commit_timestamp_ms: int = -1


@dataclass(frozen=True, slots=True)
class MemberSummary:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    metadata: bytes
    assignment: bytes


@dataclass(frozen=True, slots=True)
class GroupSummary:
    group_id: str
    state: str
    protocol_type: str
    protocol_name: str
    members: tuple[MemberSummary, ...] = field(default=())
    error: ErrorCode = ErrorCode.NONE


@dataclass(frozen=True, slots=True)
class ListedGroup:
    group_id: str
    protocol_type: str
    state: str
    group_type: str = "classic"  # ListGroups v5's group type (KIP-848): "classic" or "consumer"

    def matches(self, states: frozenset[str], types: frozenset[str]) -> bool:
        """ListGroups v4/v5 filters: each lists lower-cased states or types, empty for any (as Kafka)."""
        return (not states or self.state.lower() in states) and (not types or self.group_type in types)
