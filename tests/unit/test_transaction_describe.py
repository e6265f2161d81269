"""ListTransactions' filters (strom.transaction.describe), pure."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from strom.transaction.coordinator import TxnMetadata
from strom.transaction.describe import STATE_BY_NAME, compile_pattern, list_transactions, running_longer_than
from strom.transaction.state import TxnState

S = TxnState
NOW = 100_000


def meta(tid: str, pid: int, state: TxnState, start_ms: int = -1) -> TxnMetadata:
    return TxnMetadata(tid, pid, 0, 60_000, state, start_ms=start_ms)


TXNS = [
    meta("a", 1, S.ONGOING, start_ms=NOW - 5_000),
    meta("b", 2, S.COMPLETE_COMMIT, start_ms=NOW - 50_000),
    meta("c", 3, S.EMPTY),
    meta("d", 4, S.PREPARE_ABORT, start_ms=NOW - 20_000),
    meta("e", 5, S.DEAD),
]


def ids(listing: list[TxnMetadata]) -> list[str]:
    return [m.transactional_id for m in listing]


def test_no_filters_lists_every_live_id_sorted() -> None:
    listing = list_transactions(reversed(TXNS), [], [], NOW)
    assert listing.unknown_state_filters == []
    assert ids(listing.transactions) == ["a", "b", "c", "d"]  # Dead is never listed


def test_state_filters_use_kafka_names_and_echo_unknown_ones() -> None:
    listing = list_transactions(TXNS, ["Ongoing", "PrepareAbort", "Running"], [], NOW)
    assert ids(listing.transactions) == ["a", "d"]
    assert listing.unknown_state_filters == ["Running"]
    only_unknown = list_transactions(TXNS, ["Running"], [], NOW)
    assert only_unknown == (["Running"], [])  # every filter unknown: nothing matches
    assert set(STATE_BY_NAME) >= {"Empty", "CompleteCommit", "PrepareEpochFence"}


def test_producer_id_filter() -> None:
    assert ids(list_transactions(TXNS, [], [2, 4, 99], NOW).transactions) == ["b", "d"]
    assert ids(list_transactions(TXNS, ["Ongoing"], [2], NOW).transactions) == []


def test_duration_filter_keeps_open_transactions_older_than_it() -> None:
    assert ids(list_transactions(TXNS, [], [], NOW, duration_filter_ms=1_000).transactions) == ["a", "d"]
    assert ids(list_transactions(TXNS, [], [], NOW, duration_filter_ms=10_000).transactions) == ["d"]
    assert ids(list_transactions(TXNS, [], [], NOW, duration_filter_ms=20_000).transactions) == []


def test_transactional_id_pattern_matches_whole_ids() -> None:
    assert ids(list_transactions(TXNS, [], [], NOW, pattern=compile_pattern("[ab]")).transactions) == [
        "a",
        "b",
    ]
    assert ids(list_transactions(TXNS, [], [], NOW, pattern=compile_pattern("a.+")).transactions) == []
    assert compile_pattern(None) is None and compile_pattern("") is None
    with pytest.raises(ValueError):
        compile_pattern("(")


@given(st.sampled_from(list(TxnState)), st.integers(-1, NOW), st.integers(0, 2 * NOW))
def test_running_longer_than_needs_an_open_started_transaction(
    state: TxnState, start_ms: int, duration_ms: int
) -> None:
    got = running_longer_than(meta("x", 1, state, start_ms), duration_ms, NOW)
    is_open = state in (S.ONGOING, S.PREPARE_COMMIT, S.PREPARE_ABORT)
    assert got == (is_open and start_ms >= 0 and NOW - start_ms > duration_ms)


def test_a_partitions_open_transaction_is_hanging_unless_its_coordinator_holds_it() -> None:
    from strom.console.transactions import coordinator_knows

    open_here = ("Ongoing", 3, {("t", 0), ("t", 1)})
    assert coordinator_knows("t", 0, 3, [open_here])
    assert coordinator_knows("t", 0, 3, [("PrepareCommit", 3, {("t", 0)})])  # markers on their way
    assert not coordinator_knows("t", 2, 3, [open_here])  # another partition
    assert not coordinator_knows("t", 0, 2, [open_here])  # the coordinator moved on to a newer epoch
    assert not coordinator_knows("t", 0, 3, [("CompleteAbort", 3, set())])
    assert not coordinator_knows("t", 0, 3, [])  # no coordinator knows the producer at all
