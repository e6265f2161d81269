"""The transaction coordinator's KIP-360 epoch bumps and transactional id expiration, sans-I/O."""

from __future__ import annotations

from test_transaction_coordinator import CONCURRENT, FENCED, NONE, Host

from strom.protocol.errors import ErrorCode
from strom.transaction.state import TxnState

S = TxnState
DAY_MS = 86_400_000


def test_bump_with_the_current_epoch_and_its_retry() -> None:
    h = Host()
    first = h.init()
    pid, epoch = first.producer_id, first.producer_epoch
    bumped = h.init(pid=pid, epoch=epoch)
    assert (bumped.error, bumped.producer_id, bumped.producer_epoch) == (NONE, pid, epoch + 1)
    written = len(h.log)
    retry = h.init(pid=pid, epoch=epoch)  # the answer to the bump was lost
    assert (retry.error, retry.producer_id, retry.producer_epoch, retry.transition) == (
        NONE,
        pid,
        epoch + 1,
        None,
    )
    assert len(h.log) == written  # nothing to write
    assert h.init(pid=pid, epoch=epoch - 1).error is FENCED  # older than the previous epoch
    assert h.init(pid=pid + 1, epoch=epoch + 1).error is FENCED  # another producer id


def test_previous_epoch_is_forgotten_once_a_transaction_starts() -> None:
    h = Host()
    pid, epoch = h.init().producer_id, 0
    h.init(pid=pid, epoch=epoch)  # epoch 1
    h.add(pid, 1, ("t", 0))
    h.end(pid, 1, commit=True)
    assert h.state() is S.COMPLETE_COMMIT
    assert h.init(pid=pid, epoch=0).error is FENCED  # a zombie of epoch 0 stays fenced
    assert h.init(pid=pid, epoch=1).producer_epoch == 2


def test_a_fenced_producer_recovers_with_a_bump_unless_someone_else_took_over() -> None:
    h = Host()
    pid = h.init().producer_id
    h.add(pid, 0, ("t", 0))
    # Its own InitProducerId (v3+) while the transaction is open: the transaction is fenced and aborted.
    fence = h.init(pid=pid, epoch=0)
    assert fence.error is CONCURRENT and fence.transition is not None
    h.write(h.coordinator.markers_written("t", h.now))
    assert (h.state(), h.coordinator.txns["t"].producer_epoch) == (S.COMPLETE_ABORT, 1)
    recovered = h.init(pid=pid, epoch=0)  # the retry: the fence's epoch was 0 -> carry on bumped
    assert (recovered.error, recovered.producer_epoch) == (NONE, 2)
    # A transaction timed out and aborted by the coordinator, then a new instance starts first.
    h.add(pid, 2, ("t", 0))
    h.clock.advance(60_001)
    for transition in h.coordinator.expired_transactions(h.now):
        h.write(transition)
        h.write(h.coordinator.markers_written("t", h.now))
    assert h.init().producer_epoch == 4  # the new instance (no producer id given)
    assert h.init(pid=pid, epoch=2).error is FENCED


def test_idle_ids_expire_with_a_tombstone() -> None:
    h = Host()
    pid = h.init(tid="idle").producer_id
    h.init(tid="busy")
    h.add(h.coordinator.txns["busy"].producer_id, 0, ("t", 0), tid="busy")
    h.init(tid="done")
    h.clock.advance(DAY_MS)
    assert h.coordinator.expired_transactional_ids(DAY_MS + 1, h.now) == []
    h.init(tid="done", pid=h.coordinator.txns["done"].producer_id, epoch=0)  # used again: not idle
    h.clock.advance(1)
    expired = h.coordinator.expired_transactional_ids(DAY_MS, h.now)
    assert [t.transactional_id for t in expired] == ["idle"]  # Ongoing never expires
    assert expired[0].state is S.DEAD
    assert h.coordinator.init_producer_id("idle", 1000, h.now).error is CONCURRENT  # the tombstone is pending
    h.write(expired[0])
    assert "idle" not in h.coordinator.txns
    again = h.init(tid="idle")
    assert again.error is ErrorCode.NONE and again.producer_id != pid and again.producer_epoch == 0


def test_a_failed_tombstone_keeps_the_id() -> None:
    h = Host()
    h.init(tid="idle")
    h.clock.advance(DAY_MS)
    (tombstone,) = h.coordinator.expired_transactional_ids(DAY_MS, h.now)
    h.coordinator.abandon(tombstone)
    assert h.state("idle") is S.EMPTY
    assert [t.transactional_id for t in h.coordinator.expired_transactional_ids(DAY_MS, h.now)] == ["idle"]
