"""`RemoteStorageManager` (Kafka's interface of that name) over the object-store port.

Object keys of one remote segment (its metadata's segment id makes them unique per copy attempt)::

    <topic>-<topic id>/<partition>/<20-digit start offset>-<segment id>.log          the batches
                                                                   .index        offset index
                                                                   .timeindex    time index
                                                                   .txnindex     aborted transactions (if any)
                                                                   .snapshot     producer snapshot at its end
                                                                   .leader-epoch-checkpoint

The files are uploaded as they are on the broker's disk (indexes trimmed to their entries, the epoch
checkpoint in its text format, cut at the segment's end), so a reader needs no conversion. Nothing
here decides visibility: a segment is part of the remote log only once its COPY_SEGMENT_FINISHED
metadata is written, after `copy_log_segment_data` returned. Deletion removes every key of the
segment and is idempotent. A partition's keys share one prefix, which `delete_partition` removes
whole (a deleted topic, or orphans no metadata names).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum

from strom.objectstore.store import ObjectStore
from strom.tiered.segment_metadata import RemoteLogSegmentMetadata


class IndexType(Enum):
    OFFSET = ".index"
    TIMESTAMP = ".timeindex"
    TRANSACTION = ".txnindex"
    PRODUCER_SNAPSHOT = ".snapshot"
    LEADER_EPOCH = ".leader-epoch-checkpoint"


LOG_SUFFIX = ".log"
_ALL_SUFFIXES = (LOG_SUFFIX, *(t.value for t in IndexType))


@dataclass(frozen=True, slots=True)
class LogSegmentData:
    """A rolled segment's files to upload (Kafka's ``LogSegmentData``)."""

    log_segment: str
    offset_index: bytes
    time_index: bytes
    transaction_index: bytes | None  # the .txnindex's entries, None without aborted transactions
    producer_snapshot: bytes | None  # the producer snapshot at the segment's end, if still there
    leader_epoch_checkpoint: bytes


def partition_prefix(topic: str, topic_id: str, partition: int) -> str:
    return f"{topic}-{topic_id}/{partition}/"


def object_key(metadata: RemoteLogSegmentMetadata, suffix: str) -> str:
    prefix = partition_prefix(metadata.topic, metadata.topic_id, metadata.partition)
    return f"{prefix}{metadata.start_offset:020d}-{metadata.segment_id}{suffix}"


class RemoteStorageManager:
    def __init__(self, store: ObjectStore) -> None:
        self.store = store

    async def copy_log_segment_data(self, metadata: RemoteLogSegmentMetadata, data: LogSegmentData) -> None:
        """Upload the segment's objects, all at once (none is readable before the segment's
        COPY_SEGMENT_FINISHED metadata, so their order does not matter; one after another, each small
        one's round trip added to the copy's time). Returns, or
        raises the first failure, only once every upload has ended: a clean-up deleting a failed
        copy's objects must not race an upload still under way."""
        small = {
            IndexType.OFFSET: data.offset_index,
            IndexType.TIMESTAMP: data.time_index,
            IndexType.LEADER_EPOCH: data.leader_epoch_checkpoint,
            IndexType.TRANSACTION: data.transaction_index,
            IndexType.PRODUCER_SNAPSHOT: data.producer_snapshot,
        }
        uploads = [
            self.store.put(object_key(metadata, index.value), body)
            for index, body in small.items()
            if body is not None
        ]
        uploads.append(self.store.put_file(object_key(metadata, LOG_SUFFIX), data.log_segment))
        results = await asyncio.gather(*uploads, return_exceptions=True)
        failed = next((r for r in results if isinstance(r, BaseException)), None)
        if failed is not None:
            raise failed

    async def fetch_log_segment(
        self, metadata: RemoteLogSegmentMetadata, start_position: int, end_position: int
    ) -> bytes:
        """The segment's bytes ``[start_position, end_position)`` (cut at its end)."""
        return await self.store.get_range(object_key(metadata, LOG_SUFFIX), start_position, end_position)

    async def fetch_log_segment_into(
        self, metadata: RemoteLogSegmentMetadata, start_position: int, buffers: Sequence[memoryview]
    ) -> int:
        """The segment's bytes from ``start_position`` read into ``buffers`` in order (no copy through
        an intermediate ``bytes``); returns how many were read (fewer only at the segment's end)."""
        return await self.store.get_range_into(object_key(metadata, LOG_SUFFIX), start_position, buffers)

    async def fetch_index(self, metadata: RemoteLogSegmentMetadata, index: IndexType) -> bytes:
        return await self.store.get(object_key(metadata, index.value))

    async def delete_log_segment_data(self, metadata: RemoteLogSegmentMetadata) -> None:
        await self.store.delete([object_key(metadata, suffix) for suffix in _ALL_SUFFIXES])

    async def delete_partition(self, topic: str, topic_id: str, partition: int) -> int:
        """Delete every object of the partition; returns how many there were."""
        keys = [info.key for info in await self.store.list(partition_prefix(topic, topic_id, partition))]
        if keys:
            await self.store.delete(keys)
        return len(keys)
