"""`LogSegment`: one `.log` file of record batches plus its `.index` and `.timeindex`.

Files, named by the segment's base offset zero-padded to 20 digits (Kafka's names)::

    00000000000000001234.log        v2 record batches exactly as on the wire, base offsets assigned,
                                    back to back, no framing of our own (see records/batch.py)
    00000000000000001234.index      OffsetIndex (see index.py)
    00000000000000001234.timeindex  TimeIndex (see index.py; ListOffsets by time is time_lookup.py)
    00000000000000001234.txnindex   TransactionIndex, aborted transactions (transaction_index.py),
                                    only once an ABORT marker is written to the segment

Theory of operation. Appends are one ``os.pwrite`` at the end of the file (a large one into blocks
reserved for exactly its bytes first: ``_util/preallocate.py``, cheaper per-block work in the kernel);
every ``index.interval.bytes`` of batches one entry goes into each index (in memory, written on flush). A
fetch reads no record bytes: `read` answers with a `FileSlice` (this file, a position, a size) that the
broker sends with ``sendfile`` (see file_records.py for the slice's lifetime). To find an offset, the
offset index gives a nearby earlier position and batch headers are scanned forward from there (header
bytes only); the end of a slice is found the same way, from the index entry at or below the byte limit,
so that a slice always ends on a batch boundary. ``recover`` re-reads the whole file, checks each
batch's header, CRC and offset order, rebuilds both indexes and cuts the file at the first bad byte.
``should_roll`` is the pure roll decision (Kafka's ``LogSegment.shouldRoll``).
Not thread-safe; a `PartitionLog` owns its segments.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Sequence
from typing import NamedTuple

from strom._util import filesystem
from strom._util.preallocate import preallocate
from strom.protocol.records.batch import (
    HEADER_SIZE,
    BatchHeader,
    RecordValidationError,
    compute_crc,
    read_header,
)
from strom.storage.file_records import FileSlice, SegmentFile
from strom.storage.index import CorruptIndexError, OffsetIndex, TimeIndex
from strom.storage.open_files import OpenFiles, unbounded
from strom.storage.roll import should_roll
from strom.storage.transaction_index import SUFFIX as TXN_INDEX_SUFFIX
from strom.storage.transaction_index import TransactionIndex

_SCAN_CHUNK = 64 * 1024
# Header scans that locate one batch near an index entry (at most about index.interval.bytes away).
_LOCATE_CHUNK = 8 * 1024
# Batch positions remembered per segment where recent reads ended and appends began.
_POSITIONS_KEPT = 64
_RECOVER_CHUNK = 4 * 1024 * 1024
_NO_TIMESTAMP = -1
# Appends at least this large reserve their blocks in one call first; smaller ones would pay a
# system call for a block or two.
_PREALLOCATE_FROM = 64 * 1024


def filename_prefix(directory: str, base_offset: int) -> str:
    return os.path.join(directory, f"{base_offset:020d}")


class BatchSpan(NamedTuple):
    """Where one appended batch sits in the appended bytes, and what the indexes need of it."""

    position: int
    last_offset: int
    max_timestamp: int
    size: int


class LogSegment:
    """A `.log` file with its two sparse indexes; see the module docstring."""

    def __init__(
        self,
        directory: str,
        base_offset: int,
        *,
        index_interval_bytes: int,
        max_index_bytes: int,
        now_ms: int,
        file_suffix: str = "",
        open_files: OpenFiles | None = None,
    ) -> None:
        self.base_offset = base_offset
        self.prefix = filename_prefix(directory, base_offset)
        # "" for a live segment; the log cleaner builds replacements as ".cleaned" then ".swap" (cleaner.py).
        self.file_suffix = file_suffix
        self.index_interval_bytes = index_interval_bytes
        self.created_ms = now_ms
        # The .log is open only while it is among the recently used files (open_files.py); the
        # `SegmentFile` owns the descriptor and fetch responses still being sent share it.
        self._open_files = open_files if open_files is not None else unbounded()
        self._file: SegmentFile | None = None
        self._closed = False
        self.size = os.fstat(self._acquire(os.O_RDWR | os.O_CREAT).fd).st_size
        # Written or truncated since its last fsync (as far as we know: a file found on disk may be).
        self._unsynced = self.size > 0
        self.next_offset = base_offset
        self.max_timestamp = _NO_TIMESTAMP
        self.offset_of_max_timestamp = base_offset
        self.first_batch_timestamp = _NO_TIMESTAMP
        self._bytes_since_index_entry = 0
        # offset -> position of the first batch whose last offset is >= it: where a consumer that
        # read up to there fetches next (insertion order, oldest dropped first).
        self._positions: dict[int, int] = {}
        self.offset_index, self.time_index = self._open_indexes(max_index_bytes)
        self.txn_index = TransactionIndex(self.prefix + TXN_INDEX_SUFFIX + file_suffix, base_offset)

    @property
    def file(self) -> SegmentFile | None:
        """The open file fetch slices of this segment refer to (None once closed)."""
        return None if self._closed else self._acquire()

    def _acquire(self, flags: int = os.O_RDWR) -> SegmentFile:
        """The open `.log` (reopened if the bound evicted it); hold it for as long as its fd is used."""
        file = self._file
        if file is not None:
            self._open_files.touch(self)
            return file
        if self._closed:
            raise OSError(f"{self.log_path}: segment is closed")
        file = self._file = SegmentFile(self._open_files.open(self, self.log_path, flags))
        return file

    def release_file(self) -> None:
        """Drop this segment's reference to its descriptor (evicted by the bound, closed or deleted).

        The file closes now, or once the last fetch slice or scan holding it is done.
        """
        self._file = None

    @property
    def log_path(self) -> str:
        return self.prefix + ".log" + self.file_suffix

    def change_file_suffixes(self, new_suffix: str) -> None:
        """Rename the segment's files to end in ``new_suffix`` (open descriptors stay valid).

        The index files are renamed before the ``.log``: the cleaner's swap protocol treats the
        ``.log`` rename as the step that commits (see cleaner.py).
        """
        old_suffix = self.file_suffix
        for index in (self.offset_index, self.time_index):
            new_path = index.path[: len(index.path) - len(old_suffix)] + new_suffix
            with contextlib.suppress(FileNotFoundError):
                filesystem.replace(index.path, new_path)
            index.path = new_path
        self.txn_index.rename(self.prefix + TXN_INDEX_SUFFIX + new_suffix)
        old_log = self.log_path
        self.file_suffix = new_suffix
        filesystem.replace(old_log, self.log_path)

    def _open_indexes(self, max_index_bytes: int) -> tuple[OffsetIndex, TimeIndex]:
        """Open both indexes; a corrupt or implausible one is emptied so that `needs_rebuild` is set."""
        self.needs_rebuild = False
        suffix = self.file_suffix
        offset_index = OffsetIndex(self.prefix + ".index" + suffix, self.base_offset, max_index_bytes)
        time_index = TimeIndex(self.prefix + ".timeindex" + suffix, self.base_offset, max_index_bytes)
        try:
            offset_index.load()
            time_index.load()
            offset_index.sanity_check(self.size)
            time_index.sanity_check()
        except CorruptIndexError:
            offset_index.reset()
            time_index.reset()
            self.needs_rebuild = True
        # A segment no larger than the index interval never had an entry: a clean shutdown creates no
        # empty index file for it (shutdown.py), and the tail scan at start reads all of it anyway.
        if self.size > self.index_interval_bytes and not os.path.exists(offset_index.path):
            self.needs_rebuild = True
        return offset_index, time_index

    def should_roll(
        self,
        append_size: int,
        append_max_timestamp: int,
        last_offset: int,
        now_ms: int,
        max_segment_bytes: int,
        segment_ms: int,
    ) -> bool:
        """`should_roll` for an append of ``append_size`` bytes ending at ``last_offset`` to this segment."""
        return should_roll(  # positional: this runs once per append
            self.size,
            append_size,
            max_segment_bytes,
            self.first_batch_timestamp,
            append_max_timestamp,
            self.created_ms,
            now_ms,
            segment_ms,
            self.offset_index.is_full or self.time_index.is_full,
            last_offset - self.base_offset,
        )

    # -- append -----------------------------------------------------------------------------------
    def append(self, data: bytes | bytearray | memoryview, batches: Sequence[BatchSpan]) -> None:
        """Write ``data`` (whole batches with offsets assigned) at the end and index them.

        Raises:
            OSError: the write failed (a full disk); the file is cut back to its previous size, so
                no partial batch is left behind, and nothing was indexed.
        """
        fd = self._acquire().fd
        self._unsynced = True
        size, length = self.size, len(data)
        if length >= _PREALLOCATE_FROM:
            preallocate(fd, size, length)  # best effort; a full disk fails the write
        try:
            _pwrite_all(fd, data, size)
        except OSError:
            with contextlib.suppress(OSError):  # shrinking needs no space; recovery cuts it otherwise
                filesystem.ftruncate(fd, size)  # also frees blocks reserved past it
            raise
        for span in batches:
            self._index_batch(size + span.position, span.last_offset, span.max_timestamp, span.size)
        self._remember(self.next_offset, size)
        self.size = size + length
        self.next_offset = batches[-1].last_offset + 1

    def _index_batch(self, position: int, last_offset: int, max_timestamp: int, size: int) -> None:
        if self.first_batch_timestamp == _NO_TIMESTAMP and position == 0:
            self.first_batch_timestamp = max_timestamp
        if max_timestamp > self.max_timestamp:
            self.max_timestamp = max_timestamp
            self.offset_of_max_timestamp = last_offset
        if self._bytes_since_index_entry > self.index_interval_bytes:
            self.offset_index.append(last_offset, position)
            self.time_index.append(self.max_timestamp, self.offset_of_max_timestamp)
            self._bytes_since_index_entry = 0
        self._bytes_since_index_entry += size

    # -- read -------------------------------------------------------------------------------------
    def read_bytes(self, position: int, length: int) -> bytes:
        return os.pread(self._acquire().fd, length, position)

    def scan(
        self, start_position: int = 0, chunk_bytes: int = _SCAN_CHUNK
    ) -> Iterator[tuple[int, BatchHeader]]:
        """(position, header) of each batch from ``start_position``; header bytes only, chunked preads.

        Raises:
            RecordValidationError: a header is malformed (the caller decides whether that is corruption).
        """
        pos = start_position
        file = self._acquire()  # held across yields: the bound may evict it meanwhile
        while pos + HEADER_SIZE <= self.size:
            chunk = os.pread(file.fd, min(chunk_bytes, self.size - pos), pos)
            offset = 0
            while offset + HEADER_SIZE <= len(chunk):
                header = read_header(chunk, offset)
                if pos + offset + header.size > self.size:
                    return
                yield pos + offset, header
                offset += header.size
            pos += offset

    def _remember(self, offset: int, position: int) -> None:
        positions = self._positions
        positions[offset] = position
        if len(positions) > _POSITIONS_KEPT:
            del positions[next(iter(positions))]

    def batch_position(self, offset: int) -> int | None:
        """Where the first batch whose last offset is >= ``offset`` starts (None: no such batch).

        Consumers fetch where their previous fetch ended, and producers' appends start where the last
        one ended: those positions are remembered, so a sequential reader costs no scan at all.
        """
        position = self._positions.get(offset)
        if position is None:
            found = self.find_batch(offset)
            if found is None:
                return None
            position = found[0]
            self._remember(offset, position)
        return position

    def find_batch(self, offset: int) -> tuple[int, BatchHeader] | None:
        """The first batch whose last offset is >= ``offset`` (the batch containing it, if any)."""
        for position, header in self.scan(self.offset_index.lookup(offset), _LOCATE_CHUNK):
            if header.last_offset >= offset:
                return position, header
        return None

    def read(
        self, start_position: int, max_bytes: int, max_offset_exclusive: int, min_one_batch: bool
    ) -> tuple[FileSlice | None, bool]:
        """Whole batches from ``start_position`` up to ``max_bytes`` that end before ``max_offset_exclusive``.

        Returns the slice of this file holding them (None if there are none) and whether the caller may
        continue into the next segment (the end of this one was reached without hitting either limit).
        With ``min_one_batch`` the first batch is returned whole even when larger than ``max_bytes``.
        No record bytes are read: the limits are found from the offset index and batch headers.
        """
        file = self._acquire()
        end, more = self.size, True
        if max_offset_exclusive < self.next_offset:
            position = self.batch_position(max_offset_exclusive)
            if position is not None:
                end, more = position, False
        available = end - start_position
        if available <= 0:
            return None, more
        if available <= max_bytes:
            return FileSlice(file, start_position, available), more
        cut = self._last_batch_end(start_position, start_position + max(max_bytes, 0))
        if cut == start_position and min_one_batch:
            cut += read_header(self.read_bytes(start_position, HEADER_SIZE)).size
        if cut == start_position:
            return None, False
        return FileSlice(file, start_position, cut - start_position), False

    def _last_batch_end(self, start_position: int, limit: int) -> int:
        """The last batch boundary in ``[start_position, limit]``, counting from ``start_position``.

        Index entries point at batch starts, so the walk starts at the last entry at or below ``limit``.
        The boundary found is remembered as where the reader will fetch next: the base offset of the
        first batch left out starts there (when no batch fits after the index entry, that batch's
        header is the only one read, and the entry says nothing of its base offset).
        """
        end = max(start_position, self.offset_index.floor_position(limit))
        next_offset = -1
        for position, header in self.scan(end, min(_LOCATE_CHUNK, limit - end + HEADER_SIZE)):
            if position + header.size > limit:
                next_offset = header.base_offset  # this batch starts at ``end``
                break
            end = position + header.size
            next_offset = header.next_offset
        if next_offset >= 0:
            self._remember(next_offset, end)
        return end

    def largest_timestamp(self) -> int:
        """The max timestamp, or the file's mtime when the segment holds none (as Kafka, for retention)."""
        if self.max_timestamp >= 0:
            return self.max_timestamp
        try:
            return int(os.stat(self.log_path).st_mtime * 1000)
        except FileNotFoundError:
            return -1

    # -- maintenance ------------------------------------------------------------------------------
    def restore_state(self) -> int:
        """Recompute next offset, max timestamp and index bookkeeping from the indexes plus a tail scan.

        Returns where the last whole batch ends (the file size unless a torn batch or garbage follows).
        """
        last = self.offset_index.last_entry()
        start = end = last[1] if last else 0
        self.next_offset = last[0] + 1 if last else self.base_offset
        time_last = self.time_index.last_entry()
        self.max_timestamp, self.offset_of_max_timestamp = time_last or (_NO_TIMESTAMP, self.base_offset)
        for position, header in self.scan(start):
            self.next_offset = header.next_offset
            end = position + header.size
            if header.max_timestamp > self.max_timestamp:
                self.max_timestamp, self.offset_of_max_timestamp = header.max_timestamp, header.last_offset
        self._bytes_since_index_entry = self.size - start
        self.first_batch_timestamp = _NO_TIMESTAMP
        if self.size >= HEADER_SIZE:
            self.first_batch_timestamp = read_header(self.read_bytes(0, HEADER_SIZE)).max_timestamp
        return end

    def recover(self) -> int:
        """Validate every batch, rebuild the indexes and cut off a torn or corrupt tail.

        Returns the number of bytes truncated.
        """
        self.offset_index.reset()
        self.time_index.reset()
        self._positions.clear()
        self.max_timestamp, self.offset_of_max_timestamp = _NO_TIMESTAMP, self.base_offset
        self.first_batch_timestamp = _NO_TIMESTAMP
        self._bytes_since_index_entry = 0
        valid_end, self.next_offset = 0, self.base_offset
        for position, header in self._scan_valid():
            self._index_batch(position, header.last_offset, header.max_timestamp, header.size)
            valid_end, self.next_offset = position + header.size, header.next_offset
        truncated = self.size - valid_end
        if truncated:
            filesystem.ftruncate(self._acquire().fd, valid_end)
            self._unsynced = True
            self.size = valid_end
        self.offset_index.rewrite()
        self.time_index.rewrite()
        self.needs_rebuild = False
        return truncated

    def _scan_valid(self) -> Iterator[tuple[int, BatchHeader]]:
        """Whole batches with valid header, CRC and increasing offsets; stops at the first bad one."""
        pos, expected = 0, self.base_offset
        file = self._acquire()
        while pos + HEADER_SIZE <= self.size:
            chunk = os.pread(file.fd, min(_RECOVER_CHUNK, self.size - pos), pos)
            offset = 0
            while offset + HEADER_SIZE <= len(chunk):
                try:
                    header = read_header(chunk, offset)
                except RecordValidationError:
                    return
                if offset + header.size > len(chunk):
                    if offset == 0 and pos + header.size <= self.size:
                        chunk = os.pread(file.fd, header.size, pos)  # one batch larger than the chunk
                        continue
                    break
                if not _plausible(header, expected) or compute_crc(chunk, offset, header.size) != header.crc:
                    return
                yield pos + offset, header
                expected = header.next_offset
                offset += header.size
            if offset == 0:
                return
            pos += offset

    def truncate_to(self, offset: int) -> int:
        """Remove every batch whose last offset is >= ``offset``; returns the bytes removed."""
        found = self.find_batch(offset)
        if found is None:
            return 0
        position = found[0]
        removed = self.size - position
        self._positions.clear()
        filesystem.ftruncate(self._acquire().fd, position)
        self._unsynced = True
        self.size = position
        self.offset_index.truncate_to_position(position)
        self.time_index.truncate_to_offset(found[1].base_offset)
        self.txn_index.truncate_to(found[1].base_offset)
        self.restore_state()
        return removed

    def on_become_inactive(self) -> None:
        """Kafka's ``onBecomeInactiveSegment``: make the time index's last entry the segment's max."""
        if self.max_timestamp != _NO_TIMESTAMP:
            self.time_index.append(self.max_timestamp, self.offset_of_max_timestamp)

    def flush(self) -> bool:
        """Write buffered index entries and fsync the files; returns whether a file of the segment was
        created since its last flush (the transaction index, made at the first abort), whose name
        then needs an fsync of the directory.

        fsync covers the file, not the descriptor, so a `.log` the bound closed after its last write
        is reopened to be synced; one not written since its last fsync is not opened at all.
        """
        self.offset_index.flush(fsync=True)
        self.time_index.flush(fsync=True)
        created = self.txn_index.flush()
        if self._unsynced:
            filesystem.fsync(self._acquire().fd)
            self._unsynced = False
        return created

    def mark_synced(self) -> None:
        """The loader found this file durable (below the recovery point, or a clean shutdown)."""
        self._unsynced = False

    def flush_indexes(self) -> None:
        self.offset_index.flush()
        self.time_index.flush()

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._open_files.forget(self)
            self.release_file()
            self.flush_indexes()
        self.txn_index.close()

    def delete(self) -> None:
        self._closed = True
        self._open_files.forget(self)
        self.release_file()
        for path in (self.log_path, self.offset_index.path, self.time_index.path):
            with contextlib.suppress(FileNotFoundError):
                filesystem.unlink(path)
        self.txn_index.delete()

    def __repr__(self) -> str:
        return f"LogSegment(base_offset={self.base_offset}, size={self.size}, next_offset={self.next_offset})"


def _plausible(header: BatchHeader, expected_base: int) -> bool:
    return header.base_offset >= expected_base and header.last_offset_delta >= 0


def _pwrite_all(fd: int, data: bytes | bytearray | memoryview, position: int) -> None:
    written = filesystem.pwrite(fd, data, position)  # all of it, unless a disk is nearly full
    if written == len(data):
        return
    view = memoryview(data)[written:]
    position += written
    while view:
        written = filesystem.pwrite(fd, view, position)
        view = view[written:]
        position += written
