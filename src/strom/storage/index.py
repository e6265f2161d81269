"""Sparse segment indexes: `OffsetIndex` (`.index`) and `TimeIndex` (`.timeindex`).

File formats (big-endian, fixed-size entries, no header; offsets are relative to the segment's base
offset so they fit in 4 bytes)::

    .index      8 bytes/entry:  relative_offset int32 | position int32
    .timeindex 12 bytes/entry:  timestamp int64 | relative_offset int32

An offset-index entry (o, p) says "the batch whose last offset is o starts at byte p of the .log".
A time-index entry (t, o) says "t is the largest timestamp in the segment up to the batch whose
last offset is o, and the first batch that reached it is at/before o". Both columns grow strictly,
so lookups are binary searches over in-memory arrays; readers then scan batch headers forward
from the entry's position (at most about ``index.interval.bytes`` plus one batch).

Theory of operation. Unlike Kafka we neither preallocate nor mmap: entries live in two
``array.array`` columns and the file holds exactly the entries written so far. New entries are
buffered and appended to the file by :meth:`flush` (on roll, flush, close), so the produce path does
no index I/O. An unflushed tail is safe because crash recovery rebuilds the index of every segment
after the recovery point, and the recovery point only moves after a flush. ``max_entries`` (from
``segment.index.bytes``) bounds the index; a full index makes the log roll. On load
:meth:`sanity_check` rejects files whose length is not a whole number of entries or whose columns are
not increasing; the loader then rebuilds the index from the log.
Not thread-safe; owned by one `LogSegment`.
"""

from __future__ import annotations

import contextlib
import os
import struct
from array import array
from bisect import bisect_left, bisect_right

from strom._util import filesystem


class CorruptIndexError(Exception):
    """The index file is inconsistent; rebuild it from the log."""


class _SparseIndex:
    """Shared machinery: two columns, a key column searched by bisect, lazy appends to the file."""

    ENTRY = struct.Struct(">ii")
    KEY_TYPE = "i"
    VALUE_TYPE = "i"

    def __init__(self, path: str, base_offset: int, max_index_bytes: int) -> None:
        self.path = path
        self.base_offset = base_offset
        self.max_entries = max(1, max_index_bytes // self.ENTRY.size)
        self.keys: array[int] = array(self.KEY_TYPE)
        self.values: array[int] = array(self.VALUE_TYPE)
        self._flushed = 0

    # -- file I/O ---------------------------------------------------------------------------------
    def load(self) -> None:
        """Read the entries in the file (a missing file is an empty index).

        Raises:
            CorruptIndexError: the file is not a whole number of entries.
        """
        self.reset()
        try:
            with open(self.path, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            return
        if len(data) % self.ENTRY.size:
            raise CorruptIndexError(f"{self.path}: size {len(data)} is not a multiple of {self.ENTRY.size}")
        for key, value in self._decode(data):
            self.keys.append(key)
            self.values.append(value)
        self._flushed = len(self.keys)

    def _decode(self, data: bytes) -> list[tuple[int, int]]:
        return list(self.ENTRY.iter_unpack(data))

    def _encode(self, i: int) -> bytes:
        return self.ENTRY.pack(self.keys[i], self.values[i])

    def flush(self, fsync: bool = False) -> None:
        """Write buffered entries to the file (and fsync it when asked)."""
        pending = b"".join(self._encode(i) for i in range(self._flushed, len(self.keys)))
        if not pending and not fsync:
            return
        try:
            filesystem.write_file(self.path, pending, flags=os.O_APPEND, sync=fsync)
        except OSError:
            # A full disk may have taken part of the entries: cut them off so that the next flush
            # appends whole entries again (they stay buffered in memory).
            with contextlib.suppress(OSError):
                filesystem.truncate(self.path, self._flushed * self.ENTRY.size)
            raise
        self._flushed = len(self.keys)

    def rewrite(self) -> None:
        """Replace the file with the in-memory entries (after truncation or a rebuild).

        An empty index with no file stays without one: creating a file costs more than the start-up
        tail scan of a segment that never had an entry (LogSegment._open_indexes), and recovering
        100,000 such segments after a kill -9 would otherwise create 200,000 files.
        """
        if not self.keys and not os.path.exists(self.path):
            self._flushed = 0
            return
        filesystem.write_file(self.path, b"".join(self._encode(i) for i in range(len(self.keys))))
        self._flushed = len(self.keys)

    def encoded(self) -> bytes:
        """Every entry in the file's format (what a complete, flushed file holds)."""
        return b"".join(self._encode(i) for i in range(len(self.keys)))

    def delete(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            filesystem.unlink(self.path)

    def reset(self) -> None:
        del self.keys[:]
        del self.values[:]
        self._flushed = 0

    # -- queries ----------------------------------------------------------------------------------
    @property
    def entries(self) -> int:
        return len(self.keys)

    @property
    def is_full(self) -> bool:
        return len(self.keys) >= self.max_entries

    def _truncate_entries(self, keep: int) -> None:
        del self.keys[keep:]
        del self.values[keep:]
        if self._flushed > keep:
            self._flushed = keep
            filesystem.truncate(self.path, keep * self.ENTRY.size)


class OffsetIndex(_SparseIndex):
    """Relative last offset of a batch -> byte position of that batch in the segment's .log."""

    def append(self, last_offset: int, position: int) -> None:
        relative = last_offset - self.base_offset
        if self.keys and relative <= self.keys[-1]:
            return  # only strictly increasing offsets make a useful entry
        self.keys.append(relative)
        self.values.append(position)

    def lookup(self, offset: int) -> int:
        """Position from which to scan for ``offset``: the entry with the largest offset <= it, else 0."""
        i = bisect_right(self.keys, offset - self.base_offset) - 1
        return self.values[i] if i >= 0 else 0

    def floor_position(self, position: int) -> int:
        """The largest indexed batch position <= ``position``, else 0 (where the first batch starts)."""
        i = bisect_right(self.values, position) - 1
        return self.values[i] if i >= 0 else 0

    def last_entry(self) -> tuple[int, int] | None:
        """(absolute last offset, position) of the newest entry."""
        if not self.keys:
            return None
        return self.base_offset + self.keys[-1], self.values[-1]

    def truncate_to_position(self, position: int) -> None:
        """Drop entries pointing at or beyond ``position`` (the new end of the .log)."""
        self._truncate_entries(bisect_left(self.values, position))

    def sanity_check(self, log_size: int) -> None:
        """Raise CorruptIndexError unless offsets and positions increase and fit in the .log."""
        _check_increasing(self.path, self.keys)
        _check_increasing(self.path, self.values)
        if self.values and self.values[-1] >= max(log_size, 1):
            raise CorruptIndexError(f"{self.path}: position {self.values[-1]} beyond log size {log_size}")
        if self.keys and self.keys[0] < 0:
            raise CorruptIndexError(f"{self.path}: negative relative offset")


class TimeIndex(_SparseIndex):
    """Largest timestamp so far -> relative offset of the batch that first reached it."""

    ENTRY = struct.Struct(">qi")
    KEY_TYPE = "q"

    def append(self, timestamp: int, offset: int) -> None:
        if self.keys and timestamp <= self.keys[-1]:
            return  # timestamps in the index must increase strictly
        self.keys.append(timestamp)
        self.values.append(offset - self.base_offset)

    def lookup(self, timestamp: int) -> int:
        """Offset from which to scan for the first batch with max timestamp >= ``timestamp``.

        Every batch up to the returned entry's offset has a smaller max timestamp, so scanning may start
        at the batch containing it; with no such entry, scan from the segment's base offset.
        """
        i = bisect_left(self.keys, timestamp) - 1
        return self.base_offset + self.values[i] if i >= 0 else self.base_offset

    def last_entry(self) -> tuple[int, int] | None:
        """(timestamp, absolute offset) of the newest entry."""
        if not self.keys:
            return None
        return self.keys[-1], self.base_offset + self.values[-1]

    def truncate_to_offset(self, offset: int) -> None:
        """Drop entries for offsets at or beyond ``offset``."""
        self._truncate_entries(bisect_left(self.values, offset - self.base_offset))

    def sanity_check(self) -> None:
        _check_increasing(self.path, self.keys)
        if any(self.values[i] > self.values[i + 1] for i in range(len(self.values) - 1)):
            raise CorruptIndexError(f"{self.path}: offsets decrease")


def _check_increasing(path: str, column: array[int]) -> None:
    if any(column[i] >= column[i + 1] for i in range(len(column) - 1)):
        raise CorruptIndexError(f"{path}: entries are not strictly increasing")
