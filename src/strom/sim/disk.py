"""A disk that lies the way real ones do: the simulated side of the file-system port.

`SimFileSystem` implements `strom._util.filesystem.FileSystem` for files under the roots of its
simulated disks (one per machine: ``add_disk(root)``); anything else passes straight to the operating
system. The bytes live in real files, which play the page cache: a process sees every write it made,
and a simulated *process* crash keeps them all, as a real one does.

Theory of operation. For each file written since its last ``fsync`` the disk keeps what the platter
holds: the file's durable size and the durable content of every page (4 KiB) overwritten, truncated
away or extended over since then, captured just before its first change. Appended pages past the
durable size need no copy (durably, nothing is there). ``fsync`` of a file, or ``syncfs`` of its file
system, forgets the copy: everything in the page cache is now on the platter.

A simulated *machine* crash (`crash`) replaces each such file by what the platter holds after a power
loss mid-writeback, drawn from the seed page by page: a page is lost (the durable content, zeros past
the durable size), written back, or torn (its first 512-byte sectors new, the rest old). The size is
the durable size, grown to the end of the last written-back page past it; a truncation not yet synced
holds or not. So a crash loses only what was never synced, and recovery sees what a real one would:
a torn tail, zeros where an appended page never reached the disk, an index longer than its log.

A sync the disk refuses (EIO) is the Linux hazard called "fsyncgate": the kernel reports the failed
write-back once and may mark the pages clean though they never reached the platter, so a later sync
succeeds without writing them. The disk keeps what the platter held of each file when its sync
failed (`SimDisk.failed_syncs`), and a later successful sync leaves those pages unsynced: a machine
crash may still lose them, so a broker that retried the sync and moved its recovery point over them
would be caught.

Names are durable only once their directory is fsynced (`strom.sim.dir_entries`): a crash may undo a
file's creation, rename or unlink made since, and does so before it decides the contents.

Faults on demand, per disk: ``error`` (``ENOSPC`` refuses writes, new files and growth; ``EIO`` refuses
writes and syncs, or with ``syncs_only`` syncs alone, as a device whose write-back fails under writes
that still land in the page cache), until cleared; ``slow_s``, a slow disk: each write blocks its caller
that long and each sync ten times that. Blocking is the world's business (`SimFileSystem.stall`: the
simulation stops the calling machine's code for that long, as a thread stuck in the kernel would).
"""

from __future__ import annotations

import errno as errnos
import os
import random
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from strom._util.filesystem import Buffer
from strom._util.syncfs import sync_file_systems as _real_sync_file_systems
from strom.sim.dir_entries import DirectoryEntries

__all__ = ["PAGE_SIZE", "SECTOR_SIZE", "SimDisk", "SimFileSystem"]

PAGE_SIZE = 4096
SECTOR_SIZE = 512


@dataclass(slots=True)
class _Unsynced:
    """What the platter holds of one file written since its last sync."""

    durable_size: int
    pages: dict[int, bytes] = field(default_factory=dict)  # page -> its durable bytes (<= PAGE_SIZE)


@dataclass(slots=True)
class SimDisk:
    root: str
    files: dict[str, _Unsynced] = field(default_factory=dict)
    entries: DirectoryEntries = field(init=False)
    # What the platter held of each file when a sync of it failed: unsynced for good (module docstring).
    failed_syncs: dict[str, _Unsynced] = field(default_factory=dict)
    error: int | None = None  # errno every write (and, for EIO, every sync) fails with
    syncs_only: bool = False  # the error refuses syncs only: a failed write-back (module docstring)
    slow_s: float = 0.0  # how long each write blocks its caller (a sync: ten times that)
    crashes: int = 0
    pages_lost: int = 0
    pages_torn: int = 0

    def __post_init__(self) -> None:
        self.entries = DirectoryEntries(self.root, self._moved, self._dropped)

    def owns(self, path: str) -> bool:
        return path == self.root or path.startswith(self.root + os.sep)

    def _moved(self, old: str, new: str) -> None:
        """What the platter holds of ``old`` (and of every file under it) is now ``new``'s."""
        for held in (self.files, self.failed_syncs):
            for path in [p for p in held if p == old or p.startswith(old + os.sep)]:
                held[new + path[len(old) :]] = held.pop(path)

    def _dropped(self, path: str) -> None:
        self.files.pop(path, None)
        self.failed_syncs.pop(path, None)

    def sync_failed(self, paths: Iterable[str]) -> None:
        """A sync of ``paths`` failed: what they hold unsynced now stays so (module docstring)."""
        for path in paths:
            state = self.files.get(path)
            if state is None:
                continue
            earlier = self.failed_syncs.get(path)
            if earlier is None:
                self.failed_syncs[path] = _Unsynced(state.durable_size, dict(state.pages))
            else:  # the older failure's platter content is still what the platter holds
                earlier.pages = {**state.pages, **earlier.pages}
                earlier.durable_size = min(earlier.durable_size, state.durable_size)

    def synced(self, path: str) -> None:
        """``path`` was synced: the platter holds the page cache's bytes, but those of a failed sync."""
        stuck = self.failed_syncs.get(path)
        if stuck is None:
            self.files.pop(path, None)
        else:
            self.files[path] = _Unsynced(stuck.durable_size, dict(stuck.pages))

    @property
    def unsynced_files(self) -> int:
        return len(self.files)


class SimFileSystem:
    def __init__(self, stall: Callable[[float], None] | None = None) -> None:
        self.disks: list[SimDisk] = []
        self._fds: dict[int, tuple[str, bool, SimDisk]] = {}  # fd -> (path, opened for appends, its disk)
        # Blocks the calling machine for a while (a slow disk); by default nothing blocks.
        self.stall = stall if stall is not None else _no_stall

    def add_disk(self, root: str) -> SimDisk:
        disk = SimDisk(os.path.abspath(root))
        self.disks.append(disk)
        return disk

    def disk_of(self, path: str) -> SimDisk | None:
        path = os.path.abspath(path)
        for disk in self.disks:
            if disk.owns(path):
                return disk
        return None

    # the port ------------------------------------------------------------------------------------------
    def open(self, path: str, flags: int, mode: int = 0o777, /) -> int:
        path = os.path.abspath(os.fspath(path))
        disk = self.disk_of(path)
        if disk is None:
            fd = os.open(path, flags, mode)
            self._fds.pop(fd, None)  # a number a closed file of a disk had
            return fd
        exists = os.path.exists(path)
        if flags & os.O_CREAT and not exists and disk.error is not None and not disk.syncs_only:
            raise OSError(disk.error, os.strerror(disk.error), path)
        if flags & os.O_TRUNC and exists and not os.path.isdir(path):
            self._capture(disk, path, 0, os.path.getsize(path))
        fd = os.open(path, flags, mode)
        if not exists:
            disk.files[path] = _Unsynced(0)  # a new name holds nothing durable yet
            disk.entries.created(path)
        self._fds[fd] = (path, bool(flags & os.O_APPEND), disk)
        return fd

    def pwrite(self, fd: int, data: Buffer, offset: int, /) -> int:
        target = self._target(fd)
        if target is not None:
            disk, path = target
            self._refuse_write(disk, path, errnos.ENOSPC, errnos.EIO)
            self._capture(disk, path, offset, offset + len(data))
            if disk.slow_s:
                self.stall(disk.slow_s)
        return os.pwrite(fd, data, offset)

    def write(self, fd: int, data: Buffer, /) -> int:
        target = self._target(fd)
        if target is not None:
            disk, path = target
            self._refuse_write(disk, path, errnos.ENOSPC, errnos.EIO)
            offset = os.fstat(fd).st_size if self._fds[fd][1] else os.lseek(fd, 0, os.SEEK_CUR)
            self._capture(disk, path, offset, offset + len(data))
            if disk.slow_s:
                self.stall(disk.slow_s)
        return os.write(fd, data)

    def fsync(self, fd: int, /) -> None:
        target = self._target(fd)
        if target is None:
            os.fsync(fd)
            return
        disk, path = target
        if disk.error == errnos.EIO:
            disk.sync_failed([path])
        self._refuse(disk, path, errnos.EIO)
        if disk.slow_s:
            self.stall(10 * disk.slow_s)
        disk.synced(path)  # the platter now holds the page cache's bytes (no real fsync needed)
        disk.entries.synced(path)  # a directory: the names in it are durable

    def ftruncate(self, fd: int, length: int, /) -> None:
        target = self._target(fd)
        if target is not None:
            self._truncating(*target, length)
        os.ftruncate(fd, length)

    def truncate(self, path: str, length: int, /) -> None:
        path = os.path.abspath(path)
        disk = self.disk_of(path)
        if disk is not None:
            self._truncating(disk, path, length)
        os.truncate(path, length)

    def replace(self, src: str, dst: str, /) -> None:
        src, dst = os.path.abspath(src), os.path.abspath(dst)
        disk = self.disk_of(dst)
        kept = disk.entries.keep(dst) if disk is not None and disk.owns(src) else None
        os.replace(src, dst)
        for each in self.disks:
            for held in (each.files, each.failed_syncs):
                for path in [p for p in held if p == dst or p.startswith(dst + os.sep)]:
                    del held[path]  # what the new name replaced is gone (or kept aside, above)
            each._moved(src, dst)
        if disk is not None and disk.owns(src):
            disk.entries.renamed(src, dst, kept)
        for fd, (path, append, disk) in list(self._fds.items()):
            if path == src or path.startswith(src + os.sep):
                self._fds[fd] = (dst + path[len(src) :], append, disk)

    def unlink(self, path: str, /) -> None:
        path = os.path.abspath(path)
        disk = self.disk_of(path)
        if disk is None:
            os.unlink(path)
            return
        kept = disk.entries.keep(path)
        try:
            os.unlink(path)
        except OSError:
            if kept is not None:
                os.replace(kept, path)
                disk._moved(kept, path)
            raise
        disk.files.pop(path, None)
        disk.entries.unlinked(path, kept)

    def sync_file_systems(self, paths: Iterable[str], /) -> int:
        synced = 0
        real = []
        for path in sorted({os.path.abspath(p) for p in paths}):
            disk = self.disk_of(path)
            if disk is None:
                real.append(path)
                continue
            if disk.error == errnos.EIO:
                disk.sync_failed(list(disk.files))
            self._refuse(disk, path, errnos.EIO)
            if disk.slow_s:
                self.stall(10 * disk.slow_s)
            for written in list(disk.files):
                disk.synced(written)
            disk.entries.synced_all()
            synced += 1
        return synced + (_real_sync_file_systems(real) if real else 0)

    # faults ----------------------------------------------------------------------------------------------
    def crash(self, disk: SimDisk, rng: random.Random) -> tuple[int, int]:
        """A power loss: every name and file of ``disk`` becomes what its platter holds (module
        docstring); returns the pages lost and torn by this crash."""
        disk.crashes += 1
        before = disk.pages_lost, disk.pages_torn
        disk.entries.crash(rng)
        for path in sorted(disk.files):
            state = disk.files[path]
            if os.path.isfile(path):
                self._lose(disk, path, state, rng)
        disk.files.clear()
        disk.failed_syncs.clear()  # the platter is all there is now
        return disk.pages_lost - before[0], disk.pages_torn - before[1]

    # internals -------------------------------------------------------------------------------------------
    def _target(self, fd: int) -> tuple[SimDisk, str] | None:
        known = self._fds.get(fd)
        return None if known is None else (known[2], known[0])

    @classmethod
    def _refuse_write(cls, disk: SimDisk, path: str, *errors: int) -> None:
        if not disk.syncs_only:
            cls._refuse(disk, path, *errors)

    @staticmethod
    def _refuse(disk: SimDisk, path: str, *errors: int) -> None:
        if disk.error is not None and disk.error in errors:
            raise OSError(disk.error, os.strerror(disk.error), path)

    def _truncating(self, disk: SimDisk, path: str, length: int) -> None:
        size = os.path.getsize(path)
        if length > size:
            self._refuse_write(disk, path, errnos.ENOSPC)
        self._capture(disk, path, min(length, size), max(length, size))

    @staticmethod
    def _capture(disk: SimDisk, path: str, start: int, end: int) -> None:
        """Keep the durable bytes of the pages in [start, end) before their first change since a sync."""
        state = disk.files.get(path)
        if state is None:
            state = disk.files[path] = _Unsynced(os.path.getsize(path))
        end = min(end, state.durable_size)
        if start >= end:
            return
        missing = [p for p in range(start // PAGE_SIZE, (end - 1) // PAGE_SIZE + 1) if p not in state.pages]
        if not missing:
            return
        with open(path, "rb") as f:  # untouched since the sync: the page cache holds the durable bytes
            for page in missing:
                f.seek(page * PAGE_SIZE)
                state.pages[page] = f.read(min(PAGE_SIZE, state.durable_size - page * PAGE_SIZE))

    @staticmethod
    def _lose(disk: SimDisk, path: str, state: _Unsynced, rng: random.Random) -> None:
        with open(path, "r+b") as f:
            current = f.read()
            size = len(current)
            durable = state.durable_size
            changed = sorted(set(state.pages) | set(range(durable // PAGE_SIZE, -(-size // PAGE_SIZE))))
            fates: dict[int, int] = {}  # page -> bytes of it written back: 0 lost, PAGE_SIZE whole
            for page in changed:
                draw = rng.random()
                if draw < 0.4:
                    fates[page] = 0
                elif draw < 0.8:
                    fates[page] = PAGE_SIZE
                else:
                    fates[page] = rng.randrange(1, PAGE_SIZE // SECTOR_SIZE) * SECTOR_SIZE
            if size >= durable:
                new_size = durable
                for page, kept in fates.items():
                    if kept and page * PAGE_SIZE + kept > durable:
                        new_size = max(new_size, min(size, page * PAGE_SIZE + kept))
            else:
                new_size = size if rng.random() < 0.5 else durable
            for page, kept in fates.items():
                start = page * PAGE_SIZE
                if start >= new_size:
                    continue
                old = state.pages.get(page)
                if old is None:  # unchanged below the durable size, nothing durable past it
                    old = current[start : min(start + PAGE_SIZE, durable)]
                old = old.ljust(PAGE_SIZE, b"\0")
                new = current[start : start + PAGE_SIZE].ljust(PAGE_SIZE, b"\0")
                # Cut by a truncation that did not hold: the old bytes are back.
                written = 0 if start >= size else kept
                image = new[:written] + old[written:]
                if written < PAGE_SIZE:
                    disk.pages_lost += written == 0
                    disk.pages_torn += written > 0
                f.seek(start)
                f.write(image[: new_size - start])
            f.truncate(new_size)


def _no_stall(seconds: float) -> None:
    """A disk with no world around it blocks nobody."""
