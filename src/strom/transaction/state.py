"""Transaction states (Kafka's ``TransactionState``) with their ids in ``__transaction_state`` and valid
previous states.

    Empty             a producer id and epoch, no transaction (after InitProducerId or completion)
    Ongoing           partitions were added; records may be written to them
    PrepareCommit     EndTxn(commit) is durable; the coordinator writes COMMIT markers
    PrepareAbort      EndTxn(abort), a fence or a timeout is durable; ABORT markers are being written
    CompleteCommit    every marker of the commit is written
    CompleteAbort     every marker of the abort is written
    Dead              the transactional id expired (its record becomes a tombstone)
    PrepareEpochFence a pending state only: the epoch is bumped to fence a producer, then aborted

Every change is first written to the log as a pending transition and takes effect once the append
is durable (`TransactionCoordinator.complete`); the target state's `valid_previous` guards it.
"""

from __future__ import annotations

import enum


class TxnState(enum.Enum):
    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    PREPARE_EPOCH_FENCE = 7

    @property
    def id(self) -> int:
        return int(self.value)

    @property
    def valid_previous(self) -> frozenset[TxnState]:
        return _VALID_PREVIOUS[self]

    @property
    def is_prepare(self) -> bool:
        return self in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT)

    @property
    def is_complete(self) -> bool:
        return self in (TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT)

    @property
    def kafka_name(self) -> str:
        """The name DescribeTransactions and Kafka's tools use."""
        return "".join(part.capitalize() for part in self.name.split("_"))


_S = TxnState
_VALID_PREVIOUS: dict[TxnState, frozenset[TxnState]] = {
    _S.EMPTY: frozenset({_S.EMPTY, _S.COMPLETE_COMMIT, _S.COMPLETE_ABORT}),
    _S.ONGOING: frozenset({_S.ONGOING, _S.EMPTY, _S.COMPLETE_COMMIT, _S.COMPLETE_ABORT}),
    _S.PREPARE_COMMIT: frozenset({_S.ONGOING}),
    _S.PREPARE_ABORT: frozenset({_S.ONGOING, _S.PREPARE_EPOCH_FENCE}),
    _S.COMPLETE_COMMIT: frozenset({_S.PREPARE_COMMIT}),
    _S.COMPLETE_ABORT: frozenset({_S.PREPARE_ABORT}),
    _S.DEAD: frozenset({_S.EMPTY, _S.COMPLETE_COMMIT, _S.COMPLETE_ABORT}),
    _S.PREPARE_EPOCH_FENCE: frozenset({_S.ONGOING}),
}
