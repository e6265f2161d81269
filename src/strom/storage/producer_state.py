"""Idempotent-producer state of one partition (Kafka's ``ProducerStateManager``, no transactions).

Per producer id the broker keeps the current producer epoch and the metadata of the last
``NUM_BATCHES_TO_RETAIN`` (5) batches it appended: first/last sequence, first/last offset and max
timestamp. That is enough to answer a retried batch with its original offsets and to reject gaps.

Rules applied to each client batch with ``producer_id >= 0``, in Kafka's order
(PROTOCOL-NOTES §4, ``ProducerStateEntry.findDuplicateBatch`` and ``ProducerAppendInfo.checkSequence``):

1. duplicate: same epoch and (first_seq, last_seq) equal to a retained batch -> not appended, the
   original offsets are returned;
2. epoch below the current one -> INVALID_PRODUCER_EPOCH;
3. a higher epoch must start at sequence 0; the same epoch must continue at last_seq + 1 (INT32_MAX
   wraps to 0); otherwise OUT_OF_ORDER_SEQUENCE_NUMBER. A producer without state (new, expired, or
   truncated away) may start at any sequence.

The state is rebuilt from batch headers when a log is loaded or truncated (no snapshots yet), so it is
never written to disk by this module. Checks are pure: `ProducerAppendPlan` validates a whole request
against a scratch copy, and only `commit` changes the manager, after the log write succeeded.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import NamedTuple

from strom.protocol.errors import ErrorCode, KafkaError
from strom.protocol.records.batch import BatchHeader

NUM_BATCHES_TO_RETAIN = 5
NO_EPOCH = -1
INT32_MAX = (1 << 31) - 1


class BatchMetadata(NamedTuple):
    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int
    timestamp: int


@dataclass(slots=True)
class ProducerStateEntry:
    producer_id: int
    producer_epoch: int = NO_EPOCH
    batches: deque[BatchMetadata] = field(default_factory=lambda: deque(maxlen=NUM_BATCHES_TO_RETAIN))
    last_timestamp: int = -1

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else -1

    @property
    def last_offset(self) -> int:
        return self.batches[-1].last_offset if self.batches else -1

    def copy(self) -> ProducerStateEntry:
        return ProducerStateEntry(
            self.producer_id,
            self.producer_epoch,
            deque(self.batches, NUM_BATCHES_TO_RETAIN),
            self.last_timestamp,
        )

    def find_duplicate(self, header: BatchHeader) -> BatchMetadata | None:
        if header.producer_epoch != self.producer_epoch:
            return None
        for meta in self.batches:
            if meta.first_seq == header.base_sequence and meta.last_seq == header.last_sequence:
                return meta
        return None

    def add(self, header: BatchHeader, first_offset: int) -> None:
        if header.producer_epoch != self.producer_epoch:
            self.producer_epoch = header.producer_epoch
            self.batches.clear()
        last_offset = first_offset + header.last_offset_delta
        self.batches.append(
            BatchMetadata(
                header.base_sequence, header.last_sequence, first_offset, last_offset, header.max_timestamp
            )
        )
        self.last_timestamp = header.max_timestamp


def in_sequence(last_seq: int, next_seq: int) -> bool:
    return next_seq == last_seq + 1 or (last_seq == INT32_MAX and next_seq == 0)


def check_sequence(entry: ProducerStateEntry, header: BatchHeader) -> None:
    """Raise the Kafka error for an out-of-order or fenced batch; return if it may be appended."""
    if header.producer_epoch < entry.producer_epoch:
        raise KafkaError(
            ErrorCode.INVALID_PRODUCER_EPOCH,
            f"producer {entry.producer_id} epoch {header.producer_epoch} < {entry.producer_epoch}",
        )
    if entry.producer_epoch == NO_EPOCH:
        return  # unknown producer: accept any sequence
    if header.producer_epoch != entry.producer_epoch:
        if header.base_sequence != 0:
            raise KafkaError(
                ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
                f"producer {entry.producer_id} new epoch starts at sequence {header.base_sequence}",
            )
        return
    if entry.batches and not in_sequence(entry.last_seq, header.base_sequence):
        raise KafkaError(
            ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
            f"producer {entry.producer_id}: sequence {header.base_sequence} after {entry.last_seq}",
        )


class ProducerAppendPlan:
    """The producer-state outcome of one append request, computed before anything is written."""

    def __init__(self, manager: ProducerStateManager) -> None:
        self._manager = manager
        self._scratch: dict[int, ProducerStateEntry] = {}
        self.duplicate: BatchMetadata | None = None

    def _entry(self, producer_id: int) -> ProducerStateEntry:
        entry = self._scratch.get(producer_id)
        if entry is None:
            current = self._manager.producers.get(producer_id)
            entry = current.copy() if current else ProducerStateEntry(producer_id)
            self._scratch[producer_id] = entry
        return entry

    def check(self, header: BatchHeader, first_offset: int) -> bool:
        """Validate one batch (to be written at ``first_offset``); False if it duplicates a retained one.

        Raises:
            KafkaError: INVALID_PRODUCER_EPOCH or OUT_OF_ORDER_SEQUENCE_NUMBER.
        """
        entry = self._entry(header.producer_id)
        duplicate = entry.find_duplicate(header)
        if duplicate is not None:
            self.duplicate = duplicate
            return False
        check_sequence(entry, header)
        entry.add(header, first_offset)
        return True

    def commit(self) -> None:
        self._manager.producers.update(self._scratch)


class ProducerStateManager:
    """Producer id -> `ProducerStateEntry` for one partition."""

    def __init__(self) -> None:
        self.producers: dict[int, ProducerStateEntry] = {}

    def plan(self) -> ProducerAppendPlan:
        return ProducerAppendPlan(self)

    def load_batch(self, header: BatchHeader) -> None:
        """Replay a stored (or replicated) batch without checks, as on load or follower append."""
        if header.producer_id < 0:
            return
        entry = self.producers.get(header.producer_id)
        if entry is None:
            entry = self.producers[header.producer_id] = ProducerStateEntry(header.producer_id)
        entry.add(header, header.base_offset)

    def evict_before(self, log_start_offset: int) -> None:
        """Forget producers whose last batch was deleted (retention, DeleteRecords)."""
        gone = [pid for pid, e in self.producers.items() if e.last_offset < log_start_offset]
        for pid in gone:
            del self.producers[pid]

    def evict_expired(self, now_ms: int, expiration_ms: int) -> None:
        """Forget producers idle longer than ``producer.id.expiration.ms``."""
        gone = [pid for pid, e in self.producers.items() if now_ms - e.last_timestamp > expiration_ms]
        for pid in gone:
            del self.producers[pid]

    def clear(self) -> None:
        self.producers.clear()
