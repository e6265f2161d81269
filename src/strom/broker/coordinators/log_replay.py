"""Replay of a coordinator's partition: its stored batches, decoded, in offset order.

The group and transaction coordinators rebuild their state from ``__consumer_offsets`` and
``__transaction_state`` when this broker becomes a partition's leader. Both read the log the same way:
chunks of at most ``READ_CHUNK_BYTES`` from the log start to the log end offset (a chunk holds whole
batches, at least one), decoded with CRC checks, each batch once. The first batch of a chunk may start
before the offset asked for (a read returns the batch containing it), so each batch comes with only
its records at or after that offset. An unreadable batch stops the replay there, logged: the state
rebuilt so far is what the log's readable prefix says.

Synchronous; the caller runs it on the event loop while loading a partition.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator

from strom.protocol.records.builder import DecodedBatch, RecordValidationError, decode_batches
from strom.protocol.records.record import Record

log = logging.getLogger(__name__)

READ_CHUNK_BYTES = 1 << 20
# PartitionLog.read(fetch_offset, max_bytes, max_offset_exclusive, min_one_batch)
LogRead = Callable[[int, int, int, bool], bytes]


def replay_batches(
    read: LogRead, start: int, end: int, partition: str
) -> Iterator[tuple[DecodedBatch, list[Record]]]:
    """Every batch of ``[start, end)`` with its records at or after ``start`` (``partition`` names the
    log in the log line of an unreadable batch)."""
    offset = start
    while offset < end:
        data = read(offset, READ_CHUNK_BYTES, end, True)
        if not data:
            return
        try:
            batches = decode_batches(data)
        except RecordValidationError as exc:
            log.error(
                "%s: unreadable batch at offset %d (%s); stopping its replay there", partition, offset, exc
            )
            return
        if not batches:
            return
        for batch in batches:
            yield batch, [record for record in batch.records if record.offset >= offset]
        offset = batches[-1].next_offset
