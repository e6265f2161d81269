"""The share-partition state machine (KIP-932), pure: acquisition, verdicts, locks, delivery limit, and
the roll-back of acknowledgements whose write failed."""

from __future__ import annotations

from strom.coordinator.share.partition import (
    AcknowledgeType,
    AcquiredRange,
    RecordState,
    SharePartition,
    Undo,
)
from strom.protocol.errors import ErrorCode

LOCK_MS = 1000
ACCEPT = int(AcknowledgeType.ACCEPT)
RELEASE = int(AcknowledgeType.RELEASE)
REJECT = int(AcknowledgeType.REJECT)
GAP = int(AcknowledgeType.GAP)


def batches(*ranges: tuple[int, int]) -> list[tuple[int, int, bool]]:
    return [(first, last, False) for first, last in ranges]


def test_new_records_are_acquired_in_whole_batches_up_to_the_limit() -> None:
    sp = SharePartition(start_offset=0)
    got = sp.acquire(
        "a", batches((0, 4), (5, 9), (10, 14)), max_records=7, now_ms=0, lock_duration_ms=LOCK_MS
    )
    assert got == [AcquiredRange(0, 9, 1)]  # the second batch completes the limit; the third waits
    assert sp.end_offset == 10
    assert sp.fetch_offset() == 10
    assert sp.counts()[RecordState.ACQUIRED] == 10


def test_two_members_get_disjoint_records() -> None:
    sp = SharePartition(start_offset=0)
    first = sp.acquire("a", batches((0, 4)), 10, 0, LOCK_MS)
    # The second member reads the same batch again (it starts at the fetch offset) and more.
    second = sp.acquire("b", batches((0, 4), (5, 9)), 10, 0, LOCK_MS)
    assert first == [AcquiredRange(0, 4, 1)]
    assert second == [AcquiredRange(5, 9, 1)]


def test_accept_moves_the_start_offset_past_done_records() -> None:
    sp = SharePartition(start_offset=100)
    sp.acquire("a", batches((100, 109)), 10, 0, LOCK_MS)
    assert sp.acknowledge("a", 100, 104, [ACCEPT]) is ErrorCode.NONE
    assert sp.start_offset == 105
    assert sp.acknowledge("a", 107, 109, [ACCEPT]) is ErrorCode.NONE
    assert sp.start_offset == 105  # 105 and 106 are still acquired
    assert sp.acknowledge("a", 105, 106, [ACCEPT, REJECT]) is ErrorCode.NONE
    assert sp.start_offset == 110
    assert sp.in_flight == {}


def test_release_redelivers_with_a_higher_delivery_count() -> None:
    sp = SharePartition(start_offset=0)
    sp.acquire("a", batches((0, 3)), 10, 0, LOCK_MS)
    assert sp.acknowledge("a", 0, 3, [ACCEPT, RELEASE, ACCEPT, ACCEPT]) is ErrorCode.NONE
    assert sp.start_offset == 1
    assert sp.fetch_offset() == 1
    again = sp.acquire("b", batches((0, 3)), 10, 0, LOCK_MS)
    assert again == [AcquiredRange(1, 1, 2)]


def test_a_verdict_on_records_the_member_does_not_hold_is_refused_whole() -> None:
    sp = SharePartition(start_offset=0)
    sp.acquire("a", batches((0, 4)), 10, 0, LOCK_MS)
    assert sp.acknowledge("b", 0, 4, [ACCEPT]) is ErrorCode.INVALID_RECORD_STATE
    assert sp.acknowledge("a", 3, 6, [ACCEPT]) is ErrorCode.INVALID_RECORD_STATE  # 5, 6 never acquired
    assert sp.counts()[RecordState.ACQUIRED] == 5
    assert sp.acknowledge("a", 0, 4, [ACCEPT, ACCEPT]) is ErrorCode.INVALID_REQUEST  # types vs offsets
    assert sp.acknowledge("a", 0, 4, [9]) is ErrorCode.INVALID_REQUEST


def test_an_expired_lock_releases_the_records() -> None:
    sp = SharePartition(start_offset=0)
    sp.acquire("a", batches((0, 4)), 10, now_ms=0, lock_duration_ms=LOCK_MS)
    assert sp.expire_locks(LOCK_MS - 1) == 0
    assert sp.expire_locks(LOCK_MS) == 5
    assert sp.counts()[RecordState.AVAILABLE] == 5
    # The late verdict of the member whose lock ran out is refused.
    assert sp.acknowledge("a", 0, 4, [ACCEPT]) is ErrorCode.INVALID_RECORD_STATE
    assert sp.acquire("b", batches((0, 4)), 10, LOCK_MS, LOCK_MS) == [AcquiredRange(0, 4, 2)]


def test_the_delivery_count_limit_archives_a_record() -> None:
    sp = SharePartition(start_offset=0, delivery_count_limit=3)
    for delivery in range(1, 4):
        assert sp.acquire("a", batches((0, 0)), 10, 0, LOCK_MS) == [AcquiredRange(0, 0, delivery)]
        assert sp.acknowledge("a", 0, 0, [RELEASE]) is ErrorCode.NONE
    # Three deliveries: archived, never delivered again.
    assert sp.in_flight == {}
    assert sp.start_offset == 1
    assert sp.acquire("a", batches((0, 0)), 10, 0, LOCK_MS) == []


def test_a_leaving_member_releases_only_its_own_records() -> None:
    sp = SharePartition(start_offset=0)
    sp.acquire("a", batches((0, 4)), 10, 0, LOCK_MS)
    sp.acquire("b", batches((5, 9)), 10, 0, LOCK_MS)
    assert sp.release_member("a") == 5
    counts = sp.counts()
    assert counts[RecordState.AVAILABLE] == 5
    assert counts[RecordState.ACQUIRED] == 5
    assert sp.fetch_offset() == 0


def test_control_batches_and_gaps_are_passed_over() -> None:
    sp = SharePartition(start_offset=0)
    got = sp.acquire("a", [(0, 2, False), (3, 3, True), (4, 6, False)], 10, 0, LOCK_MS)
    assert got == [AcquiredRange(0, 2, 1), AcquiredRange(4, 6, 1)]
    assert sp.acknowledge("a", 0, 2, [ACCEPT]) is ErrorCode.NONE
    assert sp.start_offset == 4  # the marker at 3 is done without being delivered
    # A gap (an offset the log does not have) acknowledged as such is done too.
    assert sp.acknowledge("a", 4, 6, [GAP, ACCEPT, ACCEPT]) is ErrorCode.NONE
    assert sp.start_offset == 7


def test_reset_start_drops_what_lies_below() -> None:
    sp = SharePartition(start_offset=0)
    sp.acquire("a", batches((0, 9)), 10, 0, LOCK_MS)
    sp.reset_start(5)
    assert sp.start_offset == 5
    assert min(sp.in_flight) == 5
    sp.reset_start(20)
    assert (sp.start_offset, sp.end_offset, sp.in_flight) == (20, 20, {})


def held_by(sp: SharePartition, member: str) -> list[tuple[int, int]]:
    """(offset, delivery count) of the records ``member`` holds."""
    return sorted(
        (o, r.delivery_count)
        for o, r in sp.in_flight.items()
        if r.state is RecordState.ACQUIRED and r.member_id == member
    )


def test_a_failed_write_puts_the_acknowledged_records_back() -> None:
    sp = SharePartition(start_offset=0, delivery_count_limit=2)
    sp.acquire("a", batches((0, 5)), 10, now_ms=0, lock_duration_ms=LOCK_MS)
    undo = Undo()
    verdicts = [ACCEPT, ACCEPT, REJECT, RELEASE, ACCEPT, ACCEPT]
    assert sp.acknowledge("a", 0, 5, verdicts, undo) is ErrorCode.NONE
    assert (sp.start_offset, sp.counts()[RecordState.AVAILABLE]) == (3, 1)
    assert sp.roll_back(undo) == 6
    # As before the acknowledgement: every record held by "a" at its count, the window at 0.
    assert (sp.start_offset, held_by(sp, "a")) == (0, [(o, 1) for o in range(6)])
    assert sp.fetch_offset() == 6
    # The member may acknowledge them again, and the lock it had still runs out as it would have.
    assert sp.acknowledge("a", 0, 1, [ACCEPT]) is ErrorCode.NONE
    assert sp.expire_locks(LOCK_MS) == 4
    assert sp.start_offset == 2


def test_a_roll_back_leaves_alone_what_moved_on_meanwhile() -> None:
    sp = SharePartition(start_offset=0)
    sp.acquire("a", batches((0, 3)), 10, 0, LOCK_MS)
    undo = Undo()
    assert sp.acknowledge("a", 0, 3, [RELEASE, RELEASE, ACCEPT, ACCEPT], undo) is ErrorCode.NONE
    # While the write is on its way, member "b" acquires the released records (and gives one back).
    assert sp.acquire("b", batches((0, 3)), 10, 0, LOCK_MS) == [AcquiredRange(0, 1, 2)]
    assert sp.acknowledge("b", 1, 1, [RELEASE]) is ErrorCode.NONE
    assert sp.roll_back(undo) == 2
    # "b" keeps offset 0; offset 1, delivered again since, stays available; 2 and 3 are a's again.
    assert held_by(sp, "b") == [(0, 2)]
    assert held_by(sp, "a") == [(2, 1), (3, 1)]
    assert sp.in_flight[1].state is RecordState.AVAILABLE


def test_a_roll_back_does_not_restore_below_a_reset_start() -> None:
    sp = SharePartition(start_offset=0)
    sp.acquire("a", batches((0, 9)), 10, 0, LOCK_MS)
    undo = Undo()
    assert sp.acknowledge("a", 0, 4, [ACCEPT], undo) is ErrorCode.NONE
    assert sp.acknowledge("a", 7, 7, [ACCEPT], undo) is ErrorCode.NONE
    sp.reset_start(6)  # the log start passed them meanwhile
    assert sp.roll_back(undo) == 1
    assert sp.start_offset == 6
    assert held_by(sp, "a") == [(o, 1) for o in range(6, 10)]
