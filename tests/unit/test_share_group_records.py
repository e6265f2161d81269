"""Share groups' `__consumer_offsets` records (KIP-932), pure: what each membership change writes, and
that replaying the records in log order rebuilds the group a new coordinator carries on with."""

from __future__ import annotations

import copy
from collections.abc import Callable

from strom.coordinator.share import records
from strom.coordinator.share.membership import ShareGroup, heartbeat, remove
from strom.protocol.errors import ErrorCode

TOPICS = {"orders": 3, "audit": 1}
Record = tuple[bytes, bytes | None]


def durable(groups: dict[str, ShareGroup]) -> dict[str, tuple[int, int, dict[str, tuple[object, ...]]]]:
    """What must survive a fail-over: epochs, and each member's id, epoch, subscription and assignment."""
    return {
        g.group_id: (
            g.group_epoch,
            g.assignment_epoch,
            {
                m.member_id: (m.member_epoch, m.subscribed_topic_names, m.client_id, m.rack_id, m.assignment)
                for m in g.members.values()
            },
        )
        for g in groups.values()
    }


class Coordinator:
    """Decides on a copy and keeps only the records, as the shard does; ``log`` is every record."""

    def __init__(self) -> None:
        self.groups: dict[str, ShareGroup] = {}
        self.log: list[tuple[bytes, bytes | None]] = []

    def change(self, group_id: str, decide: Callable[[ShareGroup], object]) -> list[Record]:
        current = self.groups.get(group_id)
        group = copy.deepcopy(current) if current is not None else ShareGroup(group_id)
        decide(group)
        written = records.records_for(current, group)
        for key, value in written:
            records.replay(self.groups, key, value)
        self.log += written
        return written


def test_replaying_the_records_rebuilds_members_epochs_and_assignments() -> None:
    coordinator = Coordinator()
    ids: list[str] = []

    def join(group: ShareGroup) -> None:
        answer = heartbeat(group, "", 0, ("orders",), TOPICS, client_id=f"c{len(ids)}", rack_id="r1")
        assert answer.error is ErrorCode.NONE and answer.member_id is not None
        ids.append(answer.member_id)

    for _ in range(3):
        coordinator.change("g", join)
    coordinator.change(
        "g", lambda g: heartbeat(g, ids[0], g.members[ids[0]].member_epoch, ("orders", "audit"), TOPICS)
    )
    coordinator.change("g", lambda g: remove(g, ids[1], TOPICS))
    assert set(coordinator.groups["g"].members) == {ids[0], ids[2]}
    assert coordinator.groups["g"].group_epoch == 5
    # A new coordinator replays the partition: the same group, member ids and epochs.
    replayed: dict[str, ShareGroup] = {}
    for key, value in coordinator.log:
        records.replay(replayed, key, value)
    assert durable(replayed) == durable(coordinator.groups)
    # Its members heartbeat on at their epochs: no UNKNOWN_MEMBER_ID, no new epoch.
    member = replayed["g"].members[ids[2]]
    again = heartbeat(replayed["g"], ids[2], member.member_epoch, None, TOPICS)
    assert (again.error, again.member_epoch) == (ErrorCode.NONE, member.member_epoch)
    assert again.assignment == member.assignment  # sent again: what was sent is not durable


def test_a_heartbeat_that_changes_nothing_writes_nothing_and_the_last_leave_keeps_the_group() -> None:
    coordinator = Coordinator()
    joined = heartbeat(ShareGroup("probe"), "", 0, ("orders",), TOPICS)  # a fresh id to reuse
    member_id = str(joined.member_id)
    written = coordinator.change("g", lambda g: heartbeat(g, member_id, 0, ("orders",), TOPICS))
    versions = [records.decode_key(k).version for k, _ in written]
    assert versions == [10, 11, 13, 12, 14]  # member, group epoch, target, target epoch, current
    epoch = coordinator.groups["g"].members[member_id].member_epoch
    assert coordinator.change("g", lambda g: heartbeat(g, member_id, epoch, None, TOPICS)) == []
    gone = coordinator.change("g", lambda g: heartbeat(g, member_id, -1, None, TOPICS))
    # The member's keys get tombstones; the group stays, Empty, at the next epochs (as Kafka keeps it).
    assert [(records.decode_key(k).version, v is None) for k, v in gone] == [
        (14, True),
        (13, True),
        (10, True),
        (11, False),
        (12, False),
    ]
    empty = coordinator.groups["g"]
    assert (empty.state, empty.group_epoch, empty.assignment_epoch, empty.members) == ("Empty", 2, 2, {})
    replayed: dict[str, ShareGroup] = {}
    for key, value in coordinator.log:
        records.replay(replayed, key, value)
    assert durable(replayed) == durable(coordinator.groups) == {"g": (2, 2, {})}
    # A new member rejoins it at the next epoch.
    again = coordinator.change("g", lambda g: heartbeat(g, "", 0, ("orders",), TOPICS))
    assert [records.decode_key(k).version for k, _ in again] == [10, 11, 13, 12, 14]
    assert coordinator.groups["g"].group_epoch == 3


def test_deleting_an_empty_group_ends_it_at_a_replay() -> None:
    coordinator = Coordinator()
    coordinator.change("g", lambda g: heartbeat(g, "m", 0, ("orders",), TOPICS))
    coordinator.change("g", lambda g: remove(g, "m", TOPICS))
    deleted = records.tombstones(coordinator.groups["g"])
    assert [(records.decode_key(k).version, v) for k, v in deleted] == [(12, None), (11, None)]
    replayed: dict[str, ShareGroup] = {}
    for key, value in [*coordinator.log, *deleted]:
        records.replay(replayed, key, value)
    assert replayed == {}
