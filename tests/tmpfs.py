"""A small tmpfs for a test's log dir (the tests run as root), and filling it up: a disk that fails."""

from __future__ import annotations

import contextlib
import errno
import subprocess
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
