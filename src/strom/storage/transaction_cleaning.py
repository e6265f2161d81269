"""Pure decisions of the log cleaner about transactions: aborted data and transaction markers.

Kafka's ``CleanedTransactionMetadata`` and the cleaner's batch-retention rules (``LogCleaner``), applied
to the batches of a clean in offset order. No I/O; cleaner.py feeds it and applies its answers.

Inputs: the aborted transactions of the log (the ``.txnindex`` entries, `AbortedTxn`), and the batches
of the section being cleaned, in order. The cleaner only cleans below the last stable offset, so every
transactional data batch it meets belongs to a transaction that has ended: an aborted one if an
aborted-transaction entry of its producer covers its offset, else a committed one.

* `CleanedTransactions.on_data_batch` (per data batch): entries whose first offset is at or below the
  batch's last offset become *ongoing aborted* for their producer. A transactional batch of such a
  producer is aborted data: the cleaner removes all its records (its producer's last batch stays as an
  empty header, like any emptied batch). Any other transactional batch marks its producer's transaction
  as one whose committed data was seen.
* `CleanedTransactions.on_marker` (per control batch): an ABORT ends the producer's ongoing aborted
  transaction; if data of it was seen in this clean, the marker stays and its entry goes into the
  cleaned segment's ``.txnindex`` (read_committed consumers still need it), otherwise the marker is
  *discardable* and its entry is dropped (nothing is left for it to hide). A COMMIT is discardable when
  no data of its transaction was seen. An empty control batch (as Kafka's cleaner leaves them) is
  discardable too.
* `clean_control_batch`: a marker that is not discardable is kept byte for byte. A discardable one is
  stamped with a delete horizon (now + ``delete.retention.ms``, attributes bit 6, as tombstones are) the
  first time, and its record is removed in the first clean after that horizon: a consumer that read
  the transaction's data before it was cleaned has ``delete.retention.ms`` to read the marker too.
  A marker that is its producer's last batch (no data batch of the producer's current epoch is left,
  and the marker carries that epoch) stays, so that the producer's epoch survives a reload of the
  producer state (Kafka keeps it for fencing; `is_producer_last_batch`). Kafka empties it; Strom keeps
  its one record, because kafka-python's read_committed consumer fails on an empty control batch
  (its fetcher reads the first record of every control batch), and a replayed marker of an epoch with
  no transaction open completes an empty one, which changes nothing else.

The cleaner walks the log twice: from the first dirty offset to build the offset map (which must skip
aborted records, so an aborted record never supersedes a committed one), and from the first segment
to recopy. Each walk has its own `CleanedTransactions`, given the entries whose markers it will meet.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import NamedTuple

from strom.protocol.records.batch import BatchHeader
from strom.protocol.records.builder import decode_batch
from strom.protocol.records.control import EndTxnMarker
from strom.storage.compaction import CleanedBatch, rebuild_batch
from strom.storage.offset_map import MAX_UNCOMPRESSED_BYTES
from strom.storage.transaction_index import AbortedTxn


class ProducerLast(NamedTuple):
    """What the cleaner needs of one producer's state to keep its last batch."""

    last_data_offset: int  # last offset of its last data batch of the current epoch, -1 if none
    producer_epoch: int


def is_producer_last_batch(header: BatchHeader, producers: Mapping[int, ProducerLast]) -> bool:
    """Whether ``header``'s batch holds its producer's state: its last data batch, or, if the producer
    has no data batch at its current epoch, a marker of that epoch (Kafka's RETAIN_EMPTY cases)."""
    last = producers.get(header.producer_id) if header.producer_id >= 0 else None
    if last is None:
        return False
    if last.last_data_offset >= 0:
        return not header.is_control and header.last_offset == last.last_data_offset
    return header.is_control and header.producer_epoch == last.producer_epoch


class _OngoingAbort:
    __slots__ = ("data_seen", "entry")

    def __init__(self, entry: AbortedTxn) -> None:
        self.entry = entry
        self.data_seen = False


class MarkerOutcome(NamedTuple):
    discardable: bool  # the marker may go once its delete horizon has passed
    index_entry: AbortedTxn | None  # the `.txnindex` entry the cleaned segment keeps for it


class CleanedTransactions:
    """Transaction state while a clean walks the log in offset order; see the module docstring."""

    def __init__(self, aborted: Iterable[AbortedTxn], start_offset: int) -> None:
        """``aborted``: entries of the log; those whose marker lies below ``start_offset`` (where the
        walk starts) are left out, since their markers will not be met."""
        pending = [e for e in aborted if e.last_offset >= start_offset]
        self._pending = sorted(pending, key=lambda e: (e.first_offset, e.last_offset), reverse=True)
        self._aborting: dict[int, _OngoingAbort] = {}
        self._committing: set[int] = set()

    def _start_aborted_up_to(self, offset: int) -> None:
        while self._pending and self._pending[-1].first_offset <= offset:
            entry = self._pending.pop()
            self._aborting[entry.producer_id] = _OngoingAbort(entry)

    def on_data_batch(self, header: BatchHeader) -> bool:
        """Note a data batch; True if it belongs to an aborted transaction (all its records go)."""
        self._start_aborted_up_to(header.last_offset)
        if not header.is_transactional:
            return False
        ongoing = self._aborting.get(header.producer_id)
        if ongoing is not None:
            ongoing.data_seen = True
            return True
        self._committing.add(header.producer_id)
        return False

    def on_marker(self, header: BatchHeader, marker: EndTxnMarker | None) -> MarkerOutcome:
        """Note a control batch (``marker``: what it says, None if it holds no marker record)."""
        self._start_aborted_up_to(header.last_offset)
        if header.records_count == 0:
            return MarkerOutcome(True, None)  # an empty control batch: nothing left to end
        if marker is None:
            return MarkerOutcome(False, None)  # another control type: Strom never writes one; keep it
        if marker.is_commit:
            seen = header.producer_id in self._committing
            self._committing.discard(header.producer_id)
            return MarkerOutcome(not seen, None)
        ongoing = self._aborting.pop(header.producer_id, None)
        if ongoing is not None and ongoing.data_seen:
            return MarkerOutcome(False, ongoing.entry)
        return MarkerOutcome(True, None)


def clean_control_batch(
    batch: bytes,
    header: BatchHeader,
    *,
    discardable: bool,
    now_ms: int,
    delete_retention_ms: int,
    producer_last_batch: bool,
) -> CleanedBatch:
    """What becomes of one control batch (see the module docstring)."""
    if header.records_count == 0:
        return CleanedBatch(batch if producer_last_batch else None, None, 0)
    if not discardable:
        return CleanedBatch(batch, None, 0)
    horizon = header.delete_horizon_ms
    if horizon is None:
        horizon = now_ms + delete_retention_ms
        records = decode_batch(batch, max_uncompressed_size=MAX_UNCOMPRESSED_BYTES).records
        return CleanedBatch(rebuild_batch(batch, header, records, horizon), horizon, 0)
    if now_ms < horizon:
        return CleanedBatch(batch, horizon, 0)
    if producer_last_batch:
        return CleanedBatch(batch, None, 0)  # whole: kafka-python cannot read an empty control batch
    return CleanedBatch(None, None, 1)
