"""The simulated disk: a machine crash loses exactly what was never synced; a full or broken disk refuses.

The files are real (in a temporary directory); the disk only remembers what was synced. The last test
runs the production log on it: after a power loss the log recovers to a prefix of what was appended,
never shorter than what it had flushed.
"""

from __future__ import annotations

import errno
import os
import random
import shutil
from pathlib import Path

import pytest

from strom._util import filesystem
from strom.protocol.records.builder import build_batch
from strom.protocol.records.control import ControlType
from strom.sim.disk import PAGE_SIZE, SECTOR_SIZE, SimFileSystem
from strom.storage.config import LogConfig
from strom.storage.log import PartitionLog


def _disk(tmp_path: Path) -> tuple[SimFileSystem, Path]:
    fs = SimFileSystem()
    root = tmp_path / "machine"
    root.mkdir(parents=True)
    fs.add_disk(str(root))
    return fs, root


def _append(path: Path, data: bytes, sync: bool = False) -> None:
    filesystem.write_file(str(path), data, flags=os.O_APPEND, sync=sync)


def test_synced_bytes_survive_a_power_loss_and_unsynced_pages_are_old_new_or_torn(tmp_path: Path) -> None:
    fs, root = _disk(tmp_path)
    path = root / "f"
    durable = bytes(range(256)) * 40  # 10,240 bytes: two whole pages and part of a third
    later = b"\xee" * (5 * PAGE_SIZE)
    outcomes = set()
    for seed in range(40):
        with filesystem.use(fs):
            path.unlink(missing_ok=True)
            _append(path, durable, sync=True)
            filesystem.fsync_dir(str(root))  # its name too
            _append(path, later)
            # Overwrite part of a synced page, unsynced: its old bytes must come back if the page is lost.
            fd = filesystem.open(str(path), os.O_RDWR)
            filesystem.pwrite(fd, b"\x11" * 100, 50)
            os.close(fd)
        fs.crash(fs.disks[0], random.Random(seed))
        after = path.read_bytes()
        new = (durable + later)[:50] + b"\x11" * 100 + (durable + later)[150:]
        assert len(durable) <= len(after) <= len(new)
        for page in range(0, len(after), PAGE_SIZE):
            got = after[page : page + PAGE_SIZE]
            old_page = durable[page : page + PAGE_SIZE].ljust(PAGE_SIZE, b"\0")[: len(got)]
            new_page = new[page : page + PAGE_SIZE][: len(got)]
            cuts = range(0, PAGE_SIZE + 1, SECTOR_SIZE)
            mixes = {k: (new_page[:k] + old_page[k:])[: len(got)] for k in cuts}
            sectors = {k for k, mix in mixes.items() if got == mix}
            assert sectors, f"seed {seed}: page at {page} is neither old, new nor torn at a sector"
            outcomes.add("old" if 0 in sectors else "new" if len(got) <= max(sectors) else "torn")
        assert fs.disks[0].unsynced_files == 0
    assert {"old", "new", "torn"} <= outcomes


def test_fsync_makes_a_file_durable_and_a_process_crash_keeps_everything(tmp_path: Path) -> None:
    fs, root = _disk(tmp_path)
    with filesystem.use(fs):
        _append(root / "synced", b"a" * 9000, sync=True)
        _append(root / "written", b"b" * 9000)
        filesystem.fsync_dir(str(root))  # both names are durable, one file's content is not
    assert fs.disks[0].unsynced_files == 1
    # A process crash is no disk event: the page cache (the real file) keeps the unsynced bytes.
    assert (root / "written").read_bytes() == b"b" * 9000
    fs.crash(fs.disks[0], random.Random(1))
    assert (root / "synced").read_bytes() == b"a" * 9000
    assert len((root / "written").read_bytes()) <= 9000


def test_a_name_is_durable_only_once_its_directory_is_fsynced(tmp_path: Path) -> None:
    fs, root = _disk(tmp_path)
    # After a crash a prefix of the directory's four unsynced changes holds (create x.tmp, rename it
    # over x, unlink old, create new): each prefix's names, and x's content.
    states = {
        0: (("old", "x"), b"first"),
        1: (("old", "x", "x.tmp"), b"first"),
        2: (("old", "x"), b"second"),
        3: (("x",), b"second"),
        4: (("new", "x"), b"second"),
    }
    seen = set()
    for seed in range(30):
        directory = root / f"s{seed}"
        directory.mkdir()
        with filesystem.use(fs):
            filesystem.write_file(str(directory / "old"), b"old", sync=True)
            filesystem.write_file(str(directory / "x"), b"first", sync=True)
            filesystem.fsync_dir(str(directory))
            filesystem.write_file(str(directory / "x.tmp"), b"second", sync=True)
            filesystem.replace(str(directory / "x.tmp"), str(directory / "x"))
            filesystem.unlink(str(directory / "old"))
            filesystem.write_file(str(directory / "new"), b"n", sync=True)
        fs.crash(fs.disks[0], random.Random(seed))
        state = (tuple(sorted(os.listdir(directory))), (directory / "x").read_bytes())
        assert state in states.values(), f"seed {seed}: {state}"
        if (directory / "old").exists():
            assert (directory / "old").read_bytes() == b"old"  # an unlink undone brings the file back
        seen.add(state)
    assert len(seen) == len(states)
    assert fs.disks[0].entries.unsynced == 0
    directory = root / "synced"
    directory.mkdir()
    with filesystem.use(fs):  # syncfs makes every name durable too
        filesystem.write_file(str(directory / "x.tmp"), b"new content", sync=True)
        filesystem.replace(str(directory / "x.tmp"), str(directory / "x"))
        assert filesystem.sync_file_systems([str(root)]) == 1
    fs.crash(fs.disks[0], random.Random(0))
    assert os.listdir(directory) == ["x"]
    assert (directory / "x").read_bytes() == b"new content"


def test_an_unlink_or_rename_in_a_directory_removed_whole_since_is_not_undone(tmp_path: Path) -> None:
    # A partition directory renamed for deletion and removed with its files before a power loss: its
    # files' unsynced unlinks and renames have nothing left to come back into (simulation seed 159).
    fs, root = _disk(tmp_path)
    for seed in range(10):
        directory = root / f"p{seed}"
        directory.mkdir()
        with filesystem.use(fs):
            filesystem.write_file(str(directory / "a.snapshot"), b"a", sync=True)
            filesystem.write_file(str(directory / "b.tmp"), b"b", sync=True)
            filesystem.fsync_dir(str(directory))
            filesystem.unlink(str(directory / "a.snapshot"))
            filesystem.replace(str(directory / "b.tmp"), str(directory / "b"))
        shutil.rmtree(directory)
        fs.crash(fs.disks[0], random.Random(seed))  # raised FileNotFoundError before the fix
        assert not directory.exists()
    assert fs.disks[0].entries.unsynced == 0


def test_an_unsynced_rename_keeps_the_file_s_unsynced_content_with_it(tmp_path: Path) -> None:
    fs, root = _disk(tmp_path)
    sizes = set()
    for seed in range(20):
        with filesystem.use(fs):  # an atomic replace without fsync (write_atomically's durable=False)
            filesystem.write_file(str(root / "x.tmp"), b"new content")
            filesystem.replace(str(root / "x.tmp"), str(root / "x"))
            filesystem.fsync_dir(str(root))
        fs.crash(fs.disks[0], random.Random(seed))
        sizes.add(len((root / "x").read_bytes()))
    assert 0 in sizes  # the new name came through the power loss, its unsynced content did not
    assert 11 in sizes


def test_a_full_disk_refuses_writes_and_a_broken_one_refuses_syncs(tmp_path: Path) -> None:
    fs, root = _disk(tmp_path)
    outside = tmp_path / "elsewhere"
    with filesystem.use(fs):
        _append(root / "f", b"x")
        fs.disks[0].error = errno.ENOSPC
        with pytest.raises(OSError) as full:
            _append(root / "f", b"y")
        assert full.value.errno == errno.ENOSPC
        with pytest.raises(OSError):
            filesystem.write_file(str(root / "new"), b"z")
        _append(outside, b"other disks are not affected")
        fs.disks[0].error = errno.EIO
        fd = filesystem.open(str(root / "f"), os.O_RDWR)
        try:
            with pytest.raises(OSError) as broken:
                filesystem.fsync(fd)
            assert broken.value.errno == errno.EIO
        finally:
            os.close(fd)
        fs.disks[0].error = None
        _append(root / "f", b"y", sync=True)
    assert (root / "f").read_bytes() == b"xy"
    assert not (root / "new").exists()


def test_a_failed_sync_leaves_its_pages_unsynced_though_a_later_sync_succeeds(tmp_path: Path) -> None:
    """Linux's "fsyncgate": the pages a failed write-back dropped are not written by the next sync, so
    a power loss may still lose them, whichever sync (fsync, syncfs) reported success."""
    kept: dict[str, set[bool]] = {"retried": set(), "healthy": set()}
    for seed in range(30):
        for case, whole in kept.items():
            fs, root = _disk(tmp_path / f"{case}-{seed}")
            path = root / "f"
            with filesystem.use(fs):
                _append(path, b"a" * 5000, sync=True)
                filesystem.fsync_dir(str(root))
                _append(path, b"b" * 3 * PAGE_SIZE)
                if case == "retried":
                    fs.disks[0].error = errno.EIO
                    fd = filesystem.open(str(path), os.O_RDWR)
                    try:
                        with pytest.raises(filesystem.SyncFailedError):
                            filesystem.fsync(fd)
                    finally:
                        os.close(fd)
                    fs.disks[0].error = None
                _append(path, b"c", sync=True)  # succeeds
                filesystem.sync_file_systems([str(root)])  # and so does this
            assert fs.disks[0].unsynced_files == (case == "retried")
            fs.crash(fs.disks[0], random.Random(seed))
            after = path.read_bytes()
            assert after[:4096] == b"a" * 4096  # the pages synced before the failure stay
            whole.add(len(after) == 5000 + 3 * PAGE_SIZE + 1 and after.count(b"b") == 3 * PAGE_SIZE)
    assert kept["healthy"] == {True}
    assert False in kept["retried"]


def _batch(n: int) -> bytes:
    return build_batch([(None, f"r{n}".encode() * 40, [], 1_000 + n)])


def test_the_log_recovers_a_prefix_no_shorter_than_what_it_flushed(tmp_path: Path) -> None:
    for seed in range(12):
        fs, root = _disk(tmp_path / f"seed-{seed}")
        directory = str(root / "t-0")
        config = LogConfig(segment_bytes=4_096)
        with filesystem.use(fs):
            log = PartitionLog(directory, config, lambda: 1_000)
            for n in range(60):
                log.append_as_leader(_batch(n), leader_epoch=0)
                if n == 29:
                    log.flush()
            flushed = log.recovery_point
            assert flushed >= 30  # (rolls flush too)
            fs.crash(fs.disks[0], random.Random(seed))  # the process is gone: nothing of `log` runs again
            recovered = PartitionLog(directory, config, lambda: 1_000, recovery_point=flushed)
            end = recovered.log_end_offset
            assert flushed <= end <= 60, f"seed {seed}"
            for n in range(end):
                data = recovered.read(n, 1_000_000, n + 1)
                assert f"r{n}".encode() * 40 in data, f"seed {seed}: offset {n} is not record {n}"
            recovered.close()


def test_a_flushed_log_keeps_its_segments_and_transaction_index_names_through_a_power_loss(
    tmp_path: Path,
) -> None:
    """Every file the recovery point covers has a durable name: a segment made by a roll, and a
    transaction index a segment made at its first abort, long after the segment itself."""
    for seed in range(12):
        fs, root = _disk(tmp_path / f"seed-{seed}")
        directory = str(root / "t-0")
        config = LogConfig(segment_bytes=4_096, flush_messages=1)  # every append flushed
        with filesystem.use(fs):
            log = PartitionLog(directory, config, lambda: 1_000)
            for n in range(40):
                log.append_as_leader(_batch(n), leader_epoch=0)
            transactional = build_batch(
                [(None, b"t", [], 1_000)],
                producer_id=7,
                producer_epoch=0,
                base_sequence=0,
                is_transactional=True,
            )
            log.append_as_leader(transactional, leader_epoch=0)
            log.append_marker(7, 0, ControlType.ABORT, 0, 0)
            end, names = log.log_end_offset, sorted(os.listdir(directory))
            assert any(name.endswith(".txnindex") for name in names)
            fs.crash(fs.disks[0], random.Random(seed))
            assert sorted(n for n in os.listdir(directory) if not n.endswith(".tmp")) == [
                n for n in names if not n.endswith(".tmp")
            ], f"seed {seed}"
            recovered = PartitionLog(directory, config, lambda: 1_000, recovery_point=end)
            assert recovered.log_end_offset == end
            recovered.close()
