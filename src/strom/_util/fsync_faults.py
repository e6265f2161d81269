"""A test-only fault behind the file-system port: fsync failing with EIO under one directory.

A failed device answers ``fsync`` with EIO, and no real file system does that on demand, so the tests
of that case (a real broker process, real clients) switch it on from outside. When the process's
environment names a switch file in ``STROM_TEST_FSYNC_EIO``, `filesystem` wraps its ``fsync`` with
`failing`: while the switch file exists, an fsync of a file or directory at or under the directory the
file names (its whole content) raises ``OSError(EIO)``, as the device's would; otherwise, and for every
other path, it is the call it wraps. Without the variable nothing is wrapped (the port stays the
operating system's own call, and production pays nothing).
"""

from __future__ import annotations

import errno
import os
from collections.abc import Callable

__all__ = ["SWITCH_ENV", "failing"]

SWITCH_ENV = "STROM_TEST_FSYNC_EIO"


def _failing_dir(switch: str) -> str | None:
    try:
        with open(switch, encoding="utf-8") as f:
            named = f.read().strip()
    except FileNotFoundError:
        return None
    return os.path.realpath(named) if named else None


def failing(fsync: Callable[[int], None], switch: str) -> Callable[[int], None]:
    """``fsync``, refused with EIO for files under the directory ``switch`` names while it exists."""

    def faulty(fd: int) -> None:
        under = _failing_dir(switch)
        if under is not None:
            path = os.path.realpath(f"/proc/self/fd/{fd}")
            if path == under or path.startswith(under + os.sep):
                raise OSError(errno.EIO, os.strerror(errno.EIO), path)
        fsync(fd)

    return faulty
