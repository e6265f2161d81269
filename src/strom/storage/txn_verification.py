"""KIP-890 part 1 on a partition's leader: which producers' transactions are verified on this partition.

The hanging transaction. A transaction's first batch on a partition opens it there, and only the
coordinator's marker closes it. A batch that reaches the leader after its transaction ended (a retry
delayed in the network, a producer that skipped AddPartitionsToTxn) opens a transaction no coordinator
knows of: the partition's last stable offset stops there, and read_committed consumers with it, until
an operator aborts it. With ``transaction.partition.verification.enable`` (Kafka's default, true) the
leader asks the transaction coordinator (AddPartitionsToTxn v4+ with ``verify_only``) whether the
producer's ongoing transaction holds the partition before it appends a batch that would open one.

What this module keeps (Kafka's ``VerificationStateEntry``): per producer id, the epoch being or having
been verified, a guard object, and whether the coordinator said yes. The produce path

1. skips verification for a batch of a transaction already open on this partition at that epoch (its
   first batch was verified when it opened it) and for a producer already verified at that epoch: so a
   transaction costs one coordinator round trip per partition, not one per batch;
2. otherwise takes a guard (`begin`: one per producer and epoch, shared by concurrent requests), asks the
   coordinator, and records the answer (`confirm` or `fail`, ignored if the guard was replaced);
3. appends only if the producer is still verified at that epoch (`verified`).

A marker for the producer on this partition ends its transaction there and forgets the entry (`end`,
called by the producer state as the marker completes the transaction, appended as leader or replicated
as follower): a batch whose verification was in flight while the transaction ended is refused, and the
producer's next transaction is verified afresh. A reload of the producer state (truncation, recovery)
forgets everything (`clear`).

Pure: each partition's `ProducerStateManager` owns one `VerificationState`, as Kafka's does; the
replica manager hands it to the produce path; the asking is the transaction coordinator's host's
(`strom.broker.coordinators.txn_verification`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

__all__ = ["VerificationState", "in_open_transaction"]


class ProducerView(Protocol):
    """What verification reads of a producer's state on the partition (producer_state.py's entry)."""

    current_txn_first_offset: int
    producer_epoch: int


def in_open_transaction(entry: ProducerView | None, producer_epoch: int) -> bool:
    """Whether the producer's transaction at this epoch is already open on the partition."""
    return (
        entry is not None and entry.current_txn_first_offset >= 0 and entry.producer_epoch == producer_epoch
    )


@dataclass(slots=True)
class _Entry:
    epoch: int
    guard: object
    confirmed: bool = False


class VerificationState:
    __slots__ = ("_entries",)

    def __init__(self) -> None:
        self._entries: dict[int, _Entry] = {}

    def __len__(self) -> int:
        return len(self._entries)

    def verified(self, producer_id: int, producer_epoch: int) -> bool:
        entry = self._entries.get(producer_id)
        return entry is not None and entry.confirmed and entry.epoch == producer_epoch

    def begin(self, producer_id: int, producer_epoch: int) -> object:
        """The guard of a verification of this producer at this epoch (an entry of another epoch is
        replaced: its verification no longer counts)."""
        entry = self._entries.get(producer_id)
        if entry is None or entry.epoch != producer_epoch:
            entry = self._entries[producer_id] = _Entry(producer_epoch, object())
        return entry.guard

    def confirm(self, producer_id: int, guard: object) -> None:
        entry = self._entries.get(producer_id)
        if entry is not None and entry.guard is guard:
            entry.confirmed = True

    def fail(self, producer_id: int, guard: object) -> None:
        entry = self._entries.get(producer_id)
        if entry is not None and entry.guard is guard and not entry.confirmed:
            del self._entries[producer_id]

    def end(self, producer_id: int) -> None:
        """A marker for the producer: its transaction on this partition is over."""
        self._entries.pop(producer_id, None)

    def clear(self) -> None:
        self._entries.clear()
