"""The file-system port: every byte the broker writes to its log dirs, and every sync, goes through here.

Theory of operation. The port is the set of module-level functions below (``open``, ``pwrite``,
``write``, ``fsync``, ``ftruncate``, ``truncate``, ``replace``, ``unlink``, ``sync_file_systems``) plus
two helpers built on them (`write_file`, `fsync_dir`). By default the writes *are* the operating
system's calls (``filesystem.pwrite is os.pwrite``) and the syncs wrap them (below), so the produce hot
path pays one module attribute lookup and nothing else. `use` points them at another `FileSystem` for
the length of a ``with`` block: the deterministic simulation's disk, which keeps written-but-unsynced
bytes apart from synced ones so that a simulated machine crash can lose them. Callers therefore always
write ``filesystem.pwrite(...)``, never ``from strom._util.filesystem import pwrite`` (that would keep
the operating system's call).

A failed sync (``fsync``, ``sync_file_systems``) raises `SyncFailedError`, an ``OSError`` with the
errno the call failed with: a failed sync is not a failed write (on Linux the kernel may have marked the
pages clean though they never reached the disk, so the sync must never be retried; the log dir's
failure channel takes the dir offline, or halts the broker, `strom.storage.log_dirs`), and only the
port knows which call failed. The wrapper is one Python frame around a call that waits for the disk.

A test may make ``fsync`` fail with EIO under one directory of a real broker process, through an
environment variable (`strom._util.fsync_faults`); nothing changes without it.

Reads are not part of the port: what a process reads back is the page cache, the same bytes in both
implementations. A file's name (its creation by ``open``, ``replace``, ``unlink``) is durable only
once its directory is fsynced (`fsync_dir`), as POSIX has it; callers that need a name to survive a
machine crash fsync the directory, as Kafka does. Directories made, listed or removed whole
(``makedirs``, ``listdir``, ``rmtree``) are not part of the port: the simulated disk counts a
directory as durable when made.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Protocol, TypeVar

from strom._util import fsync_faults, syncfs

Buffer = bytes | bytearray | memoryview
_A = TypeVar("_A")
_T = TypeVar("_T")

__all__ = [
    "FileSystem",
    "SyncFailedError",
    "fsync",
    "fsync_dir",
    "ftruncate",
    "open",
    "pwrite",
    "replace",
    "sync_file_systems",
    "truncate",
    "unlink",
    "use",
    "write",
    "write_file",
]


class FileSystem(Protocol):
    """What a file-system implementation provides (the operating system's signatures)."""

    def open(self, path: str, flags: int, mode: int = 0o777, /) -> int: ...
    def pwrite(self, fd: int, data: Buffer, offset: int, /) -> int: ...
    def write(self, fd: int, data: Buffer, /) -> int: ...
    def fsync(self, fd: int, /) -> None: ...
    def ftruncate(self, fd: int, length: int, /) -> None: ...
    def truncate(self, path: str, length: int, /) -> None: ...
    def replace(self, src: str, dst: str, /) -> None: ...
    def unlink(self, path: str, /) -> None: ...
    def sync_file_systems(self, paths: Iterable[str], /) -> int: ...


class SyncFailedError(OSError):
    """A sync the disk refused: what it was to make durable may be lost even if a later sync succeeds."""


def _syncing(call: Callable[[_A], _T]) -> Callable[[_A], _T]:
    """``call`` (a sync), its ``OSError`` raised as `SyncFailedError` with the same errno."""

    def sync(arg: _A, /) -> _T:
        try:
            return call(arg)
        except SyncFailedError:
            raise
        except OSError as exc:
            raise SyncFailedError(exc.errno, exc.strerror, exc.filename) from exc

    return sync


open: Callable[..., int] = os.open
pwrite: Callable[[int, Buffer, int], int] = os.pwrite
write: Callable[[int, Buffer], int] = os.write
fsync: Callable[[int], None]
ftruncate: Callable[[int, int], None] = os.ftruncate
truncate: Callable[[str, int], None] = os.truncate
replace: Callable[[str, str], None] = os.replace
unlink: Callable[[str], None] = os.unlink
if os.environ.get(fsync_faults.SWITCH_ENV):  # tests of a failed device only (fsync_faults.py)
    fsync = _syncing(fsync_faults.failing(os.fsync, os.environ[fsync_faults.SWITCH_ENV]))
else:
    fsync = _syncing(os.fsync)
sync_file_systems: Callable[[Iterable[str]], int] = _syncing(syncfs.sync_file_systems)

_NAMES = (
    "open",
    "pwrite",
    "write",
    "fsync",
    "ftruncate",
    "truncate",
    "replace",
    "unlink",
    "sync_file_systems",
)


@contextmanager
def use(fs: FileSystem) -> Iterator[None]:
    """Route the port to ``fs`` until the block ends (then back to what it was)."""
    module = globals()
    previous = {name: module[name] for name in _NAMES}
    module.update({name: getattr(fs, name) for name in _NAMES})
    module.update(fsync=_syncing(fs.fsync), sync_file_systems=_syncing(fs.sync_file_systems))
    try:
        yield
    finally:
        module.update(previous)


def write_file(
    path: str, data: bytes, *, flags: int = os.O_TRUNC, mode: int = 0o644, sync: bool = False
) -> None:
    """Write ``data`` to ``path`` (created if missing; ``flags`` adds O_TRUNC or O_APPEND), then fsync
    it when ``sync``. Raises OSError as the disk does (a full disk may leave part of ``data`` written)."""
    fd = open(path, os.O_WRONLY | os.O_CREAT | flags, mode)
    try:
        view = memoryview(data)
        while view:
            view = view[write(fd, view) :]
        if sync:
            fsync(fd)
    finally:
        os.close(fd)


def fsync_dir(directory: str) -> None:
    """Make the names in ``directory`` durable (a create, rename or unlink in it)."""
    fd = open(directory, os.O_RDONLY)
    try:
        fsync(fd)
    finally:
        os.close(fd)
