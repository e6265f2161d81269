"""What a coordinator is to the runtime: a shard per partition, its results, its states (pure).

A coordinator keeps its state in an internal topic (``__consumer_offsets``, ``__transaction_state``,
``_schemas``, ...). For every partition of that topic this broker leads, the runtime holds one
*shard*: the coordinator's in-memory state for that partition, rebuilt from the partition's records.
This module holds the vocabulary both sides share, with no I/O:

* `CoordinatorShard`: what the runtime calls on a shard. `replay` applies one stored record (while
  loading, and for the records of a write once they are appended); `replay_end_transaction` applies a
  COMMIT/ABORT marker found while loading (transactional coordinator writes: TxnOffsetCommit);
  `on_loaded` and `on_unloaded` bracket the shard's life (arm or stop timers, answer parked requests).
* `CoordinatorResult`: what a write operation returns: the records to append (as one batch), the
  response for the caller, whether the runtime replays the records into the shard after the append
  (Kafka's ``replayRecords``; a coordinator that applies its changes only once they are committed,
  as the transaction coordinator does with its pending transitions, says no), and an optional
  completion callback told NONE once the high watermark passed the records, or the error code.
* `ShardContext`: what a shard receives when it is built: its partition, the leader epoch it was
  loaded at, the clock and its `CoordinatorTimer`.
* `ShardState`: INITIAL -> LOADING -> ACTIVE, FAILED, CLOSED, each with its valid previous states
  (Kafka's ``CoordinatorRuntime.CoordinatorState``); `transition` checks a move.
* `coordinator_batch`: the one uncompressed batch a write becomes (a transactional batch of the
  producer for transactional coordinator writes, sequence unchecked, as Kafka's coordinator appends).
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

from strom._util.clock import Clock
from strom.protocol.errors import ErrorCode
from strom.protocol.records.builder import build_batch

T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)

# (key, value) of one coordinator record; a None value is a tombstone.
Record = tuple[bytes | None, bytes | None]
NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1


class CoordinatorError(Exception):
    """A write or a lookup the runtime refused: ``code`` is what the caller answers (NOT_COORDINATOR,
    COORDINATOR_LOAD_IN_PROGRESS, or the append's or the replication wait's error), ``cause`` the error
    the storage side reported (the same code when there was none)."""

    def __init__(self, code: ErrorCode, message: str = "", cause: ErrorCode | None = None) -> None:
        super().__init__(message or code.name)
        self.code = code
        self.cause = code if cause is None else cause


class ShardState(enum.Enum):
    """The life of one partition's shard on this broker.

    INITIAL: created, nothing read yet. LOADING: replaying the partition's records; requests get
    COORDINATOR_LOAD_IN_PROGRESS. ACTIVE: loaded; requests and writes run. FAILED: the load or a
    write's replay failed; requests get NOT_COORDINATOR until it reloads. CLOSED: leadership lost or
    the broker stopping; the shard is gone (requests get NOT_COORDINATOR).
    """

    INITIAL = "initial"
    LOADING = "loading"
    ACTIVE = "active"
    FAILED = "failed"
    CLOSED = "closed"

    @property
    def valid_previous(self) -> frozenset[ShardState]:
        return _VALID_PREVIOUS[self]


_S = ShardState
_VALID_PREVIOUS: dict[ShardState, frozenset[ShardState]] = {
    _S.INITIAL: frozenset(),
    _S.LOADING: frozenset({_S.INITIAL, _S.FAILED}),
    _S.ACTIVE: frozenset({_S.LOADING}),
    _S.FAILED: frozenset({_S.LOADING, _S.ACTIVE}),
    _S.CLOSED: frozenset({_S.INITIAL, _S.LOADING, _S.ACTIVE, _S.FAILED}),
}


def transition(current: ShardState, target: ShardState) -> ShardState:
    """``target`` if it may follow ``current``.

    Raises:
        RuntimeError: an illegal move (a bug in the runtime).
    """
    if current not in target.valid_previous:
        raise RuntimeError(f"coordinator shard cannot move from {current.name} to {target.name}")
    return target


def refusal(state: ShardState | None) -> ErrorCode | None:
    """What a request to a shard in ``state`` gets (None: ACTIVE, served); None state: no shard here."""
    if state is ShardState.ACTIVE:
        return None
    if state is ShardState.LOADING:
        return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
    return ErrorCode.NOT_COORDINATOR


@dataclass(frozen=True, slots=True)
class TransactionalProducer:
    """The producer whose transactional batch a coordinator write is (TxnOffsetCommit)."""

    producer_id: int
    producer_epoch: int


@dataclass(frozen=True, slots=True)
class CoordinatorResult(Generic[T]):
    records: Sequence[Record]
    response: T
    replay_records: bool = True
    producer: TransactionalProducer | None = None
    on_complete: Callable[[ErrorCode], None] | None = None


class CoordinatorShard(Protocol):
    def replay(
        self, offset: int, producer_id: int, producer_epoch: int, key: bytes | None, value: bytes | None
    ) -> None:
        """Apply one record (``producer_id`` is NO_PRODUCER_ID unless its batch is transactional)."""

    def replay_end_transaction(self, producer_id: int, producer_epoch: int, commit: bool) -> None:
        """Apply a COMMIT (``commit``) or ABORT marker of ``producer_id`` read from the partition."""

    def on_loaded(self) -> None:
        """Every record of the partition is replayed; the shard is about to take requests."""

    def on_unloaded(self) -> None:
        """Leadership is gone (or the broker stops): forget the state, stop timers, answer waiters."""


TimerOperation = Callable[[], CoordinatorResult[object]]


class CoordinatorTimer(Protocol):
    def schedule(self, key: str, delay_ms: int, operation: TimerOperation) -> None:
        """Run ``operation`` as a write of this shard after ``delay_ms`` on the clock (replacing a timer
        of the same key). Timers die with the shard."""

    def cancel(self, key: str) -> None: ...


@dataclass(frozen=True, slots=True)
class ShardContext:
    topic: str
    partition: int
    leader_epoch: int
    clock: Clock
    timer: CoordinatorTimer


ShardBuilder = Callable[[ShardContext], T_co]


def coordinator_batch(
    records: Sequence[Record], timestamp_ms: int, producer: TransactionalProducer | None = None
) -> bytes:
    """The one uncompressed batch that carries a write's records."""
    rows = [(key, value, (), timestamp_ms) for key, value in records]
    if producer is None:
        return build_batch(rows)
    return build_batch(
        rows,
        producer_id=producer.producer_id,
        producer_epoch=producer.producer_epoch,
        base_sequence=0,  # batch checks want a sequence with a producer id; coordinator appends skip it
        is_transactional=True,
    )
