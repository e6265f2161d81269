"""Rebuilding a log's producer state (and its aborted-transaction index) from a snapshot and headers.

Opening or truncating a log loads the newest usable producer-state snapshot and replays the batch
headers after it. Only snapshots at or below the recovery point are trusted (the data they describe is
fsynced or was re-validated by recovery); snapshots beyond the log end (a truncated tail) are deleted.
Every transaction-index entry from the replay's start on is dropped and written again by the replay, so
an ABORT marker's entry exists exactly once; an index that fails its sanity check makes the replay
start at the log start offset. A transaction the snapshot saw open whose first batch the cleaner has
since removed is known to have ended and is forgotten. A control batch is the one kind whose (single)
record is read: the marker says whether the transaction committed or aborted (an empty one, as Kafka's
cleaner leaves them, says nothing but its epoch). With ``rebuild_epochs`` (no leader-epoch
checkpoint) every header is replayed and the leader-epoch cache is rebuilt from the batches' partition
leader epochs.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from strom.protocol.records.batch import BatchHeader
from strom.protocol.records.control import read_marker
from strom.storage.checkpoint import LeaderEpochFileCache
from strom.storage.loader import replay_headers
from strom.storage.log_read import segment_index
from strom.storage.producer_state import ProducerStateManager
from strom.storage.segment import LogSegment
from strom.storage.transaction_index import AbortedTxn

log = logging.getLogger(__name__)

Buffer = bytes | bytearray | memoryview


def load_batch(
    segments: Sequence[LogSegment], state: ProducerStateManager, header: BatchHeader, batch: Buffer | None
) -> None:
    """Replay one stored batch into the producer state; an ABORT marker's entry goes to its segment.

    ``batch`` (the whole batch) is read only for a control batch, to learn what its marker says.
    """
    entry = replay_batch(state, header, batch)
    if entry is not None:
        segments[segment_index(segments, entry.last_offset)].txn_index.append(entry)


def replay_batch(state: ProducerStateManager, header: BatchHeader, batch: Buffer | None) -> AbortedTxn | None:
    """Replay one stored batch into ``state``; returns the transaction-index entry of an ABORT marker."""
    # An empty control batch (Kafka's cleaner keeps a producer's last marker so) says nothing more.
    has_record = header.is_control and header.records_count > 0
    marker = read_marker(batch, header) if has_record and batch is not None else None
    return state.load_batch(header, marker)


def rebuild_producer_state(
    directory: str,
    segments: Sequence[LogSegment],
    state: ProducerStateManager,
    epochs: LeaderEpochFileCache,
    *,
    recovery_point: int,
    log_start_offset: int,
    high_watermark: int,
    now_ms: int,
    rebuild_epochs: bool,
) -> int:
    """Newest usable snapshot, then the batch headers after it; returns how many headers were replayed."""
    leo = segments[-1].next_offset
    rebuild_all = rebuild_epochs or any(s.txn_index.needs_rebuild for s in segments)
    trusted = -1 if rebuild_all else min(recovery_point, leo)
    snapshot = state.reload(trusted, log_start_offset, leo, now_ms)
    start = log_start_offset if snapshot is None else max(snapshot, log_start_offset)
    for segment in segments:  # the replay below writes these entries again
        segment.txn_index.truncate_to(start)
        segment.txn_index.needs_rebuild = False

    def visit(segment: LogSegment, position: int, header: BatchHeader) -> None:
        load_batch(
            segments, state, header, segment.read_bytes(position, header.size) if header.is_control else None
        )
        if rebuild_epochs:
            epochs.assign(header.partition_leader_epoch, header.base_offset)

    replayed = replay_headers(segments, start, visit) if start < leo else 0
    _forget_cleaned_transactions(directory, segments, state, start, log_start_offset)
    if rebuild_epochs and epochs.entries:
        epochs.write()
    state.evict_before(log_start_offset)
    state.on_high_watermark(high_watermark)
    if leo > log_start_offset:
        what = "no snapshot" if snapshot is None else f"snapshot {snapshot}"
        log.info("%s: producer state from %s and %d batch headers", directory, what, replayed)
    return replayed


def _forget_cleaned_transactions(
    directory: str,
    segments: Sequence[LogSegment],
    state: ProducerStateManager,
    replay_start: int,
    log_start_offset: int,
) -> None:
    """Forget a transaction the snapshot saw open, still open after the replay, whose first batch is no
    longer in the log: it had ended, since the cleaner removes a transaction's data only below the
    last stable offset and its marker only once that data is gone (transaction_cleaning.py). A stale
    snapshot (an unclean stop with an old recovery point) would otherwise pin the last stable offset
    for ever. Transactions starting below the log start offset (retention) are left alone."""
    for first_offset, producer_id in list(state.ongoing.items()):
        if not log_start_offset <= first_offset < replay_start:
            continue
        found = segments[segment_index(segments, first_offset)].find_batch(first_offset)
        if found is None or (found[1].base_offset, found[1].producer_id) != (first_offset, producer_id):
            log.warning(
                "%s: transaction of producer %d from offset %d is gone from the log: it had ended",
                directory,
                producer_id,
                first_offset,
            )
            state.forget_transaction(first_offset)
