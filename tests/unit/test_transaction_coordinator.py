"""The transaction coordinator, sans-I/O: state machine, records, and request decisions on a manual clock."""

from __future__ import annotations

import itertools
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from strom._util.clock import ManualClock
from strom.protocol.errors import ErrorCode
from strom.transaction.coordinator import Decision, TransactionCoordinator, Transition
from strom.transaction.records import (
    TxnLogValue,
    TxnRecordError,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
    java_string_hash,
    partition_for,
)
from strom.transaction.state import TxnState

S = TxnState
NONE, CONCURRENT, FENCED = ErrorCode.NONE, ErrorCode.CONCURRENT_TRANSACTIONS, ErrorCode.PRODUCER_FENCED


class Ids:
    def __init__(self) -> None:
        self._next = itertools.count(1000)

    def next_producer_id(self) -> int:
        return next(self._next)


class Host:
    """Plays the broker: appends every transition to a list (the log) and completes it."""

    def __init__(self) -> None:
        self.clock = ManualClock()
        self.coordinator = TransactionCoordinator(Ids())
        self.log: list[tuple[bytes, bytes]] = []

    @property
    def now(self) -> int:
        return self.clock.time_ms()

    def write(self, decision: Decision | Transition | None) -> Decision | Transition | None:
        transition = decision.transition if isinstance(decision, Decision) else decision
        if transition is not None:
            self.log.append((encode_key(transition.transactional_id), encode_value(transition.value)))
            self.coordinator.complete(transition)
        return decision

    def init(self, tid: str = "t", timeout: int = 60_000, pid: int = -1, epoch: int = -1) -> Decision:
        decision = self.coordinator.init_producer_id(tid, timeout, self.now, pid, epoch)
        self.write(decision)
        return decision

    def add(self, pid: int, epoch: int, *parts: tuple[str, int], tid: str = "t") -> Decision:
        decision = self.coordinator.add_partitions(tid, pid, epoch, parts, self.now)
        self.write(decision)
        return decision

    def end(self, pid: int, epoch: int, commit: bool, tid: str = "t", markers: bool = True) -> Decision:
        decision = self.coordinator.end_txn(tid, pid, epoch, commit, self.now)
        self.write(decision)
        if markers and decision.transition is not None:
            self.write(self.coordinator.markers_written(tid, self.now))
        return decision

    def state(self, tid: str = "t") -> TxnState:
        return self.coordinator.txns[tid].state


# -- states and records -------------------------------------------------------------------------


def test_state_ids_and_valid_previous() -> None:
    assert [s.id for s in S] == [0, 1, 2, 3, 4, 5, 6, 7]
    assert S.PREPARE_COMMIT.valid_previous == {S.ONGOING}
    assert S.PREPARE_ABORT.valid_previous == {S.ONGOING, S.PREPARE_EPOCH_FENCE}
    assert S.EMPTY.valid_previous == {S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}
    assert S.PREPARE_EPOCH_FENCE.kafka_name == "PrepareEpochFence"


def test_record_layout() -> None:
    assert encode_key("ab") == struct.pack(">hh", 0, 2) + b"ab"
    empty = TxnLogValue(7, 1, 60_000, S.EMPTY, frozenset(), 5, -1)
    assert encode_value(empty) == struct.pack(">hqhibiqq", 0, 7, 1, 60_000, 0, -1, 5, -1)
    ongoing = TxnLogValue(7, 1, 60_000, S.ONGOING, frozenset({("a", 1), ("a", 0)}), 5, 4)
    assert encode_value(ongoing) == (
        struct.pack(">hqhib", 0, 7, 1, 60_000, 1)
        + struct.pack(">ih", 1, 1)
        + b"a"
        + struct.pack(">iii", 2, 0, 1)
        + struct.pack(">qq", 5, 4)
    )
    with pytest.raises(TxnRecordError):
        decode_value(encode_value(ongoing)[:-1])
    with pytest.raises(TxnRecordError):
        decode_key(struct.pack(">hh", 1, 0))


@settings(max_examples=200)
@given(
    tid=st.text(max_size=20),
    pid=st.integers(0, 2**63 - 1),
    epoch=st.integers(0, 32767),
    state=st.sampled_from(list(S)),
    parts=st.frozensets(st.tuples(st.text(min_size=1, max_size=5), st.integers(0, 100)), max_size=6),
    times=st.tuples(st.integers(-1, 2**62), st.integers(-1, 2**62)),
)
def test_record_round_trip(
    tid: str, pid: int, epoch: int, state: S, parts: frozenset[tuple[str, int]], times: tuple[int, int]
) -> None:
    value = TxnLogValue(pid, epoch, 1000, state, parts, *times)
    assert decode_key(encode_key(tid)) == tid
    assert decode_value(encode_value(value)) == value


def test_partition_is_javas_placement() -> None:
    assert java_string_hash("hello") == 99162322
    assert java_string_hash("") == 0
    assert java_string_hash("polygenelubricants") == -(2**31)  # Integer.MIN_VALUE: abs() is 0
    assert partition_for("polygenelubricants", 50) == 0
    assert java_string_hash("\U0001f600") == 1772899  # a surrogate pair counts two UTF-16 units
    assert partition_for("hello", 50) == 99162322 % 50


# -- requests -------------------------------------------------------------------------------------


def test_commit_flow() -> None:
    h = Host()
    init = h.init()
    assert (init.error, init.producer_id, init.producer_epoch) == (NONE, 1000, 0)
    assert h.add(1000, 0, ("a", 0)).transition is not None
    assert h.state() is S.ONGOING
    assert h.add(1000, 0, ("a", 0)) == Decision(NONE)  # already in: no write
    h.clock.advance(10)
    decision = h.coordinator.end_txn("t", 1000, 0, True, h.now)
    assert decision.error is NONE and decision.transition is not None
    assert h.coordinator.end_txn("t", 1000, 0, True, h.now).error is CONCURRENT  # pending append
    h.write(decision)
    assert h.state() is S.PREPARE_COMMIT
    assert h.coordinator.txns["t"].partitions == {("a", 0)}
    assert h.coordinator.end_txn("t", 1000, 0, True, h.now).error is CONCURRENT  # markers in flight
    assert h.coordinator.add_partitions("t", 1000, 0, [("b", 0)], h.now).error is CONCURRENT
    assert [m.transactional_id for m in h.coordinator.pending_markers()] == ["t"]
    h.write(h.coordinator.markers_written("t", h.now))
    assert h.state() is S.COMPLETE_COMMIT and not h.coordinator.txns["t"].partitions
    assert h.end(1000, 0, True) == Decision(NONE)  # a retry
    assert h.end(1000, 0, False).error is ErrorCode.INVALID_TXN_STATE


def test_verify_partitions_answers_for_the_ongoing_transaction_only() -> None:
    """KIP-890's verify_only: NONE for a partition of the ongoing transaction, INVALID_TXN_STATE for any
    other (before it starts, after it ended), the identity errors, CONCURRENT_TRANSACTIONS while
    Prepare*; nothing is ever written."""
    h = Host()
    h.init()
    invalid = ErrorCode.INVALID_TXN_STATE
    verify = h.coordinator.verify_partitions
    assert verify("t", 1000, 0, [("a", 0)]) == {("a", 0): invalid}  # Empty: no transaction yet
    assert verify("other", 1000, 0, [("a", 0)]) == {("a", 0): ErrorCode.INVALID_PRODUCER_ID_MAPPING}
    h.add(1000, 0, ("a", 0))
    before = len(h.log)
    assert verify("t", 1000, 0, [("a", 0), ("a", 1)]) == {("a", 0): NONE, ("a", 1): invalid}
    assert verify("t", 1001, 0, [("a", 0)]) == {("a", 0): ErrorCode.INVALID_PRODUCER_ID_MAPPING}
    assert verify("t", 1000, 1, [("a", 0)]) == {("a", 0): FENCED}
    decision = h.coordinator.end_txn("t", 1000, 0, True, h.now)
    h.write(decision)
    assert verify("t", 1000, 0, [("a", 0)]) == {("a", 0): CONCURRENT}  # PrepareCommit
    h.write(h.coordinator.markers_written("t", h.now))
    assert verify("t", 1000, 0, [("a", 0)]) == {("a", 0): invalid}  # CompleteCommit: a late batch
    assert len(h.log) == before + 2  # the end's two records; verification wrote none


def test_bad_input_errors() -> None:
    h = Host()
    assert h.init(timeout=0).error is ErrorCode.INVALID_TRANSACTION_TIMEOUT
    assert h.init(timeout=900_001).error is ErrorCode.INVALID_TRANSACTION_TIMEOUT
    assert h.add(5, 0, ("a", 0)).error is ErrorCode.INVALID_PRODUCER_ID_MAPPING  # before InitProducerId
    assert h.end(5, 0, True).error is ErrorCode.INVALID_PRODUCER_ID_MAPPING
    h.init()
    assert h.end(1000, 0, True).error is ErrorCode.INVALID_TXN_STATE  # nothing to end
    assert h.add(1001, 0, ("a", 0)).error is ErrorCode.INVALID_PRODUCER_ID_MAPPING
    assert h.add(1000, 3, ("a", 0)).error is FENCED
    assert h.init(pid=1000, epoch=7).error is FENCED  # v3+: not this producer's current epoch
    assert h.init(pid=1000, epoch=0).producer_epoch == 1


def test_reinit_fences_an_open_transaction() -> None:
    h = Host()
    h.init()
    h.add(1000, 0, ("a", 0))
    fence = h.init()
    assert fence.error is CONCURRENT and fence.transition is not None
    assert fence.transition.state is S.PREPARE_ABORT and fence.transition.value.producer_epoch == 1
    assert h.state() is S.PREPARE_ABORT
    assert h.add(1000, 0, ("a", 1)).error is FENCED  # the zombie
    assert h.init().error is CONCURRENT  # markers not yet written
    h.write(h.coordinator.markers_written("t", h.now))
    assert h.state() is S.COMPLETE_ABORT
    again = h.init()
    assert (again.error, again.producer_epoch) == (NONE, 2)
    assert h.end(1000, 1, False).error is FENCED


def test_timeout_aborts_and_fences() -> None:
    h = Host()
    h.init(timeout=2000)
    h.add(1000, 0, ("a", 0))
    assert h.coordinator.expired_transactions(h.now + 1999) == []
    (expired,) = h.coordinator.expired_transactions(h.now + 2000)
    assert expired.state is S.PREPARE_ABORT and expired.value.producer_epoch == 1
    assert h.coordinator.expired_transactions(h.now + 5000) == []  # already pending
    h.write(expired)
    h.write(h.coordinator.markers_written("t", h.now))
    assert h.end(1000, 0, True).error is FENCED  # the late commit of the timed-out producer


def test_failed_append_changes_nothing() -> None:
    h = Host()
    h.init()
    decision = h.coordinator.add_partitions("t", 1000, 0, [("a", 0)], h.now)
    assert decision.transition is not None
    h.coordinator.abandon(decision.transition)
    assert h.state() is S.EMPTY and h.coordinator.txns["t"].pending is None
    with pytest.raises(RuntimeError):
        h.coordinator.complete(decision.transition)


def test_epoch_exhaustion_starts_a_new_producer_id() -> None:
    h = Host()
    h.init()
    h.coordinator.txns["t"].producer_epoch = 32766
    decision = h.init()
    assert (decision.producer_id, decision.producer_epoch) == (1001, 0)


def test_replay_rebuilds_state_and_resumes_markers() -> None:
    h = Host()
    h.init("x")
    h.add(1000, 0, ("a", 0), tid="x")
    h.end(1000, 0, True, tid="x", markers=False)
    h.init("y")
    loaded = TransactionCoordinator(Ids())
    for key, value in h.log:
        loaded.replay(decode_key(key), decode_value(value))
    assert loaded.txns["x"].state is S.PREPARE_COMMIT and loaded.txns["x"].partitions == {("a", 0)}
    assert [m.transactional_id for m in loaded.pending_markers()] == ["x"]
    assert loaded.txns["y"].producer_id == 1001
    loaded.replay("y", None)
    assert "y" not in loaded.txns


OPS = st.lists(
    st.tuples(
        st.sampled_from(["init", "add", "commit", "abort", "markers", "expire", "stale", "fail"]),
        st.sampled_from(["t", "u"]),
        st.integers(0, 3000),
    ),
    max_size=60,
)


@settings(max_examples=150, deadline=None)
@given(ops=OPS)
def test_any_request_order_keeps_the_state_machine_valid(ops: list[tuple[str, str, int]]) -> None:
    """Whatever clients send, every transition is valid, epochs never go back, and the log replays."""
    h = Host()
    seen: dict[str, tuple[int, int]] = {}
    for op, tid, delta in ops:
        h.clock.advance(delta)
        meta = h.coordinator.txns.get(tid)
        pid, epoch = (meta.producer_id, meta.producer_epoch) if meta else (1, 0)
        decision: Decision | None = None
        if op == "init":
            decision = h.init(tid, timeout=2000)
        elif op == "add":
            decision = h.add(pid, epoch, ("a", delta % 3), tid=tid)
        elif op in ("commit", "abort"):
            decision = h.end(pid, epoch, op == "commit", tid=tid, markers=delta % 2 == 0)
        elif op == "markers":
            h.write(h.coordinator.markers_written(tid, h.now))
        elif op == "expire":
            for transition in h.coordinator.expired_transactions(h.now):
                h.write(transition)
        elif op == "stale":
            decision = h.add(pid, epoch - 1, ("a", 0), tid=tid)
            assert decision.error in (FENCED, ErrorCode.INVALID_PRODUCER_ID_MAPPING)
        elif op == "fail":
            pending = h.coordinator.add_partitions(tid, pid, epoch, [("z", 9)], h.now).transition
            if pending is not None:
                h.coordinator.abandon(pending)
        if decision is not None:
            assert decision.error in (
                NONE,
                CONCURRENT,
                FENCED,
                ErrorCode.INVALID_TXN_STATE,
                ErrorCode.INVALID_PRODUCER_ID_MAPPING,
            )
        for t, m in h.coordinator.txns.items():
            assert m.pending is None
            assert (m.producer_id, m.producer_epoch) >= seen.get(t, (0, -1)) or m.producer_epoch == 0
            seen[t] = (m.producer_id, m.producer_epoch)
            if m.state is S.EMPTY or m.state.is_complete:
                assert not m.partitions
    loaded = TransactionCoordinator(Ids())
    for key, value in h.log:
        loaded.replay(decode_key(key), decode_value(value))
    for t, m in h.coordinator.txns.items():
        if t in loaded.txns:
            got = loaded.txns[t]
            assert (got.producer_id, got.producer_epoch, got.state, got.partitions) == (
                m.producer_id,
                m.producer_epoch,
                m.state,
                m.partitions,
            )
