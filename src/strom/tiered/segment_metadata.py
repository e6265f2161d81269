"""A remote log segment's metadata, its states, and its records in ``__remote_log_metadata``.

States (Kafka's ``RemoteLogSegmentState``), each with the states it may follow::

    COPY_SEGMENT_STARTED   (first)     the leader is uploading the segment's objects; readers ignore it
    COPY_SEGMENT_FINISHED  <- STARTED  every object is uploaded: the segment is part of the remote log
    DELETE_SEGMENT_STARTED <- STARTED, FINISHED   deletion began: readers ignore it from now on
    DELETE_SEGMENT_FINISHED <- DELETE_STARTED     the objects are gone; the metadata can be forgotten

A segment only becomes readable by the COPY_SEGMENT_FINISHED record, written after its last object,
so a leader that crashes mid-copy leaves a COPY_SEGMENT_STARTED segment that no reader uses and that
the next leader deletes (DELETE_SEGMENT_STARTED, the objects, DELETE_SEGMENT_FINISHED). Each copy
attempt has a segment id of its own (a random UUID) and its own object keys, so a retried copy never
overwrites the objects of another attempt.

Record layout (Strom's; Kafka's field names). Key: ``<topic>-<partition>`` (UTF-8), which keeps one
partition's events in one ``__remote_log_metadata`` partition and in order. Value: a JSON object::

    {"version": 0, "state": "COPY_SEGMENT_FINISHED",
     "topicId": "…", "topic": "orders", "partition": 3, "segmentId": "<uuid hex>",
     "startOffset": 0, "endOffset": 999, "maxTimestampMs": …, "brokerId": 1, "eventTimestampMs": …,
     "segmentLeaderEpochs": [[epoch, startOffset], …], "segmentSizeInBytes": 1048576,
     "txnIndexSize": 0}

Every record carries the whole metadata (not just the new state), so one record is enough to know a
segment, whatever came before it was compacted or lost. Pure, no I/O.
"""

from __future__ import annotations

import json
import zlib
from dataclasses import dataclass, replace
from enum import Enum
from typing import Any

from strom._util.states import check_rule_book, transition

RECORD_VERSION = 0


class RemoteLogSegmentState(Enum):
    COPY_SEGMENT_STARTED = 0
    COPY_SEGMENT_FINISHED = 1
    DELETE_SEGMENT_STARTED = 2
    DELETE_SEGMENT_FINISHED = 3


_S = RemoteLogSegmentState
VALID_PREVIOUS: dict[RemoteLogSegmentState, frozenset[RemoteLogSegmentState]] = {
    _S.COPY_SEGMENT_STARTED: frozenset(),
    _S.COPY_SEGMENT_FINISHED: frozenset({_S.COPY_SEGMENT_STARTED}),
    _S.DELETE_SEGMENT_STARTED: frozenset({_S.COPY_SEGMENT_STARTED, _S.COPY_SEGMENT_FINISHED}),
    _S.DELETE_SEGMENT_FINISHED: frozenset({_S.DELETE_SEGMENT_STARTED}),
}
INITIAL = frozenset({_S.COPY_SEGMENT_STARTED})
check_rule_book(VALID_PREVIOUS, INITIAL)


@dataclass(frozen=True, slots=True)
class RemoteLogSegmentMetadata:
    topic_id: str
    topic: str
    partition: int
    segment_id: str  # a UUID's hex, one per copy attempt
    start_offset: int
    end_offset: int  # the segment's last offset (inclusive), as in Kafka
    max_timestamp_ms: int
    broker_id: int
    event_timestamp_ms: int
    segment_leader_epochs: tuple[tuple[int, int], ...]  # (leader epoch, its first offset in the segment)
    segment_size_in_bytes: int
    txn_index_size: int  # 0 when the segment has no aborted transactions (no .txnindex object)
    state: RemoteLogSegmentState

    @property
    def partition_key(self) -> str:
        return f"{self.topic}-{self.partition}"

    def moved_to(self, state: RemoteLogSegmentState, event_timestamp_ms: int) -> RemoteLogSegmentMetadata:
        """This metadata in ``state``; raises `RefusedTransition` if the state may not follow."""
        return replace(
            self, state=transition(VALID_PREVIOUS, self.state, state), event_timestamp_ms=event_timestamp_ms
        )

    def encode(self) -> tuple[bytes, bytes]:
        """The ``__remote_log_metadata`` record: (key, value)."""
        value = {
            "version": RECORD_VERSION,
            "state": self.state.name,
            "topicId": self.topic_id,
            "topic": self.topic,
            "partition": self.partition,
            "segmentId": self.segment_id,
            "startOffset": self.start_offset,
            "endOffset": self.end_offset,
            "maxTimestampMs": self.max_timestamp_ms,
            "brokerId": self.broker_id,
            "eventTimestampMs": self.event_timestamp_ms,
            "segmentLeaderEpochs": [list(e) for e in self.segment_leader_epochs],
            "segmentSizeInBytes": self.segment_size_in_bytes,
            "txnIndexSize": self.txn_index_size,
        }
        return self.partition_key.encode(), json.dumps(value, separators=(",", ":")).encode()


class CorruptMetadataRecordError(ValueError):
    """A ``__remote_log_metadata`` value that is not one of ours."""


def metadata_partition(topic: str, partition: int, partitions: int) -> int:
    """The partition of ``__remote_log_metadata`` (of ``partitions``) holding a tiered partition's records:
    ``crc32("<topic>-<partition>") % partitions``, so that its events stay in order."""
    return zlib.crc32(f"{topic}-{partition}".encode()) % partitions


def decode(value: bytes) -> RemoteLogSegmentMetadata:
    """The metadata a record value holds; raises `CorruptMetadataRecordError`."""
    try:
        doc: dict[str, Any] = json.loads(value)
        if doc.get("version") != RECORD_VERSION:
            raise CorruptMetadataRecordError(f"unknown remote log metadata version {doc.get('version')!r}")
        return RemoteLogSegmentMetadata(
            topic_id=str(doc["topicId"]),
            topic=str(doc["topic"]),
            partition=int(doc["partition"]),
            segment_id=str(doc["segmentId"]),
            start_offset=int(doc["startOffset"]),
            end_offset=int(doc["endOffset"]),
            max_timestamp_ms=int(doc["maxTimestampMs"]),
            broker_id=int(doc["brokerId"]),
            event_timestamp_ms=int(doc["eventTimestampMs"]),
            segment_leader_epochs=tuple((int(e), int(o)) for e, o in doc["segmentLeaderEpochs"]),
            segment_size_in_bytes=int(doc["segmentSizeInBytes"]),
            txn_index_size=int(doc["txnIndexSize"]),
            state=RemoteLogSegmentState[str(doc["state"])],
        )
    except (ValueError, KeyError, TypeError) as exc:
        if isinstance(exc, CorruptMetadataRecordError):
            raise
        raise CorruptMetadataRecordError(f"not a remote log metadata record: {exc}") from exc
