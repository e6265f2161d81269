"""One group id, one group type: which request a group of another type refuses (pure).

A group id names one group, of one type: classic (JoinGroup/SyncGroup), consumer (KIP-848's
ConsumerGroupHeartbeat) or share (KIP-932's ShareGroupHeartbeat). Classic and consumer groups convert
into each other (online or offline migration, `strom.coordinator.consumer.classic`), so between those two
a request of the other type is not refused here. A share group converts into nothing: as Kafka 4's group
coordinator does, a request of another type for an id that a share group holds is refused, and a share
heartbeat for an id that a classic or consumer group holds too:

* ConsumerGroupHeartbeat, a share group holds the id: GROUP_ID_NOT_FOUND, "Group G is not a consumer
  group.";
* JoinGroup, a share group holds the id: INCONSISTENT_GROUP_PROTOCOL with no member id (the answer Kafka
  gives to a join whose protocol the group cannot speak);
* ShareGroupHeartbeat, a classic or consumer group holds the id: GROUP_ID_NOT_FOUND, "Group G is not a
  share group.".
* OffsetCommit, OffsetFetch, OffsetDelete, a share group holds the id: GROUP_ID_NOT_FOUND, "Group G is
  not a consumer group." (committed offsets are classic and consumer groups'; a share group keeps its
  start offsets in ``__share_group_state``).

An empty share group keeps its id until DeleteGroups (docs/share-groups.md), so these refusals last
as long as it does. The caller finds which type holds the id; this module only decides.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from strom.protocol.errors import ErrorCode


class GroupType(enum.Enum):
    CLASSIC = "classic"
    CONSUMER = "consumer"
    SHARE = "share"


@dataclass(frozen=True, slots=True)
class Refusal:
    error: ErrorCode
    message: str


def refusal(group_id: str, asked: GroupType, holder: GroupType | None) -> Refusal | None:
    """Why a request of type `asked` may not use the id that a group of type `holder` holds (None: it
    may, the id is free or of the same type, or the two types convert into each other)."""
    if holder is None or holder is asked:
        return None
    if asked is GroupType.SHARE:
        return Refusal(ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a share group.")
    if holder is not GroupType.SHARE:
        return None  # classic <-> consumer: a migration, decided where the groups live
    if asked is GroupType.CONSUMER:
        return Refusal(ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a consumer group.")
    return Refusal(ErrorCode.INCONSISTENT_GROUP_PROTOCOL, f"Group {group_id} is not a classic group.")


def offsets_refusal(group_id: str, holder: GroupType | None) -> Refusal | None:
    """Why OffsetCommit, OffsetFetch or OffsetDelete may not use the id (None: they may)."""
    return refusal(group_id, GroupType.CONSUMER, holder) if holder is GroupType.SHARE else None
