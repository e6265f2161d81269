"""The message browser's bounded scan of one partition: by offset, by timestamp, by key, newest first.

Theory of operation. A request never reads a whole partition: it looks at no more than
``Budget.records`` records and ``Budget.bytes`` bytes of stored batches, and says how far it got, so the
page can offer "scanned N records, continue". Reads go through a `PartitionSource` (whole stored batches
below the high watermark, from the batch holding an offset); control batches (transaction markers) are
skipped, and so are records below the asked range that share its first batch.

* **From an offset** (``offset``) and **from a time** (``timestamp``: the first offset whose record is
  at least that recent, as ListOffsets by time answers): forward, oldest first, until ``limit`` records
  or the budget; "continue" starts at the next offset not looked at.
* **Newest first** (``newest``) and **by key** (``key``): backward from a cursor (the high watermark,
  then the lowest offset already looked at), in windows of offsets read forward and shown in reverse.
  A window starts small (the records wanted, or ``KEY_WINDOW`` for a key search) and grows while the
  budget allows (by the bytes per record seen so far), so the byte budget is checked between windows
  and a window is read whole (never a gap in what was scanned). A key search keeps the newest ``limit``
  matches; "continue" then starts below the oldest match shown, else below the last window.

Compacted topics have gaps in their offsets: windows are ranges of offsets, so a gap costs nothing. A
key is matched on its bytes (``0x``-prefixed hex for binary keys), which is also what a compacted topic
keeps the latest value of.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, replace
from typing import Protocol

from strom.protocol.records.builder import decode_batches
from strom.storage.log import PartitionLog

MAX_RECORDS = 500  # shown per page
READ_BYTES = 1024 * 1024  # per read of stored batches
KEY_WINDOW = 1000
_MAX_UNCOMPRESSED = 64 * 1024 * 1024
MODES = ("newest", "offset", "timestamp", "key")


@dataclass(frozen=True, slots=True)
class Budget:
    """What one request may look at. Records are decoded in Python at tens of microseconds each, so
    10,000 keep a page near a second even on a loaded machine (docs/benchmarks.md#console)."""

    records: int = 10_000
    bytes: int = 4 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class Query:
    mode: str = "newest"
    limit: int = 20
    offset: int = 0  # from an offset
    timestamp_ms: int = 0  # from a time
    key: bytes = b""  # by key
    before: int | None = None  # backward modes: look below this offset (None: the high watermark)


@dataclass(frozen=True, slots=True)
class RawRecord:
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]


@dataclass(frozen=True, slots=True)
class Scan:
    records: list[RawRecord]  # in display order: oldest first forward, newest first backward
    scanned: int  # records looked at
    scanned_bytes: int  # bytes of batches read
    low: int  # the offsets looked at: [low, high)
    high: int
    log_start: int
    high_watermark: int
    next: Query | None  # "continue"; None: nothing left in that direction


class PartitionSource(Protocol):
    async def bounds(self) -> tuple[int, int]:
        """(log start offset, high watermark)."""
        ...

    async def read(self, offset: int, max_bytes: int) -> bytes:
        """Whole stored batches below the high watermark from the one holding ``offset``; at least one
        if there is one (a batch straddling a range's end is read whole, its records filtered)."""
        ...

    async def offset_for_time(self, timestamp_ms: int) -> int | None:
        """The first offset whose record's timestamp is at least ``timestamp_ms``; None: none is."""
        ...


class LocalSource:
    """A replica this broker hosts (leader or follower: both read below their high watermark)."""

    def __init__(self, log: PartitionLog) -> None:
        self._log = log

    async def bounds(self) -> tuple[int, int]:
        return self._log.log_start_offset, self._log.high_watermark

    async def read(self, offset: int, max_bytes: int) -> bytes:
        log = self._log
        return log.read_records(offset, max_bytes, log.high_watermark, min_one_batch=True).read_bytes()

    async def offset_for_time(self, timestamp_ms: int) -> int | None:
        found = self._log.offset_for_timestamp(timestamp_ms)
        return None if found is None else found[0]


async def records_between(
    source: PartitionSource, start: int, end: int
) -> AsyncIterator[tuple[RawRecord, int]]:
    """The data records of offsets [start, end), each with the bytes read since the previous one."""
    offset = start
    while offset < end:
        data = await source.read(offset, READ_BYTES)
        if not data:
            return
        batches = decode_batches(data, verify_crc=False, max_uncompressed_size=_MAX_UNCOMPRESSED)
        if not batches:
            return
        charge = len(data)
        for batch in batches:
            if batch.is_control:
                continue
            for r in batch.records:
                if offset <= r.offset < end:
                    yield RawRecord(r.offset, r.timestamp, r.key, r.value, tuple(r.headers)), charge
                    charge = 0
        offset = max(offset, batches[-1].base_offset + batches[-1].last_offset_delta + 1)


async def scan(source: PartitionSource, query: Query, budget: Budget = Budget()) -> Scan:
    log_start, high_watermark = await source.bounds()
    limit = max(1, min(query.limit, MAX_RECORDS))
    if query.mode in ("offset", "timestamp"):
        if query.mode == "timestamp":
            found = await source.offset_for_time(query.timestamp_ms)
            start = high_watermark if found is None else found
        else:
            start = query.offset
        start = min(max(start, log_start), high_watermark)
        return await _forward(source, replace(query, limit=limit), start, log_start, high_watermark, budget)
    wanted = query.key
    match: Callable[[RawRecord], bool] = (
        (lambda r: r.key == wanted) if query.mode == "key" else (lambda r: True)
    )
    cursor = high_watermark if query.before is None else min(max(query.before, log_start), high_watermark)
    first_window = KEY_WINDOW if query.mode == "key" else limit
    return await _backward(source, replace(query, limit=limit), match, cursor, log_start, high_watermark,
                           budget, first_window)  # fmt: skip


async def _forward(
    source: PartitionSource, query: Query, start: int, log_start: int, high_watermark: int, budget: Budget
) -> Scan:
    shown: list[RawRecord] = []
    scanned = nbytes = 0
    position = start
    async for record, charge in records_between(source, start, high_watermark):
        scanned += 1
        nbytes += charge
        shown.append(record)
        position = record.offset + 1
        if len(shown) >= query.limit or scanned >= budget.records or nbytes >= budget.bytes:
            break
    else:
        position = high_watermark
    following = replace(query, mode="offset", offset=position) if position < high_watermark else None
    return Scan(shown, scanned, nbytes, start, position, log_start, high_watermark, following)


async def _backward(
    source: PartitionSource,
    query: Query,
    match: Callable[[RawRecord], bool],
    cursor: int,
    log_start: int,
    high_watermark: int,
    budget: Budget,
    window: int,
) -> Scan:
    newest_first: list[RawRecord] = []
    scanned = nbytes = 0
    high = low = cursor
    while low > log_start and len(newest_first) < query.limit:
        left_records = budget.records - scanned
        left_bytes = budget.bytes - nbytes
        if left_records <= 0 or left_bytes <= 0:
            break
        per_record = nbytes / scanned if scanned else 0
        size = min(window, left_records, int(left_bytes / per_record) if per_record else window)
        start = max(log_start, low - max(size, 1))
        matched = []
        async for record, charge in records_between(source, start, low):
            scanned += 1
            nbytes += charge
            if match(record):
                matched.append(record)
        newest_first += reversed(matched)
        low = start
        window *= 2
    below = low
    if len(newest_first) > query.limit:
        newest_first = newest_first[: query.limit]
        below = newest_first[-1].offset  # older matches of the last window are shown on "continue"
    following = replace(query, before=below) if below > log_start else None
    return Scan(newest_first, scanned, nbytes, below, high, log_start, high_watermark, following)
