"""Blocks reserved for a large append: the file's size is only what was written, nothing is held past
it, and a crash that leaves reserved blocks inside the file's size is cut by recovery."""

from __future__ import annotations

import os
from pathlib import Path

from test_storage_support import make_batch

from strom._util.preallocate import preallocate
from strom.protocol.records.batch import iter_headers
from strom.storage.config import LogConfig
from strom.storage.log import PartitionLog

MiB = 1024 * 1024


def _open(path: Path, **config: object) -> PartitionLog:
    return PartitionLog(str(path / "t-0"), LogConfig(**config), lambda: 1_000_000)  # type: ignore[arg-type]


def _allocated(path: str) -> int:
    return os.stat(path).st_blocks * 512


def test_preallocate_reserves_blocks_and_keeps_the_size(tmp_path: Path) -> None:
    path = str(tmp_path / "f")
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        os.write(fd, b"x" * 100)
        assert preallocate(fd, 100, MiB)  # the machine's ext4 (and tmpfs) support it
        assert os.fstat(fd).st_size == 100
        assert _allocated(path) >= MiB
        assert os.pread(fd, 4096, 0) == b"x" * 100  # reads end at the size
        os.ftruncate(fd, 100)  # what a failed append's rollback does: the reservation goes
        assert _allocated(path) <= 4096
    finally:
        os.close(fd)


def test_a_large_append_holds_no_blocks_past_its_data(tmp_path: Path) -> None:
    log = _open(tmp_path)
    for _ in range(3):  # each batch is well over the 64 KiB from which appends reserve their blocks
        log.append_as_leader(make_batch(count=200, value_size=1000), 0)
    segment = log.active_segment
    size = os.stat(segment.log_path).st_size
    assert size == segment.size > 3 * 64 * 1024
    with open(segment.log_path, "rb") as f:
        assert log.read(0, 8 * MiB) == f.read()  # nothing past the written bytes is visible
    assert _allocated(segment.log_path) <= size + 4096  # nothing held past the data
    log.close()


def test_reserved_blocks_exposed_by_a_crash_are_cut_by_recovery(tmp_path: Path) -> None:
    # After a power loss the file's size may cover reserved blocks whose data never reached the disk:
    # they read as zeros. Simulated by extending the file with zeros, as such a crash leaves it.
    log = _open(tmp_path)
    for _ in range(4):
        log.append_as_leader(make_batch(count=5, value_size=100), 0)
    written = log.active_segment.size
    path = log.active_segment.log_path
    with open(path, "r+b") as f:
        f.truncate(written + 64 * 1024)
    reopened = PartitionLog(log.dir, LogConfig(), lambda: 1_000_000, clean_shutdown=False)
    assert os.stat(path).st_size == written
    assert [(h.base_offset, h.last_offset) for _, h in iter_headers(reopened.read(0, MiB))] == [
        (5 * i, 5 * i + 4) for i in range(4)
    ]
    reopened.append_as_leader(make_batch(count=5, value_size=100), 0)
    assert reopened.log_end_offset == 25
    reopened.close()
