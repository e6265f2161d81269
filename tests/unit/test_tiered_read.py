"""Reading a remote segment from a fetch offset: the start position from the offset index, whole batches
up to max_bytes (at least one), the chunk cache's bound; over the filesystem object store and a real
partition log's segment."""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import pytest
from test_storage_support import make_batch
from test_tiered_plan import metadata

from strom.objectstore.local import LocalObjectStore
from strom.protocol.records.batch import iter_headers
from strom.storage import transaction_index as txn
from strom.storage.config import LogConfig
from strom.storage.log import PartitionLog
from strom.storage.transaction_index import AbortedTxn
from strom.tiered import remote_read
from strom.tiered.cache import BoundedCache
from strom.tiered.remote_read import RemoteBatches, RemoteSegmentReader, start_position
from strom.tiered.remote_storage import IndexType, LogSegmentData, RemoteStorageManager, object_key
from strom.tiered.segment_data import copy_started_metadata, log_segment_data
from strom.tiered.segment_metadata import RemoteLogSegmentMetadata


def test_the_cache_keeps_recent_entries_within_its_bound() -> None:
    cache = BoundedCache(10)
    cache.put("a", b"1234")
    cache.put("b", b"1234")
    assert cache.get("a") == b"1234"  # now the most recent
    cache.put("c", b"1234")  # 12 bytes: the least recent ("b") goes
    assert (cache.get("b"), cache.get("a"), cache.get("c")) == (None, b"1234", b"1234")
    cache.put("huge", b"x" * 11)  # larger than the bound: not kept, nothing evicted
    assert (len(cache), cache.size_bytes, cache.get("huge")) == (2, 8, None)


def test_start_position_is_the_last_indexed_batch_ending_before_the_offset() -> None:
    entry = struct.Struct(">ii")
    index = entry.pack(9, 1000) + entry.pack(19, 2000) + entry.pack(29, 3000)  # base offset 100
    assert start_position(index, 100, 105) == 0
    assert start_position(index, 100, 109) == 0
    assert (
        start_position(index, 100, 110) == 1000
    )  # the batch ending at 109 starts there: skipped by the scan
    assert start_position(index, 100, 125) == 2000
    assert start_position(index, 100, 500) == 3000
    assert start_position(b"", 100, 500) == 0


def test_reads_whole_batches_from_the_offset(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(remote_read, "CHUNK_BYTES", 700)  # small chunks: reads span several
    log = PartitionLog(str(tmp_path / "t-0"), LogConfig(segment_bytes=8000, index_interval_bytes=300))
    for _ in range(60):
        log.append_as_leader(make_batch(count=3, value_size=40), leader_epoch=0)
    segment, following = log.segments[0], log.segments[1]
    local = segment.read_bytes(0, segment.size)
    batches = [(h.base_offset, h.last_offset, pos, h.size) for pos, h in iter_headers(local)]

    async def scenario() -> None:
        store = LocalObjectStore(str(tmp_path / "remote"))
        rsm = RemoteStorageManager(store)
        md = copy_started_metadata(
            log, segment, following.base_offset, topic="t", topic_id="id", partition=0, broker_id=0, now_ms=0
        )
        await rsm.copy_log_segment_data(md, log_segment_data(log, segment, following.base_offset))
        reader = RemoteSegmentReader(rsm, BoundedCache(1 << 20))
        try:
            for base, last, pos, size in batches[::5]:
                # From any offset of a batch: that batch first, then whole batches within max_bytes.
                read = await reader.read(md, last, 3 * size)
                assert _bytes(read) == local[pos : pos + 3 * size]
                # Read-only views of the cached chunks themselves: no copy of the bytes.
                numbers = remote_read.chunk_range(pos, pos + len(read.records))
                chunks = [reader.cache.get((md.segment_id, n)) for n in numbers]
                assert len(read.records.views) == len(chunks) and all(
                    view.readonly and view.obj is chunk
                    for view, chunk in zip(read.records.views, chunks, strict=True)
                )
                # The offset after the last batch answered: a read_committed fetch's upper bound.
                *_, (_, answered_last) = iter_headers(_bytes(read))
                assert read.next_offset == answered_last.last_offset + 1
                one = await reader.read(md, base, 1)  # at least one batch
                assert (_bytes(one), one.next_offset) == (local[pos : pos + size], last + 1)
            to_end = await reader.read(md, batches[-1][0], 1 << 20)
            assert to_end.next_offset == following.base_offset
            nothing = await reader.read(md, md.end_offset + 1, 1000)
            assert (_bytes(nothing), nothing.next_offset) == (b"", None)
            assert reader.cache.hits > 0
        finally:
            await store.close()

    asyncio.run(scenario())


def _bytes(read: RemoteBatches) -> bytes:
    """A read's answer whole (it is views of the cached chunks, several when it spans them)."""
    return read.records.tobytes()


def _remote_segment(
    segment_id: str, start: int, end: int, aborted: list[AbortedTxn]
) -> RemoteLogSegmentMetadata:
    return replace(metadata(segment_id, start, end), txn_index_size=len(aborted) * txn.ENTRY_SIZE)


def test_aborted_transactions_come_from_the_remote_transaction_indexes(tmp_path: Path) -> None:
    """read_committed below the local start: entries overlapping the range, from the segment read on,
    until one shows no later transaction can overlap (then complete); a segment copied without
    aborted transactions has no .txnindex object and is not asked for one."""
    first = [AbortedTxn(7, 10, 20, 21), AbortedTxn(8, 30, 95, 96)]
    second = [AbortedTxn(9, 90, 120, 121), AbortedTxn(7, 150, 160, 161)]
    segments = [
        _remote_segment("a", 0, 99, first),
        _remote_segment("none", 100, 109, []),
        _remote_segment("b", 110, 199, second),
    ]

    async def scenario() -> None:
        store = LocalObjectStore(str(tmp_path / "remote"))
        try:
            for md, entries in zip(segments, (first, [], second), strict=True):
                if entries:
                    await store.put(object_key(md, IndexType.TRANSACTION.value), txn.encode(entries))
            reader = RemoteSegmentReader(RemoteStorageManager(store), BoundedCache(1 << 20))
            found, complete = await reader.aborted_transactions(segments, 15, 112)
            assert (found, complete) == ([*first, second[0]], True)  # 121 >= 112: nothing later overlaps
            assert await reader.aborted_transactions(segments[:2], 21, 112) == (first[1:], False)
            assert await reader.aborted_transactions(segments[1:2], 0, 105) == ([], False)
        finally:
            await store.close()

    asyncio.run(scenario())


class _CountingStore(LocalObjectStore):
    """The filesystem store, counting its ranged reads and able to hold them (a read in flight)."""

    def __init__(self, root: str) -> None:
        super().__init__(root)
        self.ranges: list[tuple[int, int]] = []
        self.gate = asyncio.Event()
        self.gate.set()

    async def get_range_into(self, key: str, start: int, buffers: Sequence[memoryview]) -> int:
        self.ranges.append((start, start + sum(len(buffer) for buffer in buffers)))
        await self.gate.wait()
        return await super().get_range_into(key, start, buffers)


def _two_copied_segments(
    tmp_path: Path,
) -> tuple[PartitionLog, list[tuple[RemoteLogSegmentMetadata, bytes]], list[LogSegmentData]]:
    log = PartitionLog(str(tmp_path / "t-0"), LogConfig(segment_bytes=6000, index_interval_bytes=300))
    for _ in range(80):
        log.append_as_leader(make_batch(count=3, value_size=40), leader_epoch=0)
    copied, data = [], []
    for segment, following in zip(log.segments[:2], log.segments[1:3], strict=True):
        md = copy_started_metadata(
            log, segment, following.base_offset, topic="t", topic_id="id", partition=0, broker_id=0, now_ms=0
        )
        copied.append((md, segment.read_bytes(0, segment.size)))
        data.append(log_segment_data(log, segment, following.base_offset))
    return log, copied, data


async def _uploaded(
    tmp_path: Path, segments: list[RemoteLogSegmentMetadata], data: list[LogSegmentData]
) -> tuple[_CountingStore, RemoteStorageManager]:
    """A counting store holding ``segments`` (copied from ``data``), and its remote storage manager."""
    store = _CountingStore(str(tmp_path / "remote"))
    rsm = RemoteStorageManager(store)
    for md, files in zip(segments, data, strict=True):
        await rsm.copy_log_segment_data(md, files)
    return store, rsm


def test_a_read_loads_its_chunks_at_once_and_reads_ahead_into_the_next_segment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The chunks a read needs are asked for at once, in one ranged read; after it, the bytes a next
    read in order needs are loading (into the following segment past this one's end), so that read
    finds them cached; a chunk asked for twice while loading is read once."""
    monkeypatch.setattr(remote_read, "CHUNK_BYTES", 1000)
    _, copied, data = _two_copied_segments(tmp_path)
    (first, first_bytes), (second, second_bytes) = copied

    async def scenario() -> None:
        store, rsm = await _uploaded(tmp_path, [first, second], data)
        reader = RemoteSegmentReader(rsm, BoundedCache(1 << 20))
        try:
            store.gate.clear()  # hold every GET: what is asked for before any answer is in flight at once
            reading = asyncio.ensure_future(reader.read(first, first.start_offset, 2500, second))
            again = asyncio.ensure_future(reader.read(first, first.start_offset, 2500, second))
            while not store.ranges:
                await asyncio.sleep(0.01)
            # One ranged read for the three chunks the read may need (no index: the first offset).
            assert store.ranges == [(0, 3000)]
            store.gate.set()
            answer = _bytes(await reading)
            assert answer == _bytes(await again)  # the second read awaited the same loads
            assert first_bytes.startswith(answer) and 2500 - 300 < len(answer) <= 2500
            await reader.settle()
            assert len(store.ranges) == 2 and store.ranges[1][0] == 3000  # the next ~2.5 KB read ahead
            # A consumer reading on: the rest of this segment, then the next segment from its start.
            position, offset = len(answer), (await reading).next_offset
            while offset is not None and offset <= first.end_offset:
                before = reader.gets
                read = await reader.read(first, offset, 2500, second)
                more = _bytes(read)
                assert more == first_bytes[position : position + len(more)]
                assert reader.gets - before <= 1  # at most the chunk past the read-ahead window
                position, offset = position + len(more), read.next_offset
                await reader.settle()
            before = reader.gets
            head = _bytes(await reader.read(second, second.start_offset, 1500, None))
            assert second_bytes.startswith(head) and head
            assert reader.gets == before  # read ahead while the first segment's end was read
        finally:
            await store.close()

    asyncio.run(scenario())


def test_every_load_stays_within_the_in_flight_budget(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A read's own loads (its first chunks, those it reaches while scanning) and read-ahead share one
    budget of bytes in flight: with many reads at once the bound holds, a read larger than the budget
    still completes (its chunks loaded as it gets there), and without room read-ahead is dropped."""
    monkeypatch.setattr(remote_read, "CHUNK_BYTES", 1000)
    _, copied, data = _two_copied_segments(tmp_path)
    (first, first_bytes), (second, second_bytes) = copied

    async def scenario() -> None:
        store, rsm = await _uploaded(tmp_path, [first, second], data)
        try:
            none = RemoteSegmentReader(rsm, BoundedCache(1 << 20), in_flight_bytes=0)
            answer = _bytes(await none.read(first, first.start_offset, 1500, second))
            await none.settle()
            assert first_bytes.startswith(answer) and len(answer) > 1000
            assert store.ranges == [(0, 1000), (1000, 2000)]  # one chunk at a time, no read-ahead
            assert none.peak_in_flight == 1000

            store.ranges.clear()
            reader = RemoteSegmentReader(rsm, BoundedCache(1 << 20), in_flight_bytes=2000)
            store.gate.clear()  # the first GET held: the other reads ask meanwhile
            reads = [
                asyncio.ensure_future(reader.read(segment, segment.start_offset, 4500, None))
                for segment in (first, second, first, second)
            ]
            while not store.ranges:
                await asyncio.sleep(0.01)
            store.gate.set()
            answers = [_bytes(read) for read in await asyncio.gather(*reads)]  # 18 KB wanted up front
            await reader.settle()
            assert answers[0] == answers[2] and answers[1] == answers[3]
            assert first_bytes.startswith(answers[0]) and second_bytes.startswith(answers[1])
            assert 4500 - 300 < len(answers[0]) <= 4500
            assert reader.peak_in_flight <= 2000 and reader.in_flight == 0
            assert len(store.ranges) > 4  # in several loads, none beyond the budget
        finally:
            await store.close()

    asyncio.run(scenario())
