"""Reading a remote segment's batches from a fetch offset (Kafka's ``RemoteLogReader``), over the remote
storage manager and a bounded cache.

The segment's offset index (fetched once, cached; not needed for a read from the segment's first offset)
gives the position of a batch ending before the fetch offset; from there batch headers are scanned
(never records) to the first batch holding an offset at or after it, and whole batches are returned up
to ``max_bytes`` (at least one batch, KIP-74), as a local read does. Bytes are read in aligned chunks
of ``CHUNK_BYTES`` that the cache keeps, so consumers reading a segment in order, or several consumers
reading the same range, fetch each chunk once. Everything awaited runs on the object store's threads.

Throughput. A read asks for every chunk it may need (``max_bytes`` from its start position) at once,
so their GETs run in parallel on the store's threads instead of one round trip after another while
the headers are scanned. Then it reads ahead: the chunks after what it returned, as many bytes as it
returned (the next fetch of a consumer reading in order), into the following segment when this one
ends, start loading into the cache while the consumer handles this answer. Read-ahead is bounded:
at most ``read_ahead_bytes`` (half the cache by default, so what it loads is still cached when asked
for) per read, and no more than that in flight in all; memory is thus the cache's bound plus that
budget. A chunk being loaded is loaded once: later readers await the same load, and a load outlives a
read cancelled by ``remote.fetch.max.wait.ms``, so its bytes are cached for the retry. The answer is
one copy of the chunks' bytes (joined from views of them).

read_committed (`aborted_transactions`): the aborted transactions overlapping what was read come from the
remote transaction indexes (``.txnindex``, cached like the offset index) of the segment read and those
after it, scanned as the local log scans its own (strom.storage.transaction_index) until an entry shows
no later one can overlap; the caller goes on into the local log when the remote log ends first.
"""

from __future__ import annotations

import asyncio
import struct
from bisect import bisect_left
from collections.abc import Awaitable, Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass
from functools import partial

from strom.protocol.records.batch import HEADER_SIZE, BatchHeader, read_header
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


def chunk_range(start: int, end: int) -> range:
    """The numbers of the chunks holding the bytes ``[start, end)`` (``end > start``)."""
    return range(start // CHUNK_BYTES, (end - 1) // CHUNK_BYTES + 1)


class RemoteSegmentReader:
    def __init__(
        self, rsm: RemoteStorageManager, cache: BoundedCache, read_ahead_bytes: int | None = None
    ) -> None:
        self.rsm = rsm
        self.cache = cache
        self.read_ahead_bytes = cache.max_bytes // 2 if read_ahead_bytes is None else read_ahead_bytes
        self._loading: dict[Hashable, asyncio.Future[bytes]] = {}  # a chunk's or an index's one load
        self._tasks: set[asyncio.Task[None]] = set()
        self._ahead_in_flight = 0  # bytes of read-ahead loads not finished yet
        self.gets = 0  # object-store reads issued (runs of chunks, indexes)

    async def settle(self) -> None:
        """Wait until no load is in flight (read-ahead included); their failures are not raised here."""
        while self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)

    def _cached(self, key: Hashable) -> bytes | asyncio.Future[bytes] | None:
        cached = self.cache.get(key)
        return cached if cached is not None else self._loading.get(key)

    def _pending(self, key: Hashable) -> asyncio.Future[bytes]:
        """A new load of ``key``, awaited by every reader that wants it until it is done."""
        future = self._loading[key] = asyncio.get_running_loop().create_future()
        future.add_done_callback(partial(self._loaded, key))
        return future

    def _loaded(self, key: Hashable, future: asyncio.Future[bytes]) -> None:
        if self._loading.get(key) is future:
            del self._loading[key]
        if not future.cancelled():
            future.exception()  # a read-ahead nobody awaited: its failure is not an unretrieved error

    def _spawn(self, fetch: Callable[[], Awaitable[bytes]], parts: list[_Part], ahead: int = 0) -> None:
        """One object-store read whose bytes fill ``parts``; ``ahead``: bytes counted as read-ahead."""
        task = asyncio.ensure_future(self._run(fetch, parts))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        if ahead:
            self._ahead_in_flight += ahead
            task.add_done_callback(partial(self._ahead_done, ahead))

    def _ahead_done(self, size: int, _task: asyncio.Task[None]) -> None:
        self._ahead_in_flight -= size

    async def _run(self, fetch: Callable[[], Awaitable[bytes]], parts: list[_Part]) -> None:
        self.gets += 1
        try:
            data = await fetch()
        except asyncio.CancelledError:
            for part in parts:
                part.future.cancel()
            raise
        except Exception as exc:  # each reader waiting for a part gets it (ObjectStoreError: retriable)
            for part in parts:
                if not part.future.done():
                    part.future.set_exception(exc)
            return
        for part in parts:
            piece = data if part.start == 0 and part.end >= len(data) else data[part.start : part.end]
            self.cache.put(part.key, piece)
            if not part.future.done():
                part.future.set_result(piece)

    async def _get(self, key: Hashable, fetch: Callable[[], Awaitable[bytes]]) -> bytes:
        found = self._cached(key)
        if found is None:
            found = self._pending(key)
            self._spawn(fetch, [_Part(key, found, 0, 1 << 62)])
        return await _value(found)

    async def _index(self, segment: RemoteLogSegmentMetadata) -> bytes:
        return await self._get(
            (segment.segment_id, "index"), lambda: self.rsm.fetch_index(segment, IndexType.OFFSET)
        )

    async def _txn_index(self, segment: RemoteLogSegmentMetadata) -> list[AbortedTxn]:
        if segment.txn_index_size == 0:
            return []  # copied without aborted transactions: no .txnindex object
        raw = await self._get(
            (segment.segment_id, "txnindex"), lambda: self.rsm.fetch_index(segment, IndexType.TRANSACTION)
        )
        return txn.decode(raw)

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

    def _load_chunks(
        self, segment: RemoteLogSegmentMetadata, numbers: Iterable[int], ahead: bool = False
    ) -> None:
        """Start loading the chunks among ``numbers`` neither cached nor loading: one ranged read per
        run of consecutive ones (fewer requests, each larger), each chunk cached on its own."""
        run: list[int] = []
        for number in [*numbers, -1]:
            key = (segment.segment_id, number)
            if number >= 0 and key not in self.cache and key not in self._loading:
                run.append(number)
                continue
            if run:
                first = run[0] * CHUNK_BYTES
                end = min((run[-1] + 1) * CHUNK_BYTES, segment.segment_size_in_bytes)
                parts = [
                    _Part((segment.segment_id, n), self._pending((segment.segment_id, n)),
                          n * CHUNK_BYTES - first, (n + 1) * CHUNK_BYTES - first)
                    for n in run
                ]  # fmt: skip
                fetch = partial(self.rsm.fetch_log_segment, segment, first, end)
                self._spawn(fetch, parts, end - first if ahead else 0)
                run = []

    def _chunk(self, segment: RemoteLogSegmentMetadata, number: int) -> bytes | asyncio.Future[bytes]:
        found = self._cached((segment.segment_id, number))
        if found is None:
            self._load_chunks(segment, [number])
            found = self._loading[(segment.segment_id, number)]
        return found

    def _start_loading(self, segment: RemoteLogSegmentMetadata, start: int, end: int) -> None:
        """Start loading the chunks of ``[start, end)`` not cached yet (a read's own: no budget)."""
        end = min(end, segment.segment_size_in_bytes)
        if start < end:
            self._load_chunks(segment, chunk_range(start, end))

    async def _bytes(self, segment: RemoteLogSegmentMetadata, start: int, end: int) -> bytes:
        end = min(end, segment.segment_size_in_bytes)
        if start >= end:
            return b""
        self._start_loading(segment, start, end)
        parts = [memoryview(await _value(self._chunk(segment, n))) for n in chunk_range(start, end)]
        first = start % CHUNK_BYTES
        last = end - (start - first) - (len(parts) - 1) * CHUNK_BYTES
        if len(parts) == 1:
            return bytes(parts[0][first:last])
        parts[0], parts[-1] = parts[0][first:], parts[-1][:last]
        return b"".join(parts)  # the answer's one copy

    async def _header(self, segment: RemoteLogSegmentMetadata, position: int) -> BatchHeader:
        number = position // CHUNK_BYTES
        within = position - number * CHUNK_BYTES
        if within + HEADER_SIZE <= CHUNK_BYTES:  # the usual case: inside one chunk, no copy
            return read_header(await _value(self._chunk(segment, number)), within)
        return read_header(await self._bytes(segment, position, position + HEADER_SIZE))

    def _read_ahead(
        self,
        segment: RemoteLogSegmentMetadata,
        position: int,
        amount: int,
        following: RemoteLogSegmentMetadata | None,
    ) -> None:
        """Start loading up to ``amount`` bytes after ``position`` (into ``following`` past the segment's
        end), within the read-ahead budget."""
        amount = min(amount, self.read_ahead_bytes)
        room = self.read_ahead_bytes - self._ahead_in_flight
        for target, begin in ((segment, position), (following, 0)):
            if target is None or amount <= 0 or begin >= target.segment_size_in_bytes:
                continue
            end = min(begin + amount, target.segment_size_in_bytes)
            amount -= end - begin
            wanted = []
            for number in chunk_range(begin, end):
                key = (target.segment_id, number)
                if key in self._loading or key in self.cache:
                    continue
                room -= min(CHUNK_BYTES, target.segment_size_in_bytes - number * CHUNK_BYTES)
                if room < 0:
                    break
                wanted.append(number)
            self._load_chunks(target, wanted, ahead=True)
            if room < 0:
                return

    async def read(
        self,
        segment: RemoteLogSegmentMetadata,
        fetch_offset: int,
        max_bytes: int,
        following: RemoteLogSegmentMetadata | None = None,
    ) -> bytes:
        """Whole batches of ``segment`` from the one holding ``fetch_offset`` (or the first after it),
        up to ``max_bytes`` but at least one; then a read-ahead of the bytes after them (into
        ``following``, the next remote segment, past this one's end)."""
        if fetch_offset <= segment.start_offset:
            position = 0  # the segment's first batch: no index needed
        else:
            position = start_position(await self._index(segment), segment.start_offset, fetch_offset)
        size = segment.segment_size_in_bytes
        self._start_loading(segment, position, position + max_bytes + HEADER_SIZE)
        # Skip the batches ending before the fetch offset (headers only).
        while position + HEADER_SIZE <= size:
            header = await self._header(segment, position)
            if header.last_offset >= fetch_offset:
                break
            position += header.size
        else:
            return b""
        end = position + max(header.size, 0)
        # Then whole batches while they fit in max_bytes.
        while end + HEADER_SIZE <= size:
            header = await self._header(segment, end)
            if end + header.size - position > max_bytes:
                break
            end += header.size
        data = await self._bytes(segment, position, end)
        self._read_ahead(segment, end, end - position, following)
        return data


async def _value(loaded: bytes | asyncio.Future[bytes]) -> bytes:
    """The bytes of a chunk or index, awaiting its load if need be (shielded: a reader cancelled by
    remote.fetch.max.wait.ms leaves the load running, and its bytes are cached for the retry)."""
    return loaded if isinstance(loaded, bytes) else await asyncio.shield(loaded)


@dataclass(frozen=True, slots=True)
class _Part:
    """What one object-store read fills: the cache entry ``key`` from its bytes ``[start, end)``."""

    key: Hashable
    future: asyncio.Future[bytes]
    start: int
    end: int
