"""Share groups' `__consumer_offsets` records (KIP-932), pure: what each membership change writes, and
that replaying the records in log order rebuilds the group a new coordinator carries on with."""

from __future__ import annotations

import functools
import random
from collections.abc import Callable

from strom.coordinator.share import records
from strom.coordinator.share.membership import GroupDraft, ShareGroup, heartbeat, remove
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
    """Decides on a draft and keeps only the records, as the shard does; ``log`` is every record."""

    def __init__(self) -> None:
        self.groups: dict[str, ShareGroup] = {}
        self.log: list[tuple[bytes, bytes | None]] = []

    def change(self, group_id: str, decide: Callable[[GroupDraft], object]) -> list[Record]:
        current = self.groups.get(group_id)
        before = durable(self.groups)
        draft = GroupDraft(current if current is not None else ShareGroup(group_id))
        decide(draft)
        assert durable(self.groups) == before  # the decision left the group as the log says
        written = records.records_for(draft)
        for key, value in written:
            records.replay(self.groups, key, value)
        self.log += written
        group = self.groups.get(group_id)
        for member_id, member in draft.changed.items():  # once written: what the answers sent
            if group is not None and member_id in group.members:
                group.members[member_id].sent = member.sent
        return written


def epoch_of(draft: GroupDraft, member_id: str) -> int:
    member = draft.get(member_id)
    assert member is not None
    return member.member_epoch


def test_replaying_the_records_rebuilds_members_epochs_and_assignments() -> None:
    coordinator = Coordinator()
    ids: list[str] = []

    def join(group: GroupDraft) -> None:
        answer = heartbeat(group, "", 0, ("orders",), TOPICS, client_id=f"c{len(ids)}", rack_id="r1")
        assert answer.error is ErrorCode.NONE and answer.member_id is not None
        ids.append(answer.member_id)

    for _ in range(3):
        coordinator.change("g", join)
    coordinator.change("g", lambda g: heartbeat(g, ids[0], epoch_of(g, ids[0]), ("orders", "audit"), TOPICS))
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
    # initialized share-partitions, member, group epoch, target, target epoch, current
    assert versions == [15, 10, 11, 13, 12, 14]
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
    assert [(records.decode_key(k).version, v) for k, v in deleted] == [(15, None), (12, None), (11, None)]
    replayed: dict[str, ShareGroup] = {}
    for key, value in [*coordinator.log, *deleted]:
        records.replay(replayed, key, value)
    assert replayed == {}


def test_a_groups_initialized_share_partitions_grow_are_forgotten_and_replay() -> None:
    """Key 15: every partition ever assigned, kept while the group is empty; DeleteShareGroupOffsets
    forgets a topic, a topic gone is dropped at the next write, DeleteGroups ends the record."""
    coordinator = Coordinator()
    coordinator.change("g", lambda g: heartbeat(g, "a", 0, ("orders",), TOPICS))
    assert coordinator.groups["g"].initialized == {"orders": frozenset({0, 1, 2})}
    coordinator.change("g", lambda g: heartbeat(g, "b", 0, ("audit",), TOPICS))
    coordinator.change("g", lambda g: remove(g, "a", TOPICS))
    coordinator.change("g", lambda g: remove(g, "b", TOPICS))
    empty = coordinator.groups["g"]
    assert (empty.members, empty.initialized) == (
        {},
        {"orders": frozenset({0, 1, 2}), "audit": frozenset({0})},
    )
    replayed: dict[str, ShareGroup] = {}
    for key, value in coordinator.log:
        records.replay(replayed, key, value)
    assert replayed["g"].initialized == empty.initialized
    forgotten = records.forget(empty, ["audit", "never-read"])
    assert records.forget(empty, ["never-read"]) == []
    for key, value in forgotten:
        records.replay(coordinator.groups, key, value)
    assert coordinator.groups["g"].initialized == {"orders": frozenset({0, 1, 2})}
    # "orders" is deleted: the next write of the group drops it.
    draft = GroupDraft(coordinator.groups["g"])
    heartbeat(draft, "c", 0, ("audit",), {"audit": 1})
    for key, value in records.records_for(draft, {"audit": 1}):
        records.replay(coordinator.groups, key, value)
    assert coordinator.groups["g"].initialized == {"audit": frozenset({0})}


def test_the_records_of_drafts_rebuild_what_deciding_in_place_gives() -> None:
    """Random joins, steady and lost-answer heartbeats, subscription changes, topic growth, leaves and
    session timeouts: each draft answers as deciding on the group in place does, and its records,
    replayed, give the same group."""
    rng = random.Random(7)
    coordinator, in_place = Coordinator(), ShareGroup("g")
    topics = dict(TOPICS)
    for step in range(300):
        alive = sorted(in_place.members)
        roll = rng.random()
        if roll < 0.05:
            topics["orders"] += 1  # the next heartbeat sees the new partition
        decide: Callable[..., object]
        if not alive or roll < 0.25:
            subscription = rng.choice([("orders",), ("audit",), ("orders", "audit")])
            decide, args = heartbeat, (f"m{step}", 0, subscription, topics)
        else:
            member_id = rng.choice(alive)
            epoch = in_place.members[member_id].member_epoch
            if roll < 0.35:
                decide, args = heartbeat, (member_id, -1, None, topics)
            elif roll < 0.4:
                decide, args = remove, (member_id, topics)
            elif roll < 0.5:
                decide, args = heartbeat, (member_id, epoch, rng.choice([("audit",), ("orders",)]), topics)
            else:
                lost = roll < 0.6  # the member did not get its last answer
                decide, args = heartbeat, (member_id, max(1, epoch - 1) if lost else epoch, None, topics)
        expected = decide(in_place, *args)
        answers: list[object] = []
        coordinator.change("g", functools.partial(answered, answers, decide, args))
        assert answers == [expected], step
        assert durable(coordinator.groups) == durable({"g": in_place}), step
    replayed: dict[str, ShareGroup] = {}
    for key, value in coordinator.log:
        records.replay(replayed, key, value)
    assert durable(replayed) == durable({"g": in_place})


def answered(
    answers: list[object], decide: Callable[..., object], args: tuple[object, ...], draft: GroupDraft
) -> None:
    answers.append(decide(draft, *args))
