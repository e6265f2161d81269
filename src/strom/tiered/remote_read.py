"""Reading a remote segment's batches from a fetch offset (Kafka's ``RemoteLogReader``), over the remote
storage manager and a bounded cache.

The segment's offset index (fetched once, cached; not needed for a read from the segment's first offset)
gives the position of a batch ending before the fetch offset; from there batch headers are scanned
(never records) to the first batch holding an offset at or after it, and whole batches are returned up
to ``max_bytes`` (at least one batch, KIP-74), as a local read does. Bytes are read in aligned chunks
of ``CHUNK_BYTES`` that the cache keeps, so consumers reading a segment in order, or several consumers
reading the same range, fetch each chunk once. Everything awaited runs on the object store's threads.

Throughput. A read asks for every chunk it may need (``max_bytes`` from its start position) at once,
in one ranged GET per run of chunks not cached, instead of one round trip after another while the
headers are scanned. Then it reads ahead: the chunks after what it returned, as many bytes as it
returned (the next fetch of a consumer reading in order), into the following segment when this one
ends, start loading into the cache while the consumer handles this answer. A chunk being loaded is
loaded once: later readers await the same load, and a load outlives a read cancelled by
``remote.fetch.max.wait.ms``, so its bytes are cached for the retry.

Copies. A load reads the object store's answer into the chunks' own buffers (``get_range_into``: from
the socket, or the file, straight into them), and the answer is views of the cached chunks
(`BufferRecords`), which the response writer hands to ``sendmsg`` as they are: the bytes are not
copied in the broker between the store's socket and the consumer's.

Memory. Every load counts against one budget of bytes in flight, ``in_flight_bytes`` (half the cache
by default, so what read-ahead loads is still cached when asked for): a read's own loads (its first
chunks, and any it reaches while scanning) wait until they fit, or until nothing else is in flight (a
read always makes progress, one run at a time); read-ahead takes only the room that is left, and is
dropped otherwise. A read asks up front for at most the budget, the rest as it gets there. Chunks
cached and loading are thus within the cache's bound plus the budget, however many partitions and
consumers read at once. An answer holds its chunks until the socket has taken it: a chunk evicted
meanwhile stays in memory that long (at most the fetch's ``max_bytes`` per answer, as a copy of them
would), outside that bound, as a local read's answer would be.

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

from strom._util.buffers import receive_buffer
from strom.protocol.buffer_records import EMPTY_BUFFER_RECORDS, BufferRecords
from strom.protocol.records.batch import HEADER_SIZE, BatchHeader, read_header
from strom.storage import transaction_index as txn
from strom.storage.transaction_index import AbortedTxn
from strom.tiered.cache import BoundedCache, Buffer
from strom.tiered.remote_storage import IndexType, RemoteStorageManager
from strom.tiered.segment_metadata import RemoteLogSegmentMetadata

CHUNK_BYTES = 1 << 20
_OFFSET_ENTRY = struct.Struct(">ii")
# An object-store read: the value of each part it fills, in order.
_Fetch = Callable[[], Awaitable[Sequence[Buffer]]]


def start_position(index: bytes, base_offset: int, fetch_offset: int) -> int:
    """Where to start scanning: the position of the last indexed batch ending before ``fetch_offset``
    (its own last offset is below it, so the scan skips it), or 0."""
    entries = list(_OFFSET_ENTRY.iter_unpack(index))
    i = bisect_left([base_offset + rel for rel, _ in entries], fetch_offset) - 1
    return entries[i][1] if i >= 0 else 0


@dataclass(frozen=True, slots=True)
class RemoteBatches:
    """What a read answers: whole batches, as views of the cached chunks, and the offset after the
    last of them (None when there is none; a read_committed fetch's upper bound)."""

    records: BufferRecords
    next_offset: int | None


_NOTHING = RemoteBatches(EMPTY_BUFFER_RECORDS, None)


def chunk_range(start: int, end: int) -> range:
    """The numbers of the chunks holding the bytes ``[start, end)`` (``end > start``)."""
    return range(start // CHUNK_BYTES, (end - 1) // CHUNK_BYTES + 1)


class RemoteSegmentReader:
    def __init__(
        self, rsm: RemoteStorageManager, cache: BoundedCache, in_flight_bytes: int | None = None
    ) -> None:
        self.rsm = rsm
        self.cache = cache
        self.in_flight_bytes = cache.max_bytes // 2 if in_flight_bytes is None else in_flight_bytes
        self._loading: dict[Hashable, asyncio.Future[Buffer]] = {}  # a chunk's or an index's one load
        self._tasks: set[asyncio.Task[None]] = set()
        self.in_flight = 0  # bytes of segment loads not finished yet
        self.peak_in_flight = 0
        self._room = asyncio.Event()  # set when a load ends
        self.gets = 0  # object-store reads issued (runs of chunks, indexes)

    async def settle(self) -> None:
        """Wait until no load is in flight (read-ahead included); their failures are not raised here."""
        while self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)

    def _cached(self, key: Hashable) -> Buffer | asyncio.Future[Buffer] | None:
        cached = self.cache.get(key)
        return cached if cached is not None else self._loading.get(key)

    def _pending(self, key: Hashable) -> asyncio.Future[Buffer]:
        """A new load of ``key``, awaited by every reader that wants it until it is done."""
        future = self._loading[key] = asyncio.get_running_loop().create_future()
        future.add_done_callback(partial(self._loaded, key))
        return future

    def _loaded(self, key: Hashable, future: asyncio.Future[Buffer]) -> None:
        if self._loading.get(key) is future:
            del self._loading[key]
        if not future.cancelled():
            future.exception()  # a read-ahead nobody awaited: its failure is not an unretrieved error

    def _spawn(self, fetch: _Fetch, parts: list[_Part], size: int = 0) -> None:
        """One object-store read whose values fill ``parts``; ``size``: bytes counted in flight."""
        task = asyncio.ensure_future(self._run(fetch, parts))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        if size:
            self.in_flight += size
            self.peak_in_flight = max(self.peak_in_flight, self.in_flight)
            task.add_done_callback(partial(self._load_done, size))

    def _load_done(self, size: int, _task: asyncio.Task[None]) -> None:
        self.in_flight -= size
        self._room.set()

    def _fits(self, size: int) -> bool:
        return not self.in_flight or self.in_flight + size <= self.in_flight_bytes

    async def _run(self, fetch: _Fetch, parts: list[_Part]) -> None:
        self.gets += 1
        try:
            values = await fetch()
        except asyncio.CancelledError:
            for part in parts:
                part.future.cancel()
            raise
        except Exception as exc:  # each reader waiting for a part gets it (ObjectStoreError: retriable)
            for part in parts:
                if not part.future.done():
                    part.future.set_exception(exc)
            return
        for part, value in zip(parts, values, strict=True):
            self.cache.put(part.key, value)
            if not part.future.done():
                part.future.set_result(value)

    async def _get(self, key: Hashable, fetch: Callable[[], Awaitable[bytes]]) -> Buffer:
        found = self._cached(key)
        if found is None:
            found = self._pending(key)
            self._spawn(partial(_one, fetch), [_Part(key, found)])
        return await _value(found)

    async def _index(self, segment: RemoteLogSegmentMetadata) -> bytes:
        index = await self._get(
            (segment.segment_id, "index"), lambda: self.rsm.fetch_index(segment, IndexType.OFFSET)
        )
        return bytes(index)  # fetched as bytes: no copy

    async def _txn_index(self, segment: RemoteLogSegmentMetadata) -> list[AbortedTxn]:
        if segment.txn_index_size == 0:
            return []  # copied without aborted transactions: no .txnindex object
        raw = await self._get(
            (segment.segment_id, "txnindex"), lambda: self.rsm.fetch_index(segment, IndexType.TRANSACTION)
        )
        return txn.decode(bytes(raw))

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

    def _missing(self, segment: RemoteLogSegmentMetadata, numbers: Iterable[int]) -> list[int]:
        """Those of the chunks ``numbers`` neither cached nor loading."""
        return [
            n
            for n in numbers
            if (segment.segment_id, n) not in self.cache and (segment.segment_id, n) not in self._loading
        ]

    def _load_chunks(self, segment: RemoteLogSegmentMetadata, numbers: Iterable[int]) -> None:
        """Start loading the chunks among ``numbers`` neither cached nor loading: one ranged read per
        run of consecutive ones (fewer requests, each larger) into a buffer per chunk, each cached on
        its own."""
        run: list[int] = []
        for number in [*numbers, -1]:
            key = (segment.segment_id, number)
            if number >= 0 and key not in self.cache and key not in self._loading:
                run.append(number)
                continue
            if run:
                # Not zeroed: the load writes every byte before a reader sees the chunk (_fill).
                buffers = [receive_buffer(_chunk_size(segment, n)) for n in run]
                parts = [_Part((segment.segment_id, n), self._pending((segment.segment_id, n))) for n in run]
                fetch = partial(self._fill, segment, run[0] * CHUNK_BYTES, buffers)
                self._spawn(fetch, parts, sum(len(buffer) for buffer in buffers))
                run = []

    async def _fill(
        self, segment: RemoteLogSegmentMetadata, start: int, buffers: list[bytearray]
    ) -> list[Buffer]:
        """The chunks of ``buffers`` filled from the segment's bytes at ``start``; a chunk the object's
        end cut short is only its bytes read (a copy; a segment's object is never shorter than its
        metadata says)."""
        got = await self.rsm.fetch_log_segment_into(segment, start, [memoryview(b) for b in buffers])
        chunks: list[Buffer] = []
        for buffer in buffers:
            filled = min(max(got, 0), len(buffer))
            got -= filled
            chunks.append(buffer if filled == len(buffer) else bytes(buffer[:filled]))
        return chunks

    async def _chunk(self, segment: RemoteLogSegmentMetadata, number: int) -> Buffer:
        key = (segment.segment_id, number)
        if (found := self._cached(key)) is None:
            await self._load(segment, number * CHUNK_BYTES, (number + 1) * CHUNK_BYTES)
            found = self._cached(key)  # loading now (no await since), or loaded by another reader
            assert found is not None
        return await _value(found)

    async def _load(self, segment: RemoteLogSegmentMetadata, start: int, end: int) -> None:
        """Start loading the chunks of ``[start, end)`` not cached yet, a read's own: once they fit in
        the budget, or nothing else is in flight."""
        end = min(end, segment.segment_size_in_bytes)
        if start >= end:
            return
        while True:
            missing = self._missing(segment, chunk_range(start, end))
            size = sum(_chunk_size(segment, n) for n in missing)
            if self._fits(size):
                break
            self._room.clear()
            await self._room.wait()
        self._load_chunks(segment, missing)

    async def _views(self, segment: RemoteLogSegmentMetadata, start: int, end: int) -> list[memoryview]:
        """The segment's bytes ``[start, end)`` as read-only views of the cached chunks, in order."""
        end = min(end, segment.segment_size_in_bytes)
        if start >= end:
            return []
        await self._load(segment, start, end)
        parts = [memoryview(await self._chunk(segment, n)) for n in chunk_range(start, end)]
        first = start % CHUNK_BYTES
        last = end - (start - first) - (len(parts) - 1) * CHUNK_BYTES
        if len(parts) == 1:
            parts[0] = parts[0][first:last]
        else:
            parts[0], parts[-1] = parts[0][first:], parts[-1][:last]
        return [part.toreadonly() for part in parts]

    async def _header(self, segment: RemoteLogSegmentMetadata, position: int) -> BatchHeader:
        number = position // CHUNK_BYTES
        within = position - number * CHUNK_BYTES
        if within + HEADER_SIZE <= CHUNK_BYTES:  # the usual case: inside one chunk, no copy
            return read_header(await self._chunk(segment, number), within)
        return read_header(b"".join(await self._views(segment, position, position + HEADER_SIZE)))

    def _read_ahead(
        self,
        segment: RemoteLogSegmentMetadata,
        position: int,
        amount: int,
        following: RemoteLogSegmentMetadata | None,
    ) -> None:
        """Start loading up to ``amount`` bytes after ``position`` (into ``following`` past the segment's
        end), in the room the budget has left."""
        room = self.in_flight_bytes - self.in_flight
        amount = min(amount, room)
        for target, begin in ((segment, position), (following, 0)):
            if target is None or amount <= 0 or begin >= target.segment_size_in_bytes:
                continue
            end = min(begin + amount, target.segment_size_in_bytes)
            amount -= end - begin
            wanted = []
            for number in self._missing(target, chunk_range(begin, end)):
                room -= _chunk_size(target, number)
                if room < 0:
                    break
                wanted.append(number)
            self._load_chunks(target, wanted)
            if room < 0:
                return

    async def read(
        self,
        segment: RemoteLogSegmentMetadata,
        fetch_offset: int,
        max_bytes: int,
        following: RemoteLogSegmentMetadata | None = None,
    ) -> RemoteBatches:
        """Whole batches of ``segment`` from the one holding ``fetch_offset`` (or the first after it),
        up to ``max_bytes`` but at least one; then a read-ahead of the bytes after them (into
        ``following``, the next remote segment, past this one's end)."""
        if fetch_offset <= segment.start_offset:
            position = 0  # the segment's first batch: no index needed
        else:
            position = start_position(await self._index(segment), segment.start_offset, fetch_offset)
        size = segment.segment_size_in_bytes
        up_front = max(min(max_bytes + HEADER_SIZE, self.in_flight_bytes), 1)  # the rest as it gets there
        await self._load(segment, position, position + up_front)
        # Skip the batches ending before the fetch offset (headers only).
        while position + HEADER_SIZE <= size:
            header = await self._header(segment, position)
            if header.last_offset >= fetch_offset:
                break
            position += header.size
        else:
            return _NOTHING
        end = position + max(header.size, 0)
        last_offset = header.last_offset
        # Then whole batches while they fit in max_bytes.
        while end + HEADER_SIZE <= size:
            header = await self._header(segment, end)
            if end + header.size - position > max_bytes:
                break
            end += header.size
            last_offset = header.last_offset
        views = await self._views(segment, position, end)
        self._read_ahead(segment, end, end - position, following)
        return RemoteBatches(BufferRecords(views), last_offset + 1)


def _chunk_size(segment: RemoteLogSegmentMetadata, number: int) -> int:
    return min(CHUNK_BYTES, segment.segment_size_in_bytes - number * CHUNK_BYTES)


async def _value(loaded: Buffer | asyncio.Future[Buffer]) -> Buffer:
    """The bytes of a chunk or index, awaiting its load if need be (shielded: a reader cancelled by
    remote.fetch.max.wait.ms leaves the load running, and its bytes are cached for the retry)."""
    return loaded if isinstance(loaded, bytes | bytearray) else await asyncio.shield(loaded)


async def _one(fetch: Callable[[], Awaitable[bytes]]) -> list[Buffer]:
    return [await fetch()]


@dataclass(frozen=True, slots=True)
class _Part:
    """What one object-store read fills: the cache entry ``key``, and the future its readers await."""

    key: Hashable
    future: asyncio.Future[Buffer]
