"""`OpenFiles`: the bound on how many segment files a broker keeps open (``log.max.open.files``).

Why. A segment's `.log` file used to stay open for as long as the segment existed, so a broker with
N partitions held at least N descriptors and failed with EMFILE somewhere past the process's
``RLIMIT_NOFILE`` (20,000 partitions on a machine whose hard limit is 20,000). Kafka keeps every
segment and index open and asks for ulimits of 100,000 and more; Strom instead keeps only recently
used files open.

Theory of operation. One `OpenFiles` is shared by every log of a `LogManager`. A segment opens its
`.log` through `open`, which registers the segment as the newest entry of a least-recently-used order
(an ``OrderedDict``) after making room: while ``max_open`` files are registered, the oldest entry is
evicted (its owner's `release_file` drops its reference to the descriptor). Each later use of the
descriptor `touch`es the entry (one ``move_to_end``: the hot path for a file already open), and a
segment that is closed or deleted is `forget`-ten. An evicted segment reopens its file on its next
use, by path, so nothing about a segment depends on its file staying open.

Eviction never closes a file under a reader: the descriptor belongs to a `SegmentFile`
(file_records.py), which closes it only when nothing refers to it any more. A fetch response waiting
to be sent with ``sendfile`` holds its slices' `SegmentFile`, and every scan over a segment holds one
for its whole length, so an evicted file stays open until they finish. The bound therefore counts the
files the logs keep open; files held only by in-flight responses come on top, bounded by the
responses queued on connections.

If ``os.open`` fails with EMFILE or ENFILE anyway (sockets and other files used the rest of the
limit), half of the registered files are evicted and the open is tried once more; a second failure
reaches the caller as the ``OSError`` it is (a produce then answers KAFKA_STORAGE_ERROR).

`default_max_open_files` derives the bound from the soft ``RLIMIT_NOFILE`` (after the broker raised it
to the hard limit at start): half of it, leaving the other half to connections, checkpoints, snapshots
and index writes, and at most 8,000: more open files make a reopen (about ten microseconds) rarer
only for brokers that keep more than 8,000 partitions busy at once, and cost kernel memory for all.

Not thread-safe: used from the broker's event loop, like the logs.
"""

from __future__ import annotations

import errno
import resource
from collections import OrderedDict
from typing import Protocol

from strom._util import filesystem

_MIN_DEFAULT = 64
_MAX_DEFAULT = 8_000
_OUT_OF_DESCRIPTORS = (errno.EMFILE, errno.ENFILE)


class FileOwner(Protocol):
    """Something that keeps one file open through `OpenFiles` and can let go of it when told."""

    def release_file(self) -> None: ...


class OpenFiles:
    """A least-recently-used bound on open segment files; see the module docstring."""

    __slots__ = ("_lru", "evictions", "max_open", "opens")

    def __init__(self, max_open: int) -> None:
        if max_open < 1:
            raise ValueError(f"log.max.open.files must be at least 1, not {max_open}")
        self.max_open = max_open
        self._lru: OrderedDict[FileOwner, None] = OrderedDict()
        self.opens = 0  # files opened through this bound (first opens and reopens)
        self.evictions = 0

    def __len__(self) -> int:
        return len(self._lru)

    def open(self, owner: FileOwner, path: str, flags: int) -> int:
        """``os.open(path, flags)`` for ``owner``, evicting the least recently used files first.

        Raises:
            OSError: the open failed, also after evicting half of the open files on EMFILE/ENFILE.
        """
        self.forget(owner)
        while len(self._lru) >= self.max_open:
            self._evict_oldest()
        try:
            fd = filesystem.open(path, flags, 0o644)
        except OSError as e:
            if e.errno not in _OUT_OF_DESCRIPTORS or not self._lru:
                raise
            for _ in range((len(self._lru) + 1) // 2):
                self._evict_oldest()
            fd = filesystem.open(path, flags, 0o644)
        self._lru[owner] = None
        self.opens += 1
        return fd

    def touch(self, owner: FileOwner) -> None:
        """Mark ``owner``'s open file as just used."""
        self._lru.move_to_end(owner)

    def forget(self, owner: FileOwner) -> None:
        """``owner`` released its file itself (closed or deleted): stop counting it."""
        self._lru.pop(owner, None)

    def _evict_oldest(self) -> None:
        owner, _ = self._lru.popitem(last=False)
        self.evictions += 1
        owner.release_file()


def unbounded() -> OpenFiles:
    """A bound that never evicts: for a log used on its own (tools, tests)."""
    return OpenFiles(1 << 62)


def raise_open_files_limit() -> tuple[int, int]:
    """Raise the soft ``RLIMIT_NOFILE`` to the hard limit; returns (old soft, new soft)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard not in (resource.RLIM_INFINITY, soft):
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        except (ValueError, OSError):
            return soft, soft
        return soft, hard
    return soft, soft


def default_max_open_files() -> int:
    """Half of the soft ``RLIMIT_NOFILE``, within [64, 8000] (see the module docstring)."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return _MAX_DEFAULT
    return max(_MIN_DEFAULT, min(soft // 2, _MAX_DEFAULT))
