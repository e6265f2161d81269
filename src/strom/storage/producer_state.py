"""Idempotent and transactional producer state of one partition (Kafka's ``ProducerStateManager``).

Per producer id the broker keeps the current producer epoch and the metadata of the last
``NUM_BATCHES_TO_RETAIN`` (5) batches it appended: first/last sequence, first/last offset and max
timestamp. That is enough to answer a retried batch with its original offsets and to reject gaps.

Rules applied to each client batch with ``producer_id >= 0``, in Kafka's order
(docs/protocol.md#idempotent-producers, ``ProducerStateEntry.findDuplicateBatch`` and
``ProducerAppendInfo.checkSequence``):

1. duplicate: same epoch and (first_seq, last_seq) equal to a retained batch -> not appended, the
   original offsets are returned;
2. epoch below the current one -> INVALID_PRODUCER_EPOCH;
3. a higher epoch must start at sequence 0; the same epoch must continue at last_seq + 1 (INT32_MAX
   wraps to 0); otherwise OUT_OF_ORDER_SEQUENCE_NUMBER. A producer without state (new, expired, or
   truncated away) may start at any sequence.

Checks are pure: `ProducerAppendPlan` validates a whole request against a scratch copy, and only
`commit` changes the manager, after the log write succeeded.

Persistence (Kafka's scheme). The log asks for a snapshot (`take_snapshot`, file format in
producer_snapshot.py) when it rolls a segment and when it closes cleanly; the two newest snapshots
are kept, and those below the log start offset are deleted. Opening or truncating a log clears the
state, loads the newest valid snapshot at or below the offset the log trusts (`load_latest_snapshot`)
and replays only the batch headers after it (`load_batch`); with no usable snapshot every header is
replayed. Snapshots above a truncation point are deleted first, since the log may then diverge there.

Transactions (KIP-98). A producer's first transactional batch after none was open starts a
transaction: its offset becomes the producer's ``current_txn_first_offset`` and enters `ongoing`
(first offset -> producer id). A transaction marker (a control batch, records/control.py) ends it:

4. a marker whose epoch is below the producer's -> INVALID_PRODUCER_EPOCH; one whose coordinator
   epoch is below the last marker's -> TRANSACTION_COORDINATOR_FENCED. A marker raises the producer's
   epoch to its own (that is how a coordinator's abort fences a zombie);
5. a non-transactional batch while the producer's transaction is open -> INVALID_TXN_STATE.

A completed transaction moves from `ongoing` to `unreplicated` until the high watermark passes its
marker (`on_high_watermark`). The first unstable offset is the smallest first offset in either; the
log's last stable offset is the high watermark capped by it. An ABORT yields an `AbortedTxn` for the
segment's transaction index, whose last stable offset is the first offset of the earliest transaction
of another producer still open, else the marker's offset + 1. A marker without an open transaction
(a retried or empty one) completes an empty transaction at the marker's offset, as in Kafka. The
coordinator epoch and the open transaction's first offset are snapshotted with each producer.

Expiration (``producer.id.expiration.ms``, a broker setting, Kafka's default one day): a producer
whose last batch's max timestamp is that old and that has no open transaction is forgotten
(`remove_expired_producers`, run by the log manager every
``producer.id.expiration.check.interval.ms``, and on snapshot load). A forgotten producer may start
again at any sequence, as a new one.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import NamedTuple

from strom.protocol.errors import ErrorCode, KafkaError
from strom.protocol.records.batch import BatchHeader
from strom.protocol.records.control import EndTxnMarker
from strom.storage import producer_snapshot
from strom.storage.producer_snapshot import CorruptSnapshotError, SnapshotEntry
from strom.storage.transaction_index import AbortedTxn
from strom.storage.txn_verification import VerificationState

NUM_BATCHES_TO_RETAIN = 5
NUM_SNAPSHOTS_TO_RETAIN = 2
NO_EPOCH = -1
INT32_MAX = (1 << 31) - 1
INT64_MAX = (1 << 63) - 1
DEFAULT_PRODUCER_ID_EXPIRATION_MS = 86_400_000
log = logging.getLogger(__name__)


NO_OFFSET = -1


class CompletedTxn(NamedTuple):
    """A transaction ended by the marker at ``last_offset``."""

    producer_id: int
    first_offset: int
    last_offset: int
    is_aborted: bool


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
    coordinator_epoch: int = -1
    current_txn_first_offset: int = NO_OFFSET

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
            self.coordinator_epoch,
            self.current_txn_first_offset,
        )

    def find_duplicate(self, header: BatchHeader) -> BatchMetadata | None:
        if header.producer_epoch != self.producer_epoch:
            return None
        for meta in self.batches:
            if meta.first_seq == header.base_sequence and meta.last_seq == header.last_sequence:
                return meta
        return None

    def set_epoch(self, epoch: int) -> None:
        if epoch != self.producer_epoch:
            self.producer_epoch = epoch
            self.batches.clear()

    def add(self, header: BatchHeader, first_offset: int) -> bool:
        """Record a data batch written at ``first_offset``; True if it starts a transaction."""
        self.set_epoch(header.producer_epoch)
        starts = header.is_transactional and self.current_txn_first_offset < 0
        if starts:
            self.current_txn_first_offset = first_offset
        last_offset = first_offset + header.last_offset_delta
        self.batches.append(
            BatchMetadata(
                header.base_sequence, header.last_sequence, first_offset, last_offset, header.max_timestamp
            )
        )
        self.last_timestamp = header.max_timestamp
        return starts

    def end_txn(self, header: BatchHeader, marker: EndTxnMarker, offset: int) -> CompletedTxn:
        """Record the marker at ``offset``: the open transaction (or an empty one there) completes."""
        self.set_epoch(header.producer_epoch)
        first = self.current_txn_first_offset if self.current_txn_first_offset >= 0 else offset
        self.current_txn_first_offset = NO_OFFSET
        self.coordinator_epoch = marker.coordinator_epoch
        self.last_timestamp = header.max_timestamp
        return CompletedTxn(self.producer_id, first, offset, not marker.is_commit)


def in_sequence(last_seq: int, next_seq: int) -> bool:
    return next_seq == last_seq + 1 or (last_seq == INT32_MAX and next_seq == 0)


def check_marker(entry: ProducerStateEntry, header: BatchHeader, marker: EndTxnMarker) -> None:
    """Raise the Kafka error for a fenced transaction marker."""
    if header.producer_epoch < entry.producer_epoch:
        raise KafkaError(
            ErrorCode.INVALID_PRODUCER_EPOCH,
            f"marker for producer {entry.producer_id} epoch {header.producer_epoch} < {entry.producer_epoch}",
        )
    if marker.coordinator_epoch < entry.coordinator_epoch:
        raise KafkaError(
            ErrorCode.TRANSACTION_COORDINATOR_FENCED,
            f"marker for producer {entry.producer_id} from coordinator epoch {marker.coordinator_epoch} "
            f"< {entry.coordinator_epoch}",
        )


def check_sequence(entry: ProducerStateEntry, header: BatchHeader) -> None:
    """Raise the Kafka error for an out-of-order or fenced batch; return if it may be appended."""
    if header.producer_epoch < entry.producer_epoch:
        raise KafkaError(
            ErrorCode.INVALID_PRODUCER_EPOCH,
            f"producer {entry.producer_id} epoch {header.producer_epoch} < {entry.producer_epoch}",
        )
    if not header.is_transactional and entry.current_txn_first_offset >= 0:
        raise KafkaError(
            ErrorCode.INVALID_TXN_STATE,
            f"producer {entry.producer_id} sent a non-transactional batch inside its transaction",
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
        self._started: list[tuple[int, int]] = []  # (first offset, producer id)
        self._completed: list[CompletedTxn] = []

    def _entry(self, producer_id: int) -> ProducerStateEntry:
        entry = self._scratch.get(producer_id)
        if entry is None:
            current = self._manager.producers.get(producer_id)
            entry = current.copy() if current else ProducerStateEntry(producer_id)
            self._scratch[producer_id] = entry
        return entry

    def check(self, header: BatchHeader, first_offset: int, from_coordinator: bool = False) -> bool:
        """Validate one batch (to be written at ``first_offset``); False if it duplicates a retained one.
        A coordinator's batch (transactional offsets) has no sequence: only its epoch is checked.

        Raises:
            KafkaError: INVALID_PRODUCER_EPOCH or OUT_OF_ORDER_SEQUENCE_NUMBER.
        """
        entry = self._entry(header.producer_id)
        if from_coordinator:
            if header.producer_epoch < entry.producer_epoch:
                raise KafkaError(
                    ErrorCode.INVALID_PRODUCER_EPOCH,
                    f"producer {entry.producer_id} epoch {header.producer_epoch} < {entry.producer_epoch}",
                )
        else:
            duplicate = entry.find_duplicate(header)
            if duplicate is not None:
                self.duplicate = duplicate
                return False
            check_sequence(entry, header)
        if entry.add(header, first_offset):
            self._started.append((first_offset, header.producer_id))
        return True

    def check_marker(self, header: BatchHeader, marker: EndTxnMarker, offset: int) -> None:
        """Validate a transaction marker to be written at ``offset``.

        Raises:
            KafkaError: INVALID_PRODUCER_EPOCH or TRANSACTION_COORDINATOR_FENCED.
        """
        entry = self._entry(header.producer_id)
        check_marker(entry, header, marker)
        self._completed.append(entry.end_txn(header, marker, offset))

    def commit(self) -> list[AbortedTxn]:
        """Apply the plan; returns the transaction-index entries of the transactions it aborted."""
        manager = self._manager
        manager.producers.update(self._scratch)
        for first_offset, producer_id in self._started:
            manager.ongoing[first_offset] = producer_id
        return [e for e in map(manager.complete_txn, self._completed) if e is not None]


def to_snapshot_entry(entry: ProducerStateEntry) -> SnapshotEntry:
    """The snapshot row of ``entry``: epoch, last batch and transaction state (Kafka snapshots no more)."""
    txn = (entry.coordinator_epoch, entry.current_txn_first_offset)
    if not entry.batches:
        return SnapshotEntry(entry.producer_id, entry.producer_epoch, -1, -1, 0, entry.last_timestamp, *txn)
    last = entry.batches[-1]
    return SnapshotEntry(
        entry.producer_id,
        entry.producer_epoch,
        last.last_seq,
        last.last_offset,
        last.last_offset - last.first_offset,
        entry.last_timestamp,
        *txn,
    )


def from_snapshot_entry(row: SnapshotEntry) -> ProducerStateEntry:
    entry = ProducerStateEntry(
        row.producer_id,
        row.producer_epoch,
        last_timestamp=row.timestamp,
        coordinator_epoch=row.coordinator_epoch,
        current_txn_first_offset=row.current_txn_first_offset,
    )
    if row.last_offset >= 0:
        first_seq = (row.last_sequence - row.offset_delta) % (1 << 31) if row.last_sequence >= 0 else -1
        entry.batches.append(
            BatchMetadata(
                first_seq,
                row.last_sequence,
                row.last_offset - row.offset_delta,
                row.last_offset,
                row.timestamp,
            )
        )
    return entry


class ProducerStateManager:
    """Producer id -> `ProducerStateEntry` for one partition, and its snapshot files in ``directory``."""

    def __init__(self, directory: str, expiration_ms: int = DEFAULT_PRODUCER_ID_EXPIRATION_MS) -> None:
        self.directory = directory
        self.expiration_ms = expiration_ms
        self.producers: dict[int, ProducerStateEntry] = {}
        self.last_snapshot_offset = -1
        self.ongoing: dict[int, int] = {}  # first offset -> producer id of each open transaction
        self.unreplicated: dict[int, int] = {}  # first offset -> marker offset, marker not below the HW
        self.verification = VerificationState()  # KIP-890 part 1: producers verified with the coordinator
        self.on_write_error: Callable[[OSError], None] | None = None  # a snapshot's write failed

    def plan(self) -> ProducerAppendPlan:
        return ProducerAppendPlan(self)

    def load_batch(self, header: BatchHeader, marker: EndTxnMarker | None = None) -> AbortedTxn | None:
        """Replay a stored (or replicated) batch without checks, as on load or follower append.

        ``marker``: what a control batch says (None for a data batch, or another control type).
        Returns the transaction-index entry when the batch is an ABORT marker.
        """
        if header.producer_id < 0:
            return None
        entry = self.producers.get(header.producer_id)
        if entry is None:
            entry = self.producers[header.producer_id] = ProducerStateEntry(header.producer_id)
        if header.is_control:
            if marker is None:  # an empty control batch: only the producer's epoch survives
                if header.producer_epoch > entry.producer_epoch:
                    entry.set_epoch(header.producer_epoch)
                return None
            return self.complete_txn(entry.end_txn(header, marker, header.base_offset))
        if entry.add(header, header.base_offset):
            self.ongoing[header.base_offset] = header.producer_id
        return None

    def complete_txn(self, txn: CompletedTxn) -> AbortedTxn | None:
        """Move ``txn`` from open to unreplicated; its index entry if it was aborted."""
        entry = None
        if txn.is_aborted:
            others = [first for first, pid in self.ongoing.items() if pid != txn.producer_id]
            entry = AbortedTxn(
                txn.producer_id, txn.first_offset, txn.last_offset, min(others, default=txn.last_offset + 1)
            )
        self.ongoing.pop(txn.first_offset, None)
        self.unreplicated[txn.first_offset] = txn.last_offset
        self.verification.end(txn.producer_id)
        return entry

    def forget_transaction(self, first_offset: int) -> None:
        """Drop the open transaction starting at ``first_offset`` (known to have ended; see
        producer_replay.py)."""
        producer_id = self.ongoing.pop(first_offset, None)
        entry = self.producers.get(producer_id) if producer_id is not None else None
        if entry is not None and entry.current_txn_first_offset == first_offset:
            entry.current_txn_first_offset = NO_OFFSET

    def on_high_watermark(self, high_watermark: int) -> None:
        """Forget completed transactions whose marker is below the high watermark."""
        if self.unreplicated:
            done = [first for first, last in self.unreplicated.items() if last < high_watermark]
            for first in done:
                del self.unreplicated[first]

    def first_unstable_offset(self) -> int | None:
        """The first offset of the earliest transaction that is open or whose marker is not replicated."""
        if not self.ongoing and not self.unreplicated:
            return None
        return min(min(self.ongoing, default=INT64_MAX), min(self.unreplicated, default=INT64_MAX))

    def evict_before(self, log_start_offset: int) -> None:
        """Forget producers whose last batch was deleted (retention), unless in a transaction.

        A producer known only by its epoch (its last batch is a marker that fenced it, which the
        cleaner keeps for that reason) stays until it expires.
        """
        gone = [
            pid
            for pid, e in self.producers.items()
            if e.batches and e.last_offset < log_start_offset and e.current_txn_first_offset < 0
        ]
        for pid in gone:
            del self.producers[pid]
        for first in [f for f in self.unreplicated if f < log_start_offset]:
            del self.unreplicated[first]

    def is_expired(self, entry: ProducerStateEntry, now_ms: int) -> bool:
        return entry.current_txn_first_offset < 0 and now_ms - entry.last_timestamp >= self.expiration_ms

    def remove_expired_producers(self, now_ms: int) -> int:
        """Forget producers idle for ``producer.id.expiration.ms``; returns how many."""
        gone = [pid for pid, e in self.producers.items() if self.is_expired(e, now_ms)]
        for pid in gone:
            del self.producers[pid]
        return len(gone)

    def clear(self) -> None:
        self.producers.clear()
        self.ongoing.clear()
        self.unreplicated.clear()
        self.verification.clear()

    # -- snapshots --------------------------------------------------------------------------------
    def take_snapshot(self, offset: int, durable: bool = True) -> bool:
        """Write the state as ``<offset>.snapshot`` (the state after every batch below ``offset``).

        Skipped when a snapshot at or above ``offset`` was already taken; keeps the newest
        `NUM_SNAPSHOTS_TO_RETAIN`. Returns whether a file was written. A failed write (a full disk)
        is logged and leaves nothing behind: a snapshot only saves work at the next open.
        ``durable``: see `producer_snapshot.write`.
        """
        if offset <= self.last_snapshot_offset:
            return False
        try:
            entries = map(to_snapshot_entry, self.producers.values())
            producer_snapshot.write(self.directory, offset, entries, durable)
        except OSError as e:
            log.warning("%s: producer snapshot at %d not written: %s", self.directory, offset, e)
            if self.on_write_error is not None:  # the log's failure report (KIP-112)
                self.on_write_error(e)
            return False
        self.last_snapshot_offset = offset
        for old in producer_snapshot.list_offsets(self.directory)[:-NUM_SNAPSHOTS_TO_RETAIN]:
            producer_snapshot.delete(self.directory, old)
        return True

    def load_latest_snapshot(self, max_offset: int, now_ms: int) -> int | None:
        """Replace the state with the newest valid snapshot at or below ``max_offset``; returns its offset.

        Corrupt snapshots are deleted on the way; None (and an empty state) when none is usable.
        Producers already expired at ``now_ms`` are not loaded.
        """
        self.clear()
        for offset in reversed(producer_snapshot.list_offsets(self.directory)):
            if offset > max_offset:
                continue
            try:
                rows = producer_snapshot.read(self.directory, offset)
            except CorruptSnapshotError as exc:
                log.warning("%s: deleting corrupt producer snapshot %d: %s", self.directory, offset, exc)
                producer_snapshot.delete(self.directory, offset)
                continue
            self.restore(rows)
            self.remove_expired_producers(now_ms)
            self.last_snapshot_offset = offset
            return offset
        return None

    def reload(
        self, max_snapshot_offset: int, log_start_offset: int, log_end_offset: int, now_ms: int
    ) -> int | None:
        """Drop snapshots outside the log, then load the newest valid one at or below ``max_snapshot_offset``.

        Returns its offset, or None (and an empty state) when there is none to use.
        """
        self.delete_snapshots_outside(log_start_offset, log_end_offset)
        return self.load_latest_snapshot(max_snapshot_offset, now_ms)

    def restore(self, rows: Iterable[SnapshotEntry]) -> None:
        """Add a snapshot's producers (and their open transactions) to the state."""
        for entry in map(from_snapshot_entry, rows):
            self.producers[entry.producer_id] = entry
            if entry.current_txn_first_offset >= 0:
                self.ongoing[entry.current_txn_first_offset] = entry.producer_id

    def delete_snapshots_outside(self, log_start_offset: int, log_end_offset: int) -> None:
        """Delete snapshots below the log start offset or above the log end offset (truncated away)."""
        kept = []
        for offset in producer_snapshot.list_offsets(self.directory):
            if offset < log_start_offset or offset > log_end_offset:
                producer_snapshot.delete(self.directory, offset)
            else:
                kept.append(offset)
        if self.last_snapshot_offset > log_end_offset:
            self.last_snapshot_offset = max(kept, default=-1)

    def delete_all_snapshots(self) -> None:
        for offset in producer_snapshot.list_offsets(self.directory):
            producer_snapshot.delete(self.directory, offset)
        self.last_snapshot_offset = -1
