"""Reading a remote segment's batches from a fetch offset (Kafka's ``RemoteLogReader``), over the remote
storage manager and a bounded cache.

The segment's offset index (fetched once, cached) gives the position of a batch ending before the fetch
offset; from there batch headers are scanned (never records) to the first batch holding an offset at or
after it, and whole batches are returned up to ``max_bytes`` (at least one batch, KIP-74), as a local
read does. Bytes are read in aligned chunks of ``CHUNK_BYTES`` that the cache keeps, so consumers
reading a segment in order, or several consumers reading the same range, fetch each chunk once.
Everything awaited runs on the object store's threads.

read_committed (`aborted_transactions`): the aborted transactions overlapping what was read come from the
remote transaction indexes (``.txnindex``, cached like the offset index) of the segment read and those
after it, scanned as the local log scans its own (strom.storage.transaction_index) until an entry shows
no later one can overlap; the caller goes on into the local log when the remote log ends first.
"""

from __future__ import annotations

import struct
from bisect import bisect_left
from collections.abc import Sequence

from strom.protocol.records.batch import HEADER_SIZE, read_header
from strom.storage import transaction_index as txn
from strom.storage.transaction_index import AbortedTxn
from strom.tiered.cache import BoundedCache
from strom.tiered.remote_storage import IndexType, RemoteStorageManager
from strom.tiered.segment_metadata import RemoteLogSegmentMetadata

CHUNK_BYTES = 1 << 20
_OFFSET_ENTRY = struct.Struct(">ii")


def start_position(index: bytes, base_offset: int, fetch_offset: int) -> int:
    """Where to start scanning: the position of the last indexed batch ending before ``fetch_offset``
    (its own last offset is below it, so the scan skips it), or 0."""
    entries = list(_OFFSET_ENTRY.iter_unpack(index))
    i = bisect_left([base_offset + rel for rel, _ in entries], fetch_offset) - 1
    return entries[i][1] if i >= 0 else 0


def next_offset_after(data: bytes) -> int | None:
    """The offset after the last of the whole batches in ``data`` (None for no batch)."""
    position, last = 0, None
    while position + HEADER_SIZE <= len(data):
        header = read_header(data, position)
        last = header.last_offset
        position += header.size
    return None if last is None else last + 1


class RemoteSegmentReader:
    def __init__(self, rsm: RemoteStorageManager, cache: BoundedCache) -> None:
        self.rsm = rsm
        self.cache = cache

    async def _index(self, segment: RemoteLogSegmentMetadata) -> bytes:
        key = (segment.segment_id, "index")
        cached = self.cache.get(key)
        if cached is None:
            cached = await self.rsm.fetch_index(segment, IndexType.OFFSET)
            self.cache.put(key, cached)
        return cached

    async def _txn_index(self, segment: RemoteLogSegmentMetadata) -> list[AbortedTxn]:
        if segment.txn_index_size == 0:
            return []  # copied without aborted transactions: no .txnindex object
        key = (segment.segment_id, "txnindex")
        cached = self.cache.get(key)
        if cached is None:
            cached = await self.rsm.fetch_index(segment, IndexType.TRANSACTION)
            self.cache.put(key, cached)
        return txn.decode(cached)

    async def aborted_transactions(
        self, segments: Sequence[RemoteLogSegmentMetadata], fetch_offset: int, upper_bound: int
    ) -> tuple[list[AbortedTxn], bool]:
        """The aborted transactions overlapping ``[fetch_offset, upper_bound)`` in the transaction indexes
        of ``segments`` (the one read, then the later ones in offset order), and whether no later
        segment can add any."""
        found: list[AbortedTxn] = []
        for segment in segments:
            entries, complete = txn.collect(await self._txn_index(segment), fetch_offset, upper_bound)
            found += entries
            if complete:
                return found, True
        return found, False

    async def _chunk(self, segment: RemoteLogSegmentMetadata, number: int) -> bytes:
        key = (segment.segment_id, number)
        cached = self.cache.get(key)
        if cached is None:
            start = number * CHUNK_BYTES
            cached = await self.rsm.fetch_log_segment(
                segment, start, min(start + CHUNK_BYTES, segment.segment_size_in_bytes)
            )
            self.cache.put(key, cached)
        return cached

    async def _bytes(self, segment: RemoteLogSegmentMetadata, start: int, end: int) -> bytes:
        end = min(end, segment.segment_size_in_bytes)
        if start >= end:
            return b""
        parts = [
            await self._chunk(segment, n) for n in range(start // CHUNK_BYTES, (end - 1) // CHUNK_BYTES + 1)
        ]
        joined = b"".join(parts)
        offset = (start // CHUNK_BYTES) * CHUNK_BYTES
        return joined[start - offset : end - offset]

    async def read(self, segment: RemoteLogSegmentMetadata, fetch_offset: int, max_bytes: int) -> bytes:
        """Whole batches of ``segment`` from the one holding ``fetch_offset`` (or the first after it),
        up to ``max_bytes`` but at least one."""
        position = start_position(await self._index(segment), segment.start_offset, fetch_offset)
        size = segment.segment_size_in_bytes
        # Skip the batches ending before the fetch offset (headers only).
        while position + HEADER_SIZE <= size:
            header = read_header(await self._bytes(segment, position, position + HEADER_SIZE))
            if header.last_offset >= fetch_offset:
                break
            position += header.size
        else:
            return b""
        first = read_header(await self._bytes(segment, position, position + HEADER_SIZE))
        end = position + max(first.size, 0)
        # Then whole batches while they fit in max_bytes.
        while end + HEADER_SIZE <= size:
            header = read_header(await self._bytes(segment, end, end + HEADER_SIZE))
            if end + header.size - position > max_bytes:
                break
            end += header.size
        return await self._bytes(segment, position, end)
