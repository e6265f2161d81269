"""Loading a shard: the partition's stored batches, decoded, in offset order, in chunks.

`replay_chunk` decodes one read of at most ``READ_CHUNK_BYTES`` (whole batches, at least one) and
applies it to a shard: a data batch's records at or after the offset asked for (a read returns the
batch containing that offset, which may start before it), a control batch as the end of that
producer's transaction. The runtime reads and applies chunk after chunk, yielding to the event loop
between them, from the log start offset to the log end offset. An unreadable batch stops the load
there, logged: the shard holds what the log's readable prefix says (`LoadStop`).

Pure: no I/O beyond the bytes it is given.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from strom.coordinator_runtime.shard import NO_PRODUCER_ID, CoordinatorShard
from strom.protocol.records.batch import CONTROL_BIT, TRANSACTIONAL_BIT
from strom.protocol.records.builder import RecordValidationError, decode_batches
from strom.protocol.records.control import parse_marker
from strom.protocol.records.record import RecordDecodeError

log = logging.getLogger(__name__)

READ_CHUNK_BYTES = 1 << 20


@dataclass(frozen=True, slots=True)
class ChunkReplayed:
    next_offset: int  # where the next read starts
    stop: bool  # nothing more to read here (empty read or unreadable batch)


def replay_chunk(shard: CoordinatorShard, data: bytes, offset: int, name: str) -> ChunkReplayed:
    """Apply the batches of one read that started at ``offset`` (``name`` labels the log lines)."""
    if not data:
        return ChunkReplayed(offset, True)
    try:
        batches = decode_batches(data)
    except RecordValidationError as exc:
        log.error("%s: unreadable batch at offset %d (%s); stopping its replay there", name, offset, exc)
        return ChunkReplayed(offset, True)
    if not batches:
        return ChunkReplayed(offset, True)
    for batch in batches:
        if batch.attributes & CONTROL_BIT:
            markers = [r for r in batch.records if r.offset >= offset]
            if markers:
                commit = any(_is_commit(r.key, r.value) for r in markers)
                shard.replay_end_transaction(batch.producer_id, batch.producer_epoch, commit)
            continue
        transactional = bool(batch.attributes & TRANSACTIONAL_BIT)
        producer_id = batch.producer_id if transactional else NO_PRODUCER_ID
        producer_epoch = batch.producer_epoch if transactional else -1
        for record in batch.records:
            if record.offset >= offset:
                shard.replay(record.offset, producer_id, producer_epoch, record.key, record.value)
    return ChunkReplayed(batches[-1].next_offset, False)


def _is_commit(key: bytes | None, value: bytes | None) -> bool:
    """Whether a control record is a COMMIT marker (an unreadable one never commits what it ends)."""
    try:
        marker = parse_marker(key, value)
    except RecordDecodeError:
        return False
    return marker is not None and marker.is_commit
