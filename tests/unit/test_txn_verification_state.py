"""The partition's KIP-890 verification state: one guard per producer and epoch, confirmed or failed by
the coordinator's answer, voided by the producer's marker or a new epoch."""

from __future__ import annotations

from strom.storage.producer_state import ProducerStateEntry
from strom.storage.txn_verification import VerificationState, in_open_transaction


def test_a_confirmed_guard_verifies_until_the_marker() -> None:
    state = VerificationState()
    guard = state.begin(7, 0)
    assert state.begin(7, 0) is guard  # concurrent requests of one producer share the question
    assert not state.verified(7, 0)
    state.confirm(7, guard)
    assert state.verified(7, 0) and not state.verified(7, 1)
    state.fail(7, guard)  # a late failure does not undo a confirmation
    assert state.verified(7, 0)
    state.end(7)
    assert not state.verified(7, 0) and len(state) == 0


def test_a_replaced_or_ended_guard_confirms_nothing() -> None:
    state = VerificationState()
    old = state.begin(7, 0)
    new = state.begin(7, 1)  # a bumped epoch replaces the question
    state.confirm(7, old)
    assert not state.verified(7, 0) and not state.verified(7, 1)
    state.end(7)  # the marker arrived while the question was out
    state.confirm(7, new)
    assert not state.verified(7, 1)
    failed = state.begin(8, 0)
    state.fail(8, failed)
    assert len(state) == 0
    state.begin(9, 0)
    state.clear()
    assert len(state) == 0


def test_an_open_transaction_at_the_epoch_needs_no_verification() -> None:
    entry = ProducerStateEntry(producer_id=7, producer_epoch=2)
    assert not in_open_transaction(None, 2) and not in_open_transaction(entry, 2)
    entry.current_txn_first_offset = 40
    assert in_open_transaction(entry, 2) and not in_open_transaction(entry, 3)
