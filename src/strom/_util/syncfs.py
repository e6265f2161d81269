"""`sync_file_systems(paths)`: make everything written to the file systems holding ``paths`` durable.

Linux ``syncfs(fd)`` writes back every dirty page and inode of one file system and waits for it; since
Linux 5.8 it also reports write-back errors (EIO, ENOSPC) that happened on that file system. One call
replaces thousands of ``fsync`` calls when a caller has written to thousands of files and needs them
all durable at once (the broker's clean shutdown): the kernel writes the pages in one pass and
commits the journal once, instead of once per file.

Where ``syncfs`` is missing (another OS or C library) ``os.sync()`` is used: it syncs every file
system, which is more than needed but equally durable (POSIX ``sync`` may return before the writes
finish; Linux's and the BSDs' wait).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
from collections.abc import Callable, Iterable


def _load() -> Callable[[int], int] | None:
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
        syncfs = libc.syncfs
    except (OSError, AttributeError):
        return None
    syncfs.argtypes = (ctypes.c_int,)
    syncfs.restype = ctypes.c_int
    call: Callable[[int], int] = syncfs
    return call


_syncfs = _load()


def sync_file_systems(paths: Iterable[str]) -> int:
    """Sync the file system of each path once (paths sharing a device share the call); returns the count.

    Raises:
        OSError: the sync failed (a write-back error on that file system).
    """
    if _syncfs is None:
        os.sync()
        return 1
    synced: set[int] = set()
    for path in paths:
        fd = os.open(path, os.O_RDONLY)
        try:
            device = os.fstat(fd).st_dev
            if device in synced:
                continue
            if _syncfs(fd) != 0:
                errno = ctypes.get_errno()
                raise OSError(errno, f"syncfs {path}: {os.strerror(errno)}")
            synced.add(device)
        finally:
            os.close(fd)
    return len(synced)
