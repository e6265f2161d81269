"""Moving a partition's replica to another log dir of the same broker (AlterReplicaLogDirs, KIP-113).

Kafka copies a replica into a *future* log in the destination dir through a replica fetcher of its own,
then swaps the two. Strom's scheme is simpler and as safe: the partition's files are copied, not
re-fetched, and the swap happens on the event loop, where nothing else touches the log.

1. **Copy** (a worker thread, in rounds, while the log keeps serving): every file of the partition
   directory into ``<dest>/<topic>-<partition>.<uuid>-future``, noting each source file's identity
   (inode, size, modification and change times) as it was before its copy, and when the copy started.
   The log may change meanwhile (appends, index entries, retention, compaction); whatever changed is
   copied again by the next round. Then the copy is fsynced (`fsync_copy`, still in the thread).
2. **Catch up** (on the event loop, the log closed: flushed, its producer snapshot and leader epochs
   written): only the delta. A file is trusted unchanged while its identity holds *and* its change
   time was older than its copy by more than the file system's clock tick (`_MARGIN_NS`): a write
   after the copy then necessarily moves the change time, which no ``utime`` can set back, and a new
   file reusing a freed inode gets a fresh one. A segment log that only grew (same inode) gets its new
   tail appended, after the last bytes already copied are found unchanged (a truncation rewrites the
   tail with batches of a newer leader epoch, so those bytes differ and the whole file is copied);
   any other changed file is copied whole. Files gone from the source are removed from the copy; what
   this pass wrote, and the directory, are fsynced.
3. **Swap**: the copy is renamed ``...-moved`` (complete), the source is renamed ``...-delete``, the
   copy is renamed ``<topic>-<partition>``; each rename is made durable by an fsync of its parent. The
   ``-delete`` dir is removed in a worker thread. A rename that fails leaves the partition on whichever
   complete replica exists (`LogManager.finish_move`).

Every byte of the copy is written through the file-system port (strom._util.filesystem), so the
simulated disk sees the copy's unsynced pages as it sees a segment's.

A crash at any point leaves exactly one complete replica (`settle_moves`, run before the log dirs are
loaded): a ``-future`` dir is an unfinished copy and removed; a ``-moved`` dir is complete: it becomes
the replica if the source is gone (the crash came after step 3's second rename), else it is removed.
Unlike Kafka, an interrupted move is not resumed after a restart: the replica stays where it was.
"""

from __future__ import annotations

import logging
import os
import shutil
import time
import uuid

from strom._util import filesystem
from strom._util.filesystem import fsync_dir

log = logging.getLogger(__name__)

__all__ = [
    "FUTURE_SUFFIX",
    "MOVED_SUFFIX",
    "Copied",
    "copy_changed",
    "fsync_copy",
    "future_dir",
    "mark_complete",
    "plan_copy",
    "settle_moves",
]

FUTURE_SUFFIX = "-future"
MOVED_SUFFIX = "-moved"
_APPENDABLE_SUFFIX = ".log"  # segment logs only grow, short of a truncation
# Coarser than any file system's timestamp granularity (FAT's is 2 s; ext4's a clock tick).
_MARGIN_NS = 2_000_000_000
_CHUNK = 1 << 20
# The already-copied bytes compared before a tail is appended: more than a batch header's worth.
_OVERLAP = 64 << 10

Identity = tuple[int, int, int, int]  # inode, size, modification time, change time (ns)
Copied = dict[str, tuple[Identity, int]]  # file name -> its identity before its copy, copy start (ns)

SKIP, APPEND, COPY = "skip", "append", "copy"


def future_dir(dest_log_dir: str, partition_dir_name: str) -> str:
    return os.path.join(dest_log_dir, f"{partition_dir_name}.{uuid.uuid4().hex}{FUTURE_SUFFIX}")


def _identity(path: str) -> Identity | None:
    try:
        found = os.stat(path)
    except FileNotFoundError:
        return None
    return found.st_ino, found.st_size, found.st_mtime_ns, found.st_ctime_ns


def plan_copy(name: str, now: Identity, previous: tuple[Identity, int] | None) -> str:
    """What a file needs: SKIP (its copy is current), APPEND (a grown segment log: its tail, if the
    copied bytes prove unchanged) or COPY (whole)."""
    if previous is None:
        return COPY
    was, started_ns = previous
    if now == was and was[3] < started_ns - _MARGIN_NS:
        return SKIP
    if name.endswith(_APPENDABLE_SUFFIX) and now[0] == was[0] and now[1] >= was[1]:
        return APPEND
    return COPY


def _copy_range(src_fd: int, dst_fd: int, start: int, end: int) -> None:
    position = start
    while position < end:
        chunk = os.pread(src_fd, min(_CHUNK, end - position), position)
        if not chunk:
            break  # truncated meanwhile: the next pass sees its identity changed
        view = memoryview(chunk)
        while view:
            written = filesystem.pwrite(dst_fd, view, position)
            view = view[written:]
            position += written


def _copy_file(path: str, dest: str, how: str, copied_size: int, size: int) -> int:
    """Copy ``path`` into ``dest`` (whole, or its tail past ``copied_size``); returns the bytes copied."""
    src_fd = os.open(path, os.O_RDONLY)
    try:
        if how == APPEND and os.path.exists(dest):
            dst_fd = filesystem.open(dest, os.O_RDWR)
            try:
                start = max(0, copied_size - _OVERLAP)
                if os.pread(src_fd, copied_size - start, start) == os.pread(
                    dst_fd, copied_size - start, start
                ):
                    _copy_range(src_fd, dst_fd, copied_size, size)
                    return size - copied_size
            finally:
                os.close(dst_fd)
        dst_fd = filesystem.open(dest, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            _copy_range(src_fd, dst_fd, 0, size)
        finally:
            os.close(dst_fd)
        return size
    finally:
        os.close(src_fd)


def copy_changed(source: str, target: str, copied: Copied, final: bool = False) -> int:
    """Copy into ``target`` what of ``source`` is not current there (``copied``: see `Copied`, updated
    here). ``final`` (the log closed): also drop files the source no longer has, and fsync what this
    pass wrote and the directory. Returns the bytes copied."""
    os.makedirs(target, exist_ok=True)
    names = set(os.listdir(source))
    done = 0
    written: list[str] = []
    for name in sorted(names):
        path = os.path.join(source, name)
        before = _identity(path)
        if before is None or not os.path.isfile(path):
            continue
        previous = copied.get(name)
        how = plan_copy(name, before, previous)
        if how == SKIP:
            continue
        started_ns = time.time_ns()
        dest = os.path.join(target, name)
        try:
            done += _copy_file(path, dest, how, 0 if previous is None else previous[0][1], before[1])
        except FileNotFoundError:  # deleted meanwhile (retention): the final pass settles it
            copied.pop(name, None)
            continue
        copied[name] = (before, started_ns)
        written.append(dest)
    if final:
        for name in sorted(set(os.listdir(target)) - names):
            filesystem.unlink(os.path.join(target, name))
            copied.pop(name, None)
        for dest in written:
            _fsync_file(dest)
        fsync_dir(target)
    return done


def _fsync_file(path: str) -> None:
    fd = filesystem.open(path, os.O_RDONLY)
    try:
        filesystem.fsync(fd)
    finally:
        os.close(fd)


def fsync_copy(target: str) -> None:
    """Make every file of the copy durable (the worker thread's part of step 1)."""
    for name in sorted(os.listdir(target)):
        _fsync_file(os.path.join(target, name))
    fsync_dir(target)


def mark_complete(future: str) -> str:
    """Step 3's first rename: the copy is complete (durable); returns its new path."""
    moved = future[: -len(FUTURE_SUFFIX)] + MOVED_SUFFIX
    filesystem.replace(future, moved)
    fsync_dir(os.path.dirname(moved))
    return moved


def _partition_name(entry: str, suffix: str) -> str:
    """``<topic>-<partition>`` of ``<topic>-<partition>.<uuid><suffix>``."""
    return entry[: -len(suffix)].rsplit(".", 1)[0]


def settle_moves(log_dirs: list[str]) -> None:
    """Finish or undo the moves a crash interrupted (see the module docstring), before loading."""
    present = {
        entry
        for log_dir in log_dirs
        for entry in os.listdir(log_dir)
        if not entry.endswith((FUTURE_SUFFIX, MOVED_SUFFIX, "-delete"))
    }
    for log_dir in log_dirs:
        for entry in sorted(os.listdir(log_dir)):
            path = os.path.join(log_dir, entry)
            if entry.endswith(FUTURE_SUFFIX):
                log.warning("removing %s: a log dir move that did not finish", path)
                shutil.rmtree(path, ignore_errors=True)
            elif entry.endswith(MOVED_SUFFIX):
                name = _partition_name(entry, MOVED_SUFFIX)
                if name in present:
                    log.warning("removing %s: its move did not reach the swap", path)
                    shutil.rmtree(path, ignore_errors=True)
                else:
                    log.warning("completing the move of %s to %s", name, log_dir)
                    filesystem.replace(path, os.path.join(log_dir, name))
                    fsync_dir(log_dir)
                    present.add(name)
