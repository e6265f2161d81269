"""`RemotePartitionMetadata`: what is known of one partition's remote segments (Kafka's
``RemoteLogMetadataCache``), replayed from ``__remote_log_metadata`` records in order.

Each record is a segment's whole metadata in a new state (segment_metadata.py). `apply` keeps the
latest state per segment id: a record whose state may not follow the known one is ignored (a duplicate
after a retried append, or an older record replayed late), and DELETE_SEGMENT_FINISHED forgets the
segment (its id is remembered, so no late record brings it back). The remote log is the
COPY_SEGMENT_FINISHED segments in offset order; COPY_SEGMENT_STARTED ones are either in flight (this
broker's copier) or orphans of a crashed copy, which the next leader deletes.

Knowledge only grows (`absorb`): a broker reloads a partition's records from its replica of the
metadata topic, which may lag behind records this broker itself published (committed on the metadata
partition's leader before this replica learnt the new high watermark). A reload that replaced the
state would show a segment this broker recorded COPY_SEGMENT_FINISHED as COPY_SEGMENT_STARTED again:
as leader it would delete it as an orphan, though local retention had already dropped its offsets
(they were remote), leaving a hole in the log. A reload is therefore merged into what was known, each
segment keeping the furthest state either has. Pure, no I/O.
"""

from __future__ import annotations

from bisect import bisect_right

from strom._util.states import RefusedTransition
from strom.tiered.segment_metadata import VALID_PREVIOUS, RemoteLogSegmentMetadata, RemoteLogSegmentState

_S = RemoteLogSegmentState


class RemotePartitionMetadata:
    def __init__(self, topic_id: str | None = None) -> None:
        self.topic_id = topic_id  # the records' topic id (an earlier topic of the same name is another)
        self._segments: dict[str, RemoteLogSegmentMetadata] = {}
        self._deleted: set[str] = set()  # ids of segments whose DELETE_SEGMENT_FINISHED was seen
        self._copied: list[RemoteLogSegmentMetadata] | None = []  # by start offset; None = to rebuild

    def apply(self, metadata: RemoteLogSegmentMetadata) -> bool:
        """Take a record's metadata into account; returns whether it changed anything."""
        if metadata.segment_id in self._deleted:
            return False
        known = self._segments.get(metadata.segment_id)
        if known is None:
            if metadata.state is _S.DELETE_SEGMENT_FINISHED:
                return False
        elif known.state is metadata.state:
            return False
        else:
            try:
                known.moved_to(metadata.state, metadata.event_timestamp_ms)
            except RefusedTransition:
                return False
        if metadata.state is _S.DELETE_SEGMENT_FINISHED:
            del self._segments[metadata.segment_id]
            self._deleted.add(metadata.segment_id)
        else:
            self._segments[metadata.segment_id] = metadata
        self._copied = None
        return True

    def absorb(self, reloaded: RemotePartitionMetadata) -> None:
        """Merge a reload of the partition's records: deletions it saw, then each of its segments in the
        furthest state (a state that may not follow the known one is ignored, as in `apply`)."""
        for segment_id in reloaded._deleted - self._deleted:
            self._segments.pop(segment_id, None)
            self._deleted.add(segment_id)
            self._copied = None
        for metadata in reloaded._segments.values():
            self.apply(metadata)

    def copied_segments(self) -> list[RemoteLogSegmentMetadata]:
        """The remote log: COPY_SEGMENT_FINISHED segments by start offset."""
        if self._copied is None:
            self._copied = sorted(
                (m for m in self._segments.values() if m.state is _S.COPY_SEGMENT_FINISHED),
                key=lambda m: m.start_offset,
            )
        return self._copied

    def segments_in(self, *states: RemoteLogSegmentState) -> list[RemoteLogSegmentMetadata]:
        return sorted((m for m in self._segments.values() if m.state in states), key=lambda m: m.start_offset)

    @property
    def highest_copied_offset(self) -> int:
        """The last offset in the remote log, or -1 when nothing is remote (Kafka's highest offset in
        remote storage)."""
        copied = self.copied_segments()
        return max((m.end_offset for m in copied), default=-1)

    @property
    def log_start_offset(self) -> int | None:
        """The remote log's first offset, or None when nothing is remote."""
        copied = self.copied_segments()
        return copied[0].start_offset if copied else None

    def log_start(self, deleted_records_before: int) -> tuple[int, int] | None:
        """(the log's first offset, its leader epoch) as far as the remote log holds it: the remote log's
        start, or DeleteRecords' offset when that is higher (Kafka's log start offset); None when no
        remote segment reaches it (the log starts locally)."""
        segment = self.segment_for(deleted_records_before)
        if segment is None:
            return None
        offset = max(segment.start_offset, deleted_records_before)
        epochs = [epoch for epoch, start in segment.segment_leader_epochs if start <= offset]
        return offset, epochs[-1] if epochs else -1

    @property
    def size_bytes(self) -> int:
        return sum(m.segment_size_in_bytes for m in self.copied_segments())

    def segment_for(self, offset: int) -> RemoteLogSegmentMetadata | None:
        """A copied segment holding ``offset`` (or the first one after it, if it falls in a gap).

        Segments may overlap: a new leader's local segments are cut at other offsets than its
        predecessor's, so its first copy can start below the highest offset already remote. Every
        segment starting at or before the offset is a candidate, not only the last one.
        """
        copied = self.copied_segments()
        i = bisect_right([m.start_offset for m in copied], offset)
        holding = [m for m in copied[:i] if m.end_offset >= offset]
        if holding:
            return max(holding, key=lambda m: m.end_offset)
        return copied[i] if i < len(copied) else None

    def segment_for_timestamp(self, timestamp_ms: int) -> RemoteLogSegmentMetadata | None:
        """The first copied segment whose largest timestamp is at or after ``timestamp_ms``."""
        return next((m for m in self.copied_segments() if m.max_timestamp_ms >= timestamp_ms), None)


__all__ = ["VALID_PREVIOUS", "RemotePartitionMetadata"]
