"""One share-partition: what a share group has done with one topic partition's records (KIP-932).

Theory of operation. A share group reads a partition as a queue: any member may be handed any
record, each record is *acquired* by one member at a time under a lock, and the member acknowledges
it. The state is a window of the log:

* the **start offset** (Kafka's SPSO): every record below it is done (acknowledged or archived);
* the **end offset** (SPEO): the next offset never yet handed out;
* between them the **in-flight records**, each with a `RecordState` and a **delivery count** (how
  many times it was acquired), and, while ACQUIRED, its member and lock deadline.

`acquire` hands out, in offset order, first the AVAILABLE in-flight records (released or whose lock
ran out) and then new records from the end offset on, as the caller finds them in the log: the caller
reads stored batches from `fetch_offset` and passes each batch's offset range; acquisition needs no
more than the batch headers. A record is acquired with its delivery count bumped and a lock of
`lock_duration_ms`; the result is ranges of consecutive offsets with one delivery count each (the
response's AcquiredRecords).

`acknowledge` applies a member's verdicts to records it holds: ACCEPT makes a record ACKNOWLEDGED,
REJECT and GAP (an offset the log does not have) ARCHIVED, RELEASE makes it AVAILABLE again. A
record whose lock runs out (`expire_locks`, called before each operation with the clock's time) and a
record whose member leaves (`release_member`) are released as with RELEASE. A released record that
has been delivered `delivery_count_limit` times is ARCHIVED instead: it is never delivered again.
After each change the start offset moves past the done records at its head, so the window only holds
what is still undecided. A verdict on a record the member does not hold is refused with
INVALID_RECORD_STATE and changes nothing of that batch.

Records are tracked one offset at a time (a dict), which bounds the cost by the records in flight,
itself bounded by what members fetch between acknowledgements. Pure: no I/O, time is passed in.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import Enum, IntEnum

from strom._util.states import check_rule_book, transition
from strom.protocol.errors import ErrorCode

__all__ = [
    "AcknowledgeType",
    "AcquiredRange",
    "InFlight",
    "RecordState",
    "SharePartition",
    "Undo",
]


class RecordState(Enum):
    AVAILABLE = "AVAILABLE"
    ACQUIRED = "ACQUIRED"
    ACKNOWLEDGED = "ACKNOWLEDGED"
    ARCHIVED = "ARCHIVED"


VALID_PREVIOUS: dict[RecordState, frozenset[RecordState]] = {
    RecordState.AVAILABLE: frozenset({RecordState.ACQUIRED}),
    RecordState.ACQUIRED: frozenset({RecordState.AVAILABLE}),
    RecordState.ACKNOWLEDGED: frozenset({RecordState.ACQUIRED}),
    RecordState.ARCHIVED: frozenset({RecordState.ACQUIRED, RecordState.AVAILABLE}),
}
INITIAL = frozenset({RecordState.AVAILABLE, RecordState.ACQUIRED})
check_rule_book(VALID_PREVIOUS, INITIAL)


class AcknowledgeType(IntEnum):
    """The wire's acknowledge types (ShareFetch / ShareAcknowledge ``AcknowledgeTypes``)."""

    GAP = 0
    ACCEPT = 1
    RELEASE = 2
    REJECT = 3


@dataclass(slots=True)
class InFlight:
    state: RecordState
    delivery_count: int
    member_id: str = ""
    lock_deadline_ms: int = 0


@dataclass(frozen=True, slots=True)
class AcquiredRange:
    first_offset: int
    last_offset: int
    delivery_count: int


@dataclass(frozen=True, slots=True)
class _Changed:
    offset: int
    record: InFlight  # the in-flight entry, as the acknowledgement left it
    state: RecordState  # what the acknowledgement made it
    member_id: str  # what it was before: acquired by this member, at this count, with this lock
    delivery_count: int
    lock_deadline_ms: int
    resets: int  # the window's resets then: a record a reset dropped stays dropped


@dataclass(slots=True)
class Undo:
    """What acknowledgements changed, to put back if they cannot be made durable (`roll_back`)."""

    changed: list[_Changed] = field(default_factory=list)


@dataclass(slots=True)
class SharePartition:
    start_offset: int
    delivery_count_limit: int = 5
    end_offset: int = -1  # -1: the same as the start offset
    in_flight: dict[int, InFlight] = field(default_factory=dict)
    resets: int = 0  # how many times `reset_start` moved the window

    def __post_init__(self) -> None:
        self.end_offset = max(self.end_offset, self.start_offset)

    # --- reading -------------------------------------------------------------------------------
    def fetch_offset(self) -> int:
        """Where the next acquisition starts reading the log: the first AVAILABLE in-flight record,
        else the end offset."""
        available = [o for o, r in self.in_flight.items() if r.state is RecordState.AVAILABLE]
        return min(available) if available else self.end_offset

    def has_available(self, high_watermark: int) -> bool:
        """Whether an acquisition now could hand out anything below ``high_watermark``."""
        if self.end_offset < high_watermark:
            return True
        return any(r.state is RecordState.AVAILABLE for r in self.in_flight.values())

    def counts(self) -> dict[RecordState, int]:
        found = dict.fromkeys(RecordState, 0)
        for record in self.in_flight.values():
            found[record.state] += 1
        return found

    # --- acquisition ---------------------------------------------------------------------------
    def acquire(
        self,
        member_id: str,
        batches: Iterable[tuple[int, int, bool]],
        max_records: int,
        now_ms: int,
        lock_duration_ms: int,
    ) -> list[AcquiredRange]:
        """Acquire for ``member_id`` the acquirable offsets of ``batches`` (``(first, last, control)``:
        the offset ranges of stored batches in log order, and whether the batch is a control batch,
        whose offsets are passed over, never handed out), whole batches at a time until at least
        ``max_records`` are acquired. Returns the acquired ranges, each of one delivery count."""
        acquired: list[tuple[int, int]] = []  # (offset, delivery count)
        deadline = now_ms + lock_duration_ms
        for first, last, control in batches:
            if len(acquired) >= max_records:
                break
            for offset in range(max(first, self.start_offset), 0 if control else last + 1):
                record = self.in_flight.get(offset)
                if record is None:
                    if offset < self.end_offset:
                        continue  # done already (below the start offset or acknowledged and dropped)
                    record = self.in_flight[offset] = InFlight(RecordState.ACQUIRED, 1, member_id, deadline)
                    self.end_offset = offset + 1
                elif record.state is RecordState.AVAILABLE:
                    record.state = transition(VALID_PREVIOUS, record.state, RecordState.ACQUIRED)
                    record.delivery_count += 1
                    record.member_id = member_id
                    record.lock_deadline_ms = deadline
                else:
                    continue
                acquired.append((offset, record.delivery_count))
            # Offsets of the batch that are not in flight are done: compacted away, or control.
            self.end_offset = max(self.end_offset, last + 1)
        self._advance()
        return _ranges(acquired)

    # --- verdicts ------------------------------------------------------------------------------
    def acknowledge(
        self, member_id: str, first_offset: int, last_offset: int, types: list[int], undo: Undo | None = None
    ) -> ErrorCode:
        """One acknowledgement batch: a type for every offset, or one type for all of them; each record
        it changes is noted in ``undo`` when given."""
        count = last_offset - first_offset + 1
        if count <= 0 or not types or (len(types) != 1 and len(types) != count):
            return ErrorCode.INVALID_REQUEST
        if any(t not in AcknowledgeType._value2member_map_ for t in types):
            return ErrorCode.INVALID_REQUEST
        held: list[InFlight | None] = []
        for offset in range(first_offset, last_offset + 1):
            kind = types[0] if len(types) == 1 else types[offset - first_offset]
            record = self.in_flight.get(offset)
            if record is None or record.state is not RecordState.ACQUIRED or record.member_id != member_id:
                if kind == AcknowledgeType.GAP and (record is None or record.member_id == member_id):
                    held.append(None)  # a gap the log never had, or one this member holds
                    continue
                return ErrorCode.INVALID_RECORD_STATE
            held.append(record)
        for index, record in enumerate(held):
            if record is None:
                continue
            kind = types[0] if len(types) == 1 else types[index]
            before = (record.member_id, record.delivery_count, record.lock_deadline_ms)
            if kind == AcknowledgeType.ACCEPT:
                record.state = transition(VALID_PREVIOUS, record.state, RecordState.ACKNOWLEDGED)
            elif kind == AcknowledgeType.RELEASE:
                self._release(record)
            else:
                record.state = transition(VALID_PREVIOUS, record.state, RecordState.ARCHIVED)
            record.member_id = ""
            if undo is not None:
                undo.changed.append(
                    _Changed(first_offset + index, record, record.state, *before, self.resets)
                )
        self._advance()
        return ErrorCode.NONE

    def roll_back(self, undo: Undo) -> int:
        """Put back the records of acknowledgements whose write failed: each still as they left it
        goes back to ACQUIRED by its member, with its delivery count and lock; returns how many."""
        restored = 0
        for changed in reversed(undo.changed):
            record = self.in_flight.get(changed.offset)
            dropped = record is None and changed.offset < self.start_offset and changed.resets == self.resets
            if record is not changed.record and not dropped:
                continue  # replaced since, or below a start offset that was reset
            was = changed.record
            moved_on = was.state is not changed.state or was.delivery_count != changed.delivery_count
            if moved_on or was.member_id:
                continue  # moved on: a released record acquired again
            # A restore of what was, not a transition of the rule book.
            was.state = RecordState.ACQUIRED
            was.member_id = changed.member_id
            was.lock_deadline_ms = changed.lock_deadline_ms
            self.in_flight[changed.offset] = was
            self.start_offset = min(self.start_offset, changed.offset)
            restored += 1
        return restored

    def expire_locks(self, now_ms: int) -> int:
        """Release every ACQUIRED record whose lock ran out; returns how many."""
        expired = [
            r
            for r in self.in_flight.values()
            if r.state is RecordState.ACQUIRED and r.lock_deadline_ms <= now_ms
        ]
        for record in expired:
            self._release(record)
        if expired:
            self._advance()
        return len(expired)

    def release_member(self, member_id: str) -> int:
        """Release every record ``member_id`` holds (it left); returns how many."""
        held = [
            r for r in self.in_flight.values() if r.state is RecordState.ACQUIRED and r.member_id == member_id
        ]
        for record in held:
            self._release(record)
        if held:
            self._advance()
        return len(held)

    def reset_start(self, offset: int) -> None:
        """Move the start offset (AlterShareGroupOffsets, or a log start past it): the window restarts
        there, with nothing in flight below it."""
        self.in_flight = {o: r for o, r in self.in_flight.items() if o >= offset}
        self.start_offset = offset
        self.resets += 1
        self.end_offset = max(self.end_offset, offset)
        self._advance()

    def _release(self, record: InFlight) -> None:
        record.member_id = ""
        record.lock_deadline_ms = 0
        if record.delivery_count >= self.delivery_count_limit:
            record.state = transition(VALID_PREVIOUS, record.state, RecordState.ARCHIVED)
        else:
            record.state = transition(VALID_PREVIOUS, record.state, RecordState.AVAILABLE)

    def _advance(self) -> None:
        """Drop the done records at the head of the window and move the start offset past them."""
        start = self.start_offset
        while start < self.end_offset:
            record = self.in_flight.get(start)
            if record is None:
                start += 1  # not in flight below the end offset: skipped by the log
                continue
            if record.state not in (RecordState.ACKNOWLEDGED, RecordState.ARCHIVED):
                break
            del self.in_flight[start]
            start += 1
        self.start_offset = start


def _ranges(acquired: list[tuple[int, int]]) -> list[AcquiredRange]:
    """Consecutive offsets of one delivery count as one range."""
    ranges: list[AcquiredRange] = []
    for offset, count in acquired:
        if ranges and ranges[-1].last_offset == offset - 1 and ranges[-1].delivery_count == count:
            last = ranges[-1]
            ranges[-1] = AcquiredRange(last.first_offset, offset, count)
        else:
            ranges.append(AcquiredRange(offset, offset, count))
    return ranges
