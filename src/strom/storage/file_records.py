"""`FileRecords`: stored batches named by file ranges, to be sent without being read into memory.

Theory of operation. A fetch copies no record bytes in Python. `PartitionLog.read_records` answers with
slices ``(segment file, position, size)`` of its `.log` files; the codec frames them as opaque
regions (``protocol.codec.encode_response_chunks``) and the broker's network layer hands each slice
to ``os.sendfile``, so the kernel moves the bytes from the page cache to the socket. Where that is
impossible (a TLS connection, tests, tools) `FileRecords.read_bytes` reads them with one ``os.pread``
per slice: the one copy.

Lifetime. A slice outlives the read that made it: a response may wait in a connection's queue while
retention, compaction or a topic deletion removes its segment. Each slice therefore holds the
segment's `SegmentFile`, which owns the descriptor and closes it only when nothing refers to it any
more: the segment drops it on close or delete, a slice when it has been sent and freed (CPython frees
an object, and so closes the file, as soon as the last reference goes; there are no reference cycles
here). Linux keeps an unlinked file's data readable through an open descriptor, so a queued response
still sends exactly the bytes that were read. Truncation is different: a follower cutting its log
after a leader change can shorten the file under a queued slice; `read_bytes` then raises and the
network layer, seeing ``sendfile`` stop short, closes that connection (the client refetches).
"""

from __future__ import annotations

import contextlib
import os
from typing import NamedTuple

from strom.protocol.codec import RecordsRegion


class SegmentFile:
    """An open `.log` descriptor shared by its segment and the `FileRecords` slices still to be sent."""

    __slots__ = ("fd",)

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def __del__(self) -> None:
        with contextlib.suppress(OSError):
            os.close(self.fd)


class FileSlice(NamedTuple):
    file: SegmentFile
    position: int
    size: int


class TruncatedFileError(OSError):
    """A slice's file is now shorter than when the slice was made (the log was truncated meanwhile)."""


class FileRecords(RecordsRegion):
    """Whole (and possibly one trailing partial) stored batches, as file slices in log order."""

    __slots__ = ("size", "slices")

    def __init__(self, slices: list[FileSlice]) -> None:
        self.slices = slices
        self.size = sum(s.size for s in slices)

    def __len__(self) -> int:
        return self.size

    def read_bytes(self) -> bytes:
        """The bytes, read with one ``pread`` per slice.

        Raises:
            TruncatedFileError: a file ended before its slice did.
        """
        parts = []
        for file, position, size in self.slices:
            data = os.pread(file.fd, size, position)
            if len(data) != size:
                raise TruncatedFileError(f"read {len(data)} of {size} bytes at {position}: truncated")
            parts.append(data)
        return parts[0] if len(parts) == 1 else b"".join(parts)

    def __repr__(self) -> str:
        return f"FileRecords(size={self.size}, slices={len(self.slices)})"


EMPTY_RECORDS = FileRecords([])
