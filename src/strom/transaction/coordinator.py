"""`TransactionCoordinator`: Kafka's transaction coordinator decisions, sans-I/O.

Theory of operation (Kafka's ``TransactionCoordinator`` and ``TransactionMetadata``, transaction
version 1). Per transactional id the coordinator keeps a `TxnMetadata`: producer id and epoch, the
transaction timeout, the state (state.py), the partitions of the ongoing transaction and its start
time. A request never changes that state directly. A decision returns a `Transition` (the new
metadata) that the host appends to ``__transaction_state`` (records.py) and then reports with
`complete` (the append is durable: the transition takes effect) or `abandon` (it failed: nothing
changes). While a transition is pending, requests for that id get CONCURRENT_TRANSACTIONS, so every
state the clients observe is one the log holds.

Requests (error codes as Kafka answers at the newest versions; the host maps PRODUCER_FENCED to
INVALID_PRODUCER_EPOCH for older versions, docs/transactions.md#what-a-client-sees):

- `init_producer_id`: a timeout outside ``(0, transaction.max.timeout.ms]`` -> INVALID_TRANSACTION_TIMEOUT.
  An unknown id gets a new producer id at epoch 0. Empty or Complete*: the epoch is bumped (a new
  producer id once the epoch would pass 32766), fencing any older instance. Ongoing: the open
  transaction is fenced: epoch + 1 and PrepareAbort (the host then writes ABORT markers with that
  epoch), and the client gets CONCURRENT_TRANSACTIONS; its retry finds CompleteAbort and bumps again.
  Prepare* or pending: CONCURRENT_TRANSACTIONS. A given producer id/epoch (v3+, KIP-360: a producer
  recovering from an abortable error bumps its own epoch) must be the current one, else
  PRODUCER_FENCED, or the epoch the last bump or fence replaced (kept in memory only, as
  ``__transaction_state`` v0 has no field for it): in Empty that is a retry of the bump whose answer
  was lost, answered with the current id and epoch without a write; after a fence's abort (a timeout,
  or this producer's own InitProducerId while its transaction was open) the producer recovers with a
  bump. Any other transition forgets the previous epoch, so a zombie older than that stays fenced.
- `add_partitions` (AddPartitionsToTxn; AddOffsetsToTxn adds the group's ``__consumer_offsets``
  partition the same way): unknown id or another producer id -> INVALID_PRODUCER_ID_MAPPING, another
  epoch -> PRODUCER_FENCED, Prepare* or pending -> CONCURRENT_TRANSACTIONS; partitions already in the
  transaction -> NONE without a write; otherwise Ongoing with the union, the start time stamped when
  the transaction begins.
- `end_txn`: the same identity checks; Ongoing -> PrepareCommit/PrepareAbort (the answer waits for
  that append; then the host writes the markers and calls `markers_written`, which yields the
  Complete* transition). A retry of a finished end (CompleteCommit + commit, CompleteAbort + abort)
  -> NONE; of one in progress -> CONCURRENT_TRANSACTIONS; anything else -> INVALID_TXN_STATE.
- `expired_transactions`: Ongoing transactions past start + timeout are fenced and aborted like
  InitProducerId does (the zombie then gets INVALID_PRODUCER_EPOCH from partitions and a fence error
  from the coordinator).
- `expired_transactional_ids`: ids idle (Empty or Complete*, no pending change) for
  ``transactional.id.expiration.ms`` since their last update move to Dead; the host writes Dead as a
  tombstone and, once it is durable, the id is forgotten (a later InitProducerId starts it afresh with
  a new producer id), as Kafka's ``removeExpiredTransactionalIds`` does.
- `replay` rebuilds the metadata from the log (failover); `pending_markers` lists the Prepare*
  transactions whose markers must be (re)sent after a load.

Not thread-safe: the host calls it from one event loop.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import NamedTuple

from strom.protocol.errors import ErrorCode
from strom.transaction.ports import ProducerIdSource
from strom.transaction.records import TxnLogValue
from strom.transaction.state import TxnState

DEFAULT_MAX_TIMEOUT_MS = 900_000
MAX_EPOCH = 32767
NO_PRODUCER_ID = -1
NO_EPOCH = -1
_S = TxnState


def _every_id(_transactional_id: str) -> bool:
    return True


@dataclass(slots=True)
class TxnMetadata:
    transactional_id: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TxnState
    partitions: frozenset[tuple[str, int]] = frozenset()
    start_ms: int = -1
    last_update_ms: int = -1
    pending: Transition | None = field(default=None, repr=False)
    previous_epoch: int = NO_EPOCH  # before the last InitProducerId bump (a retry of it is answered)


@dataclass(frozen=True, slots=True)
class Transition:
    """A new state for one id, to be made durable before it takes effect."""

    transactional_id: str
    value: TxnLogValue

    @property
    def state(self) -> TxnState:
        return self.value.state


class Decision(NamedTuple):
    """A request's answer: an error (NONE on success) and the transition to append first, if any.

    When ``transition`` is set the client is answered once it is durable, with ``error``, unless
    the append fails. ``producer_id``/``producer_epoch`` are what InitProducerId returns.
    """

    error: ErrorCode
    transition: Transition | None = None
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_EPOCH


class TransactionCoordinator:
    """The decisions for the transactional ids of the ``__transaction_state`` partitions led here."""

    def __init__(self, producer_ids: ProducerIdSource, max_timeout_ms: int = DEFAULT_MAX_TIMEOUT_MS) -> None:
        self._producer_ids = producer_ids
        self.max_timeout_ms = max_timeout_ms
        self.txns: dict[str, TxnMetadata] = {}

    # -- InitProducerId -----------------------------------------------------------------------------
    def init_producer_id(
        self,
        transactional_id: str,
        timeout_ms: int,
        now_ms: int,
        producer_id: int = NO_PRODUCER_ID,
        producer_epoch: int = NO_EPOCH,
    ) -> Decision:
        if not 0 < timeout_ms <= self.max_timeout_ms:
            return Decision(ErrorCode.INVALID_TRANSACTION_TIMEOUT)
        meta = self.txns.get(transactional_id)
        if meta is None or meta.state is _S.DEAD:
            pid = self._producer_ids.next_producer_id()
            meta = self.txns[transactional_id] = TxnMetadata(
                transactional_id, pid, NO_EPOCH, timeout_ms, _S.EMPTY
            )
            return self._bump(meta, timeout_ms, now_ms)
        if meta.pending is not None or meta.state.is_prepare:
            return Decision(ErrorCode.CONCURRENT_TRANSACTIONS)
        if producer_id != NO_PRODUCER_ID and (producer_id, producer_epoch) != (
            meta.producer_id,
            meta.producer_epoch,
        ):
            if not self._is_previous(meta, producer_id, producer_epoch):
                return Decision(ErrorCode.PRODUCER_FENCED)
            if meta.state is _S.EMPTY:  # a retry of the bump that made this epoch
                return Decision(ErrorCode.NONE, None, meta.producer_id, meta.producer_epoch)
            # Complete*: the coordinator fenced this producer's transaction (a timeout, or an
            # InitProducerId it sent while the transaction was open); it may carry on with a bump.
        if meta.state is _S.ONGOING:
            fence = self._fence(meta, now_ms)
            return (
                Decision(ErrorCode.CONCURRENT_TRANSACTIONS, fence)
                if fence
                else Decision(ErrorCode.CONCURRENT_TRANSACTIONS)
            )
        return self._bump(meta, timeout_ms, now_ms)

    @staticmethod
    def _is_previous(meta: TxnMetadata, producer_id: int, producer_epoch: int) -> bool:
        return meta.previous_epoch != NO_EPOCH and (producer_id, producer_epoch) == (
            meta.producer_id,
            meta.previous_epoch,
        )

    def _bump(self, meta: TxnMetadata, timeout_ms: int, now_ms: int) -> Decision:
        pid, epoch = meta.producer_id, meta.producer_epoch + 1
        if epoch >= MAX_EPOCH:  # epochs are int16; Kafka starts a new producer id before the last one
            pid, epoch = self._producer_ids.next_producer_id(), 0
        value = TxnLogValue(pid, epoch, timeout_ms, _S.EMPTY, frozenset(), now_ms, -1)
        transition = self._prepare(meta, value)
        return Decision(ErrorCode.NONE, transition, pid, epoch)

    def _fence(self, meta: TxnMetadata, now_ms: int) -> Transition | None:
        """PrepareAbort at epoch + 1: the open transaction ends and its producer is fenced."""
        if meta.producer_epoch + 1 >= MAX_EPOCH:
            epoch = meta.producer_epoch  # cannot bump further: abort at the current epoch
        else:
            epoch = meta.producer_epoch + 1
        value = self._value(meta, state=_S.PREPARE_ABORT, producer_epoch=epoch, last_update_ms=now_ms)
        return self._prepare(meta, value)

    # -- AddPartitionsToTxn / AddOffsetsToTxn -------------------------------------------------------
    def add_partitions(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: Iterable[tuple[str, int]],
        now_ms: int,
    ) -> Decision:
        meta, error = self._identify(transactional_id, producer_id, producer_epoch)
        if meta is None:
            return Decision(error)
        if meta.pending is not None or meta.state.is_prepare:
            return Decision(ErrorCode.CONCURRENT_TRANSACTIONS)
        if meta.state is _S.DEAD or meta.state is _S.PREPARE_EPOCH_FENCE:
            return Decision(ErrorCode.INVALID_TXN_STATE)
        wanted = frozenset(partitions)
        if meta.state is _S.ONGOING and wanted <= meta.partitions:
            return Decision(ErrorCode.NONE)
        begins = meta.state is not _S.ONGOING
        value = self._value(
            meta,
            state=_S.ONGOING,
            partitions=(frozenset() if begins else meta.partitions) | wanted,
            start_ms=now_ms if begins else meta.start_ms,
            last_update_ms=now_ms,
        )
        return Decision(ErrorCode.NONE, self._prepare(meta, value))

    def verify_partitions(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: Iterable[tuple[str, int]],
    ) -> dict[tuple[str, int], ErrorCode]:
        """KIP-890 part 1 (AddPartitionsToTxn v4+ ``verify_only``): whether the producer's ongoing
        transaction holds each partition, asked by a partition leader before it appends a transaction's
        first batch there. Nothing changes. Unknown id or another producer id ->
        INVALID_PRODUCER_ID_MAPPING, another epoch -> PRODUCER_FENCED, Prepare* ->
        CONCURRENT_TRANSACTIONS, for every partition; otherwise NONE for a partition of the transaction
        and INVALID_TXN_STATE for any other (a late or stray batch: appending it would open a
        transaction no coordinator ends). A pending change is not waited for: only a durable
        AddPartitionsToTxn, which the client awaits before it produces, lets a batch in."""
        wanted = list(partitions)
        meta, error = self._identify(transactional_id, producer_id, producer_epoch)
        if meta is None:
            return dict.fromkeys(wanted, error)
        if meta.state.is_prepare:
            return dict.fromkeys(wanted, ErrorCode.CONCURRENT_TRANSACTIONS)
        ongoing = meta.state is _S.ONGOING
        return {
            tp: ErrorCode.NONE if ongoing and tp in meta.partitions else ErrorCode.INVALID_TXN_STATE
            for tp in wanted
        }

    # -- EndTxn ---------------------------------------------------------------------------------
    def end_txn(
        self, transactional_id: str, producer_id: int, producer_epoch: int, commit: bool, now_ms: int
    ) -> Decision:
        meta, error = self._identify(transactional_id, producer_id, producer_epoch)
        if meta is None:
            return Decision(error)
        if meta.pending is not None:
            return Decision(ErrorCode.CONCURRENT_TRANSACTIONS)
        state = meta.state
        if state is _S.ONGOING:
            target = _S.PREPARE_COMMIT if commit else _S.PREPARE_ABORT
            return Decision(
                ErrorCode.NONE, self._prepare(meta, self._value(meta, state=target, last_update_ms=now_ms))
            )
        if (state, commit) in ((_S.COMPLETE_COMMIT, True), (_S.COMPLETE_ABORT, False)):
            return Decision(ErrorCode.NONE)  # a retry of an end that finished
        if (state, commit) in ((_S.PREPARE_COMMIT, True), (_S.PREPARE_ABORT, False)):
            return Decision(ErrorCode.CONCURRENT_TRANSACTIONS)  # a retry of an end in progress
        return Decision(ErrorCode.INVALID_TXN_STATE)

    def markers_written(self, transactional_id: str, now_ms: int) -> Transition | None:
        """Every marker of a Prepare* transaction is written: the Complete* transition to append."""
        meta = self.txns.get(transactional_id)
        if meta is None or meta.pending is not None or not meta.state.is_prepare:
            return None
        target = _S.COMPLETE_COMMIT if meta.state is _S.PREPARE_COMMIT else _S.COMPLETE_ABORT
        return self._prepare(
            meta, self._value(meta, state=target, partitions=frozenset(), last_update_ms=now_ms)
        )

    # -- timeouts ---------------------------------------------------------------------------------
    def expired_transactions(self, now_ms: int, owned: Callable[[str], bool] = _every_id) -> list[Transition]:
        """Fence and abort every Ongoing transaction past its timeout (transitions to append); only ids
        ``owned`` says yes to (one ``__transaction_state`` partition's)."""
        out = []
        for meta in self.txns.values():
            if (
                owned(meta.transactional_id)
                and meta.state is _S.ONGOING
                and meta.pending is None
                and meta.start_ms + meta.timeout_ms <= now_ms
            ):
                fence = self._fence(meta, now_ms)
                if fence is not None:
                    out.append(fence)
        return out

    def expired_transactional_ids(
        self, expiration_ms: int, now_ms: int, owned: Callable[[str], bool] = _every_id
    ) -> list[Transition]:
        """Dead transitions (tombstones to append) for ids idle longer than ``expiration_ms`` (only ids
        ``owned`` says yes to)."""
        return [
            self._prepare(
                meta, self._value(meta, state=_S.DEAD, partitions=frozenset(), last_update_ms=now_ms)
            )
            for meta in list(self.txns.values())
            if owned(meta.transactional_id)
            and (meta.state is _S.EMPTY or meta.state.is_complete)
            and meta.pending is None
            and meta.last_update_ms + expiration_ms <= now_ms
        ]

    # -- the log ----------------------------------------------------------------------------------
    def complete(self, transition: Transition) -> None:
        """The transition's append is durable: it takes effect (Dead: the id is forgotten)."""
        meta = self.txns[transition.transactional_id]
        if meta.pending is not transition:
            raise RuntimeError(f"{transition.transactional_id}: completing a transition that is not pending")
        if transition.state is _S.DEAD:
            del self.txns[transition.transactional_id]
            return
        value = transition.value
        if value.producer_id != meta.producer_id:
            previous = NO_EPOCH
        elif value.producer_epoch != meta.producer_epoch:
            previous = meta.producer_epoch  # a bump or a fence
        elif (meta.state, value.state) == (_S.PREPARE_ABORT, _S.COMPLETE_ABORT):
            previous = meta.previous_epoch  # a fence's abort completing
        else:
            previous = NO_EPOCH
        self._apply(meta, value)
        meta.previous_epoch = previous

    def abandon(self, transition: Transition) -> None:
        """The append failed: the metadata stays as it was (a failed fence does not bump again later)."""
        meta = self.txns.get(transition.transactional_id)
        if meta is not None and meta.pending is transition:
            meta.pending = None

    def replay(self, transactional_id: str, value: TxnLogValue | None) -> None:
        """Apply a record read from ``__transaction_state`` (None: a tombstone)."""
        if value is None:
            self.txns.pop(transactional_id, None)
            return
        meta = self.txns.get(transactional_id)
        if meta is None:
            meta = self.txns[transactional_id] = TxnMetadata(
                transactional_id, value.producer_id, value.producer_epoch, value.timeout_ms, value.state
            )
        meta.pending = None
        self._apply(meta, value, check=False)

    def pending_markers(self) -> list[TxnMetadata]:
        """Prepare* transactions whose markers must be (re)sent, e.g. after loading the log."""
        return [m for m in self.txns.values() if m.state.is_prepare and m.pending is None]

    def drop(self, transactional_ids: Iterable[str]) -> None:
        """Forget ids of a partition this broker no longer leads."""
        for tid in transactional_ids:
            self.txns.pop(tid, None)

    # -- helpers ----------------------------------------------------------------------------------
    def _identify(
        self, tid: str, producer_id: int, producer_epoch: int
    ) -> tuple[TxnMetadata | None, ErrorCode]:
        meta = self.txns.get(tid)
        if meta is None or meta.producer_id != producer_id:
            return None, ErrorCode.INVALID_PRODUCER_ID_MAPPING
        if meta.producer_epoch != producer_epoch:
            return None, ErrorCode.PRODUCER_FENCED
        return meta, ErrorCode.NONE

    @staticmethod
    def _value(meta: TxnMetadata, **changes: object) -> TxnLogValue:
        current = TxnLogValue(
            meta.producer_id,
            meta.producer_epoch,
            meta.timeout_ms,
            meta.state,
            meta.partitions,
            meta.last_update_ms,
            meta.start_ms,
        )
        return dataclasses.replace(current, **changes)  # type: ignore[arg-type]

    @staticmethod
    def _prepare(meta: TxnMetadata, value: TxnLogValue) -> Transition:
        if meta.state not in value.state.valid_previous:
            raise RuntimeError(
                f"{meta.transactional_id}: {meta.state.name} -> {value.state.name} is not valid"
            )
        transition = Transition(meta.transactional_id, value)
        meta.pending = transition
        return transition

    @staticmethod
    def _apply(meta: TxnMetadata, value: TxnLogValue, check: bool = True) -> None:
        if check and meta.state not in value.state.valid_previous:
            raise RuntimeError(
                f"{meta.transactional_id}: {meta.state.name} -> {value.state.name} is not valid"
            )
        meta.producer_id, meta.producer_epoch, meta.timeout_ms = (
            value.producer_id,
            value.producer_epoch,
            value.timeout_ms,
        )
        meta.state, meta.partitions = value.state, value.partitions
        meta.start_ms, meta.last_update_ms = value.start_ms, value.last_update_ms
        meta.pending = None
