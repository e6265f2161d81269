"""`preallocate(fd, offset, length)`: reserve the blocks an append is about to write, size unchanged.

Linux ``fallocate(fd, FALLOC_FL_KEEP_SIZE, offset, length)``: the blocks are allocated (as unwritten
extents, read as zeros) but the file's size stays where it is, so readers, ``fstat`` and crash recovery
see only the bytes written. Why a log segment wants it: on ext4 (delayed allocation) every 4 KiB block
a ``pwrite`` adds past the end of the file first goes through a per-block reservation of free space
and quota and a delayed-extent insert; ``perf`` showed that as about half of the kernel's time in
``pwrite`` under librdkafka's producer (appends of about 1 MB), more than copying the bytes. One
``fallocate`` for the whole append skips that per-block work (measured alone: 1 GB written in 860 KB
appends over 6 files, 0.22 s of system time without, 0.17-0.19 s with, the ``fallocate`` included).

Only the range about to be written is reserved, so nothing is held past the data and a full disk is
reported exactly as without it: the reservation fails, the ``pwrite`` that follows fails with ENOSPC,
and the segment's rollback (``ftruncate`` to its previous size) frees whatever part was reserved.
After a power loss, a file whose size already covers blocks whose data never reached the disk reads
zeros there, which crash recovery cuts off like any other torn tail.

Best effort: where the call is missing or refused (another OS or C library, a file system without
``fallocate``, a full disk) it returns False and the write allocates as it goes.
"""

from __future__ import annotations

import ctypes
import ctypes.util
from collections.abc import Callable

_FALLOC_FL_KEEP_SIZE = 0x01  # <linux/falloc.h>


def _load() -> Callable[[int, int, int, int], int] | None:
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
        fallocate = libc.fallocate64
    except (OSError, AttributeError):
        return None
    fallocate.argtypes = (ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64)
    fallocate.restype = ctypes.c_int
    call: Callable[[int, int, int, int], int] = fallocate
    return call


_fallocate = _load()


def preallocate(fd: int, offset: int, length: int) -> bool:
    """Reserve blocks for ``[offset, offset + length)`` of ``fd`` without changing its size."""
    if _fallocate is None or length <= 0:
        return False
    return _fallocate(fd, _FALLOC_FL_KEEP_SIZE, offset, length) == 0
