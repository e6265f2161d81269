"""The producer snapshot a remote segment is uploaded with: the producer state as of its end.

A follower that rebuilds from remote storage (OFFSET_MOVED_TO_TIERED_STORAGE) takes its idempotent
producers' state from the producer snapshot of the remote segment ending at the leader's local log
start; without it the follower knows no producer, and once it leads, a producer's retry of a batch in
the remote range is appended a second time instead of being answered with its original offsets.

The log writes ``<next offset>.snapshot`` when it rolls past a segment but keeps only its newest two
(producer_state.py), so a segment copied long after its roll (tiering turned on for an existing topic,
the object store down for a while, a slow copier) finds its snapshot gone. Kafka then regenerates it
(KAFKA-15195); so does `snapshot_at`, from the newest state it can start from at or below the segment's
base offset:

- the segment's own snapshot file when it is still there (read as it is, no replay);
- else the newest local snapshot file inside the local log below the segment's end;
- else the snapshot uploaded with the remote segment just before this one (segments are copied in
  order, so each upload starts the next one's chain; the remote log manager keeps the last one it
  uploaded and fetches it from the store otherwise);
- else, when nothing precedes the segment (the log's first segment, nothing remote), the empty state.

From that start the batch headers up to the segment's end are replayed (no record is decoded; only a
control batch's one record, its marker) into a scratch producer state, which is rendered in the
snapshot format. With no start at all the segment is uploaded without a snapshot, as before.
`snapshot_at` reads local files only, but a replay reads the whole segment file (headers are walked,
the data read past): the remote log manager calls it in a worker thread; `producer_state_before` may
await the store for the previous segment's snapshot.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from strom.objectstore.store import ObjectNotFoundError
from strom.protocol.records.batch import BatchHeader
from strom.storage import producer_snapshot
from strom.storage.loader import replay_headers
from strom.storage.log import PartitionLog
from strom.storage.producer_replay import replay_batch
from strom.storage.producer_snapshot import CorruptSnapshotError, SnapshotEntry
from strom.storage.producer_state import ProducerStateManager, to_snapshot_entry
from strom.storage.segment import LogSegment
from strom.tiered.metadata_cache import RemotePartitionMetadata
from strom.tiered.remote_storage import IndexType, RemoteStorageManager


class StartState(NamedTuple):
    """The producer state after every batch below ``offset``."""

    offset: int
    rows: list[SnapshotEntry]

    @classmethod
    def of(cls, offset: int, snapshot: bytes | None) -> StartState | None:
        return None if snapshot is None else cls(offset, producer_snapshot.decode(snapshot))


async def producer_state_before(
    rsm: RemoteStorageManager,
    log: PartitionLog,
    remote: RemotePartitionMetadata,
    last_upload: StartState | None,
    base_offset: int,
    next_offset: int,
) -> StartState | None:
    """The producer state at a segment's base offset, for `snapshot_at` when the log has deleted the
    segment's own snapshot: the last upload's (``last_upload``), else the remote segment's before it,
    else the empty state when nothing precedes it; None when not needed or not known.

    Raises:
        ObjectStoreError: the store failed (the copy round stops; the next one tries again).
    """
    if snapshot_file(log, next_offset) is not None:
        return None  # the segment's own snapshot is still there
    if last_upload is not None and last_upload.offset == base_offset:
        return last_upload
    before = remote.segment_for(base_offset - 1)
    if before is None or before.end_offset != base_offset - 1:
        nothing_before = before is None and base_offset == log.segments[0].base_offset
        return StartState(base_offset, []) if nothing_before else None
    try:
        rows = producer_snapshot.decode(await rsm.fetch_index(before, IndexType.PRODUCER_SNAPSHOT))
    except (ObjectNotFoundError, CorruptSnapshotError):
        return None  # uploaded without one: no chain to carry on
    return StartState(base_offset, rows)


def snapshot_file(log: PartitionLog, offset: int) -> bytes | None:
    """The log's own ``<offset>.snapshot``, if it is still there (read now: the log may delete it)."""
    try:
        with open(producer_snapshot.path_for(log.dir, offset), "rb") as f:
            return f.read()
    except FileNotFoundError:
        return None


def _newest_local_start(log: PartitionLog, first_local: int, end: int) -> StartState | None:
    for offset in reversed(producer_snapshot.list_offsets(log.dir)):
        if first_local <= offset <= end:
            try:
                return StartState(offset, producer_snapshot.read(log.dir, offset))
            except CorruptSnapshotError:
                continue  # the log's own loader deletes it; an older start may do
    return None


def snapshot_at(
    log: PartitionLog, segment: LogSegment, next_offset: int, previous: StartState | None
) -> bytes | None:
    """The producer snapshot of ``segment`` (the state after every batch below ``next_offset``).

    ``previous``: the state at the segment's base offset from the remote segment before it, or the
    empty state there when nothing precedes it; None when neither is known. None when no start is
    known at all (the segment is then uploaded without a snapshot).
    """
    own = snapshot_file(log, next_offset)
    if own is not None:
        return own
    segments = [s for s in log.segments if s.base_offset < next_offset]
    if not segments or segments[-1] is not segment:
        return None  # not a local segment ending at next_offset (deleted meanwhile)
    first = segments[0].base_offset
    local = _newest_local_start(log, first, next_offset)
    starts = [s for s in (local, previous) if s is not None and first <= s.offset <= next_offset]
    if not starts:
        return None
    start = max(starts, key=lambda s: s.offset)
    return producer_snapshot.encode(_replayed(log.dir, segments, start, next_offset))


def _replayed(
    directory: str, segments: Sequence[LogSegment], start: StartState, end: int
) -> list[SnapshotEntry]:
    state = ProducerStateManager(directory)  # scratch: never snapshotted itself
    state.restore(start.rows)

    def visit(segment: LogSegment, position: int, header: BatchHeader) -> None:
        if header.base_offset < end:
            replay_batch(
                state, header, segment.read_bytes(position, header.size) if header.is_control else None
            )

    if start.offset < end:
        replay_headers(segments, start.offset, visit)
    return [to_snapshot_entry(e) for e in state.producers.values()]
