"""What to upload for one rolled local segment, read from its `PartitionLog` (no uploads here).

The indexes and the transaction index come from the segment's in-memory entries (the same bytes as
its flushed files); the leader-epoch checkpoint is the log's epochs cut to the segment (the epoch in
force at its first offset, then those starting inside it), rendered in the checkpoint file's format;
the producer snapshot is the one taken when the log rolled past the segment (``<next offset>.snapshot``),
or, when the log has deleted it, regenerated (segment_snapshot.py). Kafka's ``RemoteLogManager``
assembles its ``LogSegmentData`` the same way.
"""

from __future__ import annotations

import uuid

from strom.storage import transaction_index as txn
from strom.storage.checkpoint import EpochEntry, render_leader_epochs
from strom.storage.log import PartitionLog
from strom.storage.segment import LogSegment
from strom.tiered.remote_storage import LogSegmentData
from strom.tiered.segment_metadata import RemoteLogSegmentMetadata, RemoteLogSegmentState
from strom.tiered.segment_snapshot import StartState, snapshot_at


def segment_epochs(entries: list[EpochEntry], start_offset: int, end_offset: int) -> list[EpochEntry]:
    """The leader epochs of ``[start_offset, end_offset]``: the one in force at the start (moved to
    it), then every one that begins inside."""
    inside = [e for e in entries if start_offset < e.start_offset <= end_offset]
    before = [e for e in entries if e.start_offset <= start_offset]
    head = [EpochEntry(before[-1].epoch, start_offset)] if before else []
    return head + inside


def log_segment_data(
    log: PartitionLog, segment: LogSegment, next_offset: int, previous: StartState | None = None
) -> LogSegmentData:
    """``previous``: the producer state at the segment's base offset, when known (segment_snapshot.py)."""
    epochs = segment_epochs(log.leader_epoch_cache.entries, segment.base_offset, next_offset - 1)
    aborted = segment.txn_index.entries
    return LogSegmentData(
        log_segment=segment.log_path,
        offset_index=segment.offset_index.encoded(),
        time_index=segment.time_index.encoded(),
        transaction_index=txn.encode(aborted) if aborted else None,
        producer_snapshot=snapshot_at(log, segment, next_offset, previous),
        leader_epoch_checkpoint=render_leader_epochs(epochs).encode(),
    )


def copy_started_metadata(
    log: PartitionLog,
    segment: LogSegment,
    next_offset: int,
    *,
    topic: str,
    topic_id: str,
    partition: int,
    broker_id: int,
    now_ms: int,
) -> RemoteLogSegmentMetadata:
    """The COPY_SEGMENT_STARTED metadata of a new copy attempt of ``segment``."""
    epochs = segment_epochs(log.leader_epoch_cache.entries, segment.base_offset, next_offset - 1)
    return RemoteLogSegmentMetadata(
        topic_id=topic_id,
        topic=topic,
        partition=partition,
        segment_id=uuid.uuid4().hex,
        start_offset=segment.base_offset,
        end_offset=next_offset - 1,
        max_timestamp_ms=segment.largest_timestamp(),
        broker_id=broker_id,
        event_timestamp_ms=now_ms,
        segment_leader_epochs=tuple((e.epoch, e.start_offset) for e in epochs),
        segment_size_in_bytes=segment.size,
        txn_index_size=len(segment.txn_index.entries) * txn.ENTRY_SIZE,
        state=RemoteLogSegmentState.COPY_SEGMENT_STARTED,
    )
