"""log.max.open.files: the LRU of open segment files (storage/open_files.py) and the logs using it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from strom.protocol.records.builder import build_batch
from strom.storage.config import LogConfig
from strom.storage.log_manager import LogManager
from strom.storage.open_files import OpenFiles, default_max_open_files


class _Owner:
    def __init__(self, name: str) -> None:
        self.name = name
        self.released = False

    def release_file(self) -> None:
        self.released = True


def _open_fds() -> set[str]:
    return {os.readlink(f"/proc/self/fd/{fd}") for fd in os.listdir("/proc/self/fd") if _is_link(fd)}


def _is_link(fd: str) -> bool:
    try:
        os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return False
    return True


def test_least_recently_used_file_is_evicted_first(tmp_path: Path) -> None:
    files = OpenFiles(2)
    owners = [_Owner(str(i)) for i in range(3)]
    fds = [files.open(o, str(tmp_path / o.name), os.O_RDWR | os.O_CREAT) for o in owners[:2]]
    files.touch(owners[0])  # owner 1 is now the least recently used
    fds.append(files.open(owners[2], str(tmp_path / "2"), os.O_RDWR | os.O_CREAT))
    assert [o.released for o in owners] == [False, True, False]
    assert len(files) == 2 and files.evictions == 1 and files.opens == 3
    files.forget(owners[0])
    assert len(files) == 1
    for fd in fds:
        os.close(fd)


def test_bound_must_be_positive_and_default_is_derived_from_the_limit() -> None:
    with pytest.raises(ValueError):
        OpenFiles(0)
    assert 64 <= default_max_open_files() <= 8000


def _batch(value: bytes) -> bytes:
    return bytes(build_batch([(None, value, [], 1)]))


def test_many_logs_keep_at_most_the_bound_open_and_reopen_on_use(tmp_path: Path) -> None:
    log_dir = str(tmp_path)
    manager = LogManager([log_dir], LogConfig(), lambda: 1_000_000, max_open_files=4)
    logs = [manager.get_or_create_log(f"t{i}", 0) for i in range(30)]
    for i, lg in enumerate(logs):
        lg.append_as_leader(_batch(b"v%d" % i), leader_epoch=0)
        lg.high_watermark = lg.log_end_offset
    assert len(manager.open_files) == 4
    assert sum(p.endswith(".log") and p.startswith(log_dir) for p in _open_fds()) <= 4
    for i, lg in enumerate(logs):  # every evicted log reopens its segment to be read
        assert b"v%d" % i in lg.read(0, 1 << 20)
    manager.shutdown()
    assert not any(p.startswith(log_dir) for p in _open_fds())
    again = LogManager([log_dir], LogConfig(), lambda: 1_000_000, max_open_files=4)
    for i in range(30):
        reloaded = again.get_log(f"t{i}", 0)
        assert reloaded is not None and reloaded.log_end_offset == 1
        assert b"v%d" % i in reloaded.read(0, 1 << 20)
    assert len(again.open_files) == 4
    again.shutdown()


def test_a_fetch_slice_survives_the_eviction_of_its_file(tmp_path: Path) -> None:
    manager = LogManager([str(tmp_path)], LogConfig(), lambda: 1_000_000, max_open_files=1)
    first = manager.get_or_create_log("a", 0)
    first.append_as_leader(_batch(b"kept"), leader_epoch=0)
    records = first.read_records(0, 1 << 20)  # as a queued fetch response holds it
    second = manager.get_or_create_log("b", 0)  # evicts a-0's file from the bound
    second.append_as_leader(_batch(b"other"), leader_epoch=0)
    assert manager.open_files.evictions >= 1
    assert b"kept" in records.read_bytes()  # the slice still owns the descriptor
    manager.shutdown()
