"""Failing disks for tests (which run as root): a small tmpfs filled up, or a dir made read-only."""

from __future__ import annotations

import contextlib
import errno
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

TMPFS_BYTES = 64 * 1024 * 1024


@contextlib.contextmanager
def mounted_tmpfs(path: Path, size_bytes: int = TMPFS_BYTES) -> Iterator[Path]:
    """A tmpfs of ``size_bytes`` mounted at ``path`` (made if missing) for the block's duration."""
    path.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size_bytes}", "tmpfs", str(path)], check=True, timeout=30
    )
    try:
        yield path
    finally:
        subprocess.run(["umount", str(path)], check=False, timeout=30)
        subprocess.run(["umount", "-l", str(path)], check=False, timeout=30, capture_output=True)


def fill(path: Path, limit_bytes: int) -> int:
    """Write ``path`` until the filesystem is full (bounded by ``limit_bytes``); bytes written."""
    written = 0
    chunk = b"\0" * (1 << 20)
    with open(path, "wb", buffering=0) as f:
        while written < limit_bytes and chunk:
            try:
                written += f.write(chunk)
            except OSError as exc:
                if exc.errno != errno.ENOSPC:
                    raise
                chunk = chunk[: len(chunk) // 2] if len(chunk) > 512 else b""
    return written


@contextlib.contextmanager
def read_only(path: Path) -> Iterator[Path]:
    """``path`` made read-only under whoever uses it: a read-only bind mount over it, as a file system
    remounted read-only after an error looks (files already open for writing keep their writes;
    creating, renaming and removing files fails with EROFS). Root ignores permission bits, so a chmod
    would not do."""
    subprocess.run(["mount", "--bind", str(path), str(path)], check=True, timeout=30)
    try:
        _remount_read_only(path)
        yield path
    finally:
        if subprocess.run(["umount", str(path)], check=False, timeout=30, capture_output=True).returncode:
            subprocess.run(["umount", "-l", str(path)], check=False, timeout=30, capture_output=True)


def _remount_read_only(path: Path, attempts: int = 100) -> None:
    """Make the new bind mount read-only. The kernel refuses (EBUSY, "mount point is busy") while a
    file opened for writing through that mount is open; a broker writing a checkpoint (a temporary file,
    then a rename) just after the bind holds one for a moment, so a refusal is tried again, bounded."""
    command = ["mount", "-o", "remount,ro,bind", str(path)]
    for _ in range(attempts - 1):
        done = subprocess.run(command, check=False, timeout=30, capture_output=True)
        if done.returncode == 0:
            return
        time.sleep(0.05)
    subprocess.run(command, check=True, timeout=30)
