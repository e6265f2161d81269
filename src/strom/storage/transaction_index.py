"""`TransactionIndex`: a segment's aborted transactions, ``<base offset>.txnindex``.

Kafka's ``TransactionIndex`` and ``AbortedTxn``, byte for byte. The file has no header: it is a run
of 34-byte entries, big-endian, one per transaction aborted by an ABORT marker in this segment::

    offset size field
     0      2   version int16            0
     2      8   producer_id int64
    10      8   first_offset int64       the transaction's first offset in this partition
    18      8   last_offset int64        the offset of its ABORT marker
    26      8   last_stable_offset int64 the partition's LSO just after the marker: the first offset
                                         of the earliest transaction of another producer still open
                                         then, else last_offset + 1

An entry lives in the segment that holds its marker; last_offset increases strictly through a file
and across the segments of a log. Entries are appended as their markers are written (the file is
created with its first entry), fsynced when the segment is flushed, and dropped from the end when the
log is truncated (every entry whose marker is at or beyond the truncation offset). A trailing partial
entry (a torn write) is cut off on open; entries that do not increase or lie below the segment's base
offset make the index `needs_rebuild`, and the log then rebuilds every index by replaying batch
headers (log.py).

Reading (`collect`, for read_committed fetches of ``[fetch_offset, upper_bound)``): the entries with
``last_offset >= fetch_offset`` and ``first_offset < upper_bound`` are the aborted transactions that
overlap the fetched range. Scanning goes segment by segment from the one holding ``fetch_offset``
and is complete at the first entry whose last_stable_offset is at or beyond ``upper_bound``: every
transaction that overlaps the range and ends later was still open at that marker, so it would have
held that entry's last stable offset below ``upper_bound``.

Not thread-safe; a `LogSegment` owns its index.
"""

from __future__ import annotations

import contextlib
import errno
import os
import struct
from collections.abc import Iterable
from typing import NamedTuple

from strom._util import filesystem

VERSION = 0
ENTRY_SIZE = 34
SUFFIX = ".txnindex"
_ENTRY = struct.Struct(">hqqqq")

assert _ENTRY.size == ENTRY_SIZE


class AbortedTxn(NamedTuple):
    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int


def encode(entries: Iterable[AbortedTxn]) -> bytes:
    return b"".join(_ENTRY.pack(VERSION, *entry) for entry in entries)


def decode(data: bytes) -> list[AbortedTxn]:
    """Whole entries of ``data``; a trailing partial entry is ignored."""
    whole = len(data) - len(data) % ENTRY_SIZE
    return [AbortedTxn(*row[1:]) for row in _ENTRY.iter_unpack(memoryview(data)[:whole])]


def collect(
    entries: Iterable[AbortedTxn], fetch_offset: int, upper_bound: int
) -> tuple[list[AbortedTxn], bool]:
    """One segment's entries overlapping ``[fetch_offset, upper_bound)``, and whether no later segment
    can add any (see the module docstring); also for a remote segment's index."""
    found = []
    for entry in entries:
        if entry.last_offset >= fetch_offset and entry.first_offset < upper_bound:
            found.append(entry)
        if entry.last_stable_offset >= upper_bound:
            return found, True
    return found, False


class TransactionIndex:
    """The aborted transactions of one segment; see the module docstring."""

    def __init__(self, path: str, base_offset: int) -> None:
        self.path = path
        self.base_offset = base_offset
        self.entries: list[AbortedTxn] = []
        self.needs_rebuild = False
        self._dirty = False
        self._created = False  # the file was made since the last flush: its name is not durable yet
        self._load()

    def _load(self) -> None:
        try:
            with open(self.path, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            return
        self.entries = decode(data)
        if len(data) % ENTRY_SIZE:
            self._rewrite()  # a torn last entry
        previous = self.base_offset - 1
        for entry in self.entries:
            if entry.last_offset <= previous or entry.first_offset > entry.last_offset:
                self.needs_rebuild = True
                self.reset()
                return
            previous = entry.last_offset

    @property
    def last_offset(self) -> int:
        """The last entry's marker offset, or -1."""
        return self.entries[-1].last_offset if self.entries else -1

    def _open(self) -> int:
        # Opened per write and closed again (aborts are rare): a segment keeps no descriptor for it.
        if not self._created and not os.path.exists(self.path):
            self._created = True
        return filesystem.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)

    def append(self, entry: AbortedTxn) -> None:
        """Add the entry of an ABORT marker just written to this segment.

        Raises:
            ValueError: its marker offset does not follow the last entry's.
            OSError: the write failed (the entry is then not in memory either).
        """
        if entry.last_offset <= self.last_offset:
            raise ValueError(f"aborted txn at {entry.last_offset} does not follow {self.last_offset}")
        fd = self._open()
        try:
            data = _ENTRY.pack(VERSION, *entry)
            written = filesystem.pwrite(fd, data, len(self.entries) * ENTRY_SIZE)
            if written != ENTRY_SIZE:
                filesystem.ftruncate(fd, len(self.entries) * ENTRY_SIZE)
                raise OSError(errno.ENOSPC, f"short write of {written} bytes to {self.path}")
        finally:
            os.close(fd)
        self.entries.append(entry)
        self._dirty = True

    def truncate_to(self, offset: int) -> None:
        """Drop every entry whose marker is at or beyond ``offset``."""
        keep = len(self.entries)
        while keep and self.entries[keep - 1].last_offset >= offset:
            keep -= 1
        if keep == len(self.entries):
            return
        del self.entries[keep:]
        self._rewrite()

    def reset(self) -> None:
        self.entries.clear()
        self._rewrite()

    def _rewrite(self) -> None:
        if not self.entries and not os.path.exists(self.path):
            return
        fd = self._open()
        try:
            filesystem.ftruncate(fd, 0)
            filesystem.pwrite(fd, encode(self.entries), 0)
        finally:
            os.close(fd)
        self._dirty = True

    def collect(self, fetch_offset: int, upper_bound: int) -> tuple[list[AbortedTxn], bool]:
        """Entries overlapping ``[fetch_offset, upper_bound)``, and whether no later segment can add any."""
        return collect(self.entries, fetch_offset, upper_bound)

    def flush(self) -> bool:
        """Fsync the file if it was written since; returns whether it was created since the last flush
        (made with a segment's first abort, long after the segment: its name then needs an fsync of
        the directory too)."""
        if self._dirty:
            fd = self._open()
            try:
                filesystem.fsync(fd)
            finally:
                os.close(fd)
        self._dirty = False
        created, self._created = self._created, False
        return created

    def rename(self, new_path: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            filesystem.replace(self.path, new_path)
        self.path = new_path

    def close(self) -> None:
        """Nothing stays open between writes (kept for the segment's life cycle)."""

    def delete(self) -> None:
        self._dirty = False
        with contextlib.suppress(FileNotFoundError):
            filesystem.unlink(self.path)
