"""Share-group membership (KIP-932), pure: joins, epochs, leaves and the sharing assignment."""

from __future__ import annotations

from strom.coordinator.share.membership import (
    LEAVE_EPOCH,
    ShareGroup,
    ShareMember,
    assign,
    heartbeat,
    remove,
)
from strom.protocol.errors import ErrorCode

TOPICS = {"orders": 3, "audit": 1}


def test_fewer_members_than_partitions_split_them() -> None:
    members = [ShareMember("m1", 0, ("orders",)), ShareMember("m2", 0, ("orders",))]
    got = assign(members, TOPICS)
    assert got == {"m1": {"orders": frozenset({0, 2})}, "m2": {"orders": frozenset({1})}}


def test_more_members_than_partitions_share_them() -> None:
    members = [ShareMember(f"m{i}", 0, ("audit", "orders")) for i in range(4)]
    got = assign(members, TOPICS)
    # The one audit partition goes to every member; every orders partition has a member, and every
    # member has one.
    assert all(a["audit"] == frozenset({0}) for a in got.values())
    owners = [p for a in got.values() for p in a["orders"]]
    assert sorted(set(owners)) == [0, 1, 2]
    assert all(len(a["orders"]) == 1 for a in got.values())


def test_join_heartbeat_and_leave() -> None:
    group = ShareGroup("g")
    first = heartbeat(group, "", 0, ("orders",), TOPICS)
    assert first.error is ErrorCode.NONE
    assert first.member_id
    assert first.member_epoch == 1
    assert first.assignment == {"orders": frozenset({0, 1, 2})}
    # A steady heartbeat: no assignment sent again.
    steady = heartbeat(group, first.member_id, 1, None, TOPICS)
    assert (steady.error, steady.member_epoch, steady.assignment) == (ErrorCode.NONE, 1, None)
    # A second member: the first one's next heartbeat carries its smaller share at a new epoch.
    second = heartbeat(group, "m-two", 0, ("orders",), TOPICS)
    assert second.member_epoch == 2
    moved = heartbeat(group, first.member_id, 1, None, TOPICS)
    assert moved.member_epoch == 2
    assert moved.assignment is not None
    assert second.assignment is not None
    assert moved.assignment["orders"] | second.assignment["orders"] == frozenset({0, 1, 2})
    left = heartbeat(group, "m-two", 2, None, TOPICS)
    assert left.error is ErrorCode.NONE
    gone = heartbeat(group, "m-two", LEAVE_EPOCH, None, TOPICS)
    assert gone.removed == ("m-two",)
    assert list(group.members) == [first.member_id]


def test_unknown_members_and_future_epochs_are_refused() -> None:
    group = ShareGroup("g")
    assert heartbeat(group, "ghost", 3, None, TOPICS).error is ErrorCode.UNKNOWN_MEMBER_ID
    joined = heartbeat(group, "m", 0, ("orders",), TOPICS)
    assert heartbeat(group, "m", joined.member_epoch + 1, None, TOPICS).error is ErrorCode.FENCED_MEMBER_EPOCH
    assert heartbeat(group, "n", 0, None, TOPICS).error is ErrorCode.INVALID_REQUEST
    full = heartbeat(group, "n", 0, ("orders",), TOPICS, max_size=1)
    assert full.error is ErrorCode.GROUP_MAX_SIZE_REACHED


def test_a_lost_answer_is_sent_again() -> None:
    group = ShareGroup("g")
    heartbeat(group, "a", 0, ("orders",), TOPICS)
    heartbeat(group, "b", 0, ("orders",), TOPICS)
    heartbeat(group, "a", 1, None, TOPICS)  # answered with epoch 2, but the answer is lost
    again = heartbeat(group, "a", 1, None, TOPICS)
    assert again.member_epoch == 2
    assert again.assignment is not None


def test_a_removed_member_hands_its_partitions_on() -> None:
    group = ShareGroup("g")
    heartbeat(group, "a", 0, ("orders",), TOPICS)
    heartbeat(group, "b", 0, ("orders",), TOPICS)
    assert remove(group, "b", TOPICS)
    assert not remove(group, "b", TOPICS)
    assert group.members["a"].assignment == {"orders": frozenset({0, 1, 2})}
