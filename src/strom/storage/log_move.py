"""Moving a partition's replica to another log dir of the same broker (AlterReplicaLogDirs, KIP-113).

Kafka copies a replica into a *future* log in the destination dir through a replica fetcher of its own,
then swaps the two. Strom's scheme is simpler and as safe: the partition's files are copied, not
re-fetched, and the swap happens on the event loop, where nothing else touches the log.

1. **Copy** (a worker thread, while the log keeps serving): every file of the partition directory into
   ``<dest>/<topic>-<partition>.<uuid>-future``, noting each source file's identity (inode, size,
   modification time) as it was before its copy. The log may change meanwhile (appends, index entries,
   retention, compaction); whatever changed is copied again in step 2.
2. **Catch up** (on the event loop, the log closed: flushed, its producer snapshot and leader epochs
   written): the files whose identity changed since step 1, the files that are new, the active segment's
   log (appended to in place) and every small file (indexes, snapshots, checkpoints: rewritten in place,
   possibly within one tick of the file system's clock) are copied again; files gone from the source
   are removed from the copy; every file and the directory are fsynced.
3. **Swap**: the copy is renamed ``...-moved`` (complete), the source is renamed ``...-delete``, the
   copy is renamed ``<topic>-<partition>``; each rename is made durable by an fsync of its parent.

A crash at any point leaves exactly one complete replica (`settle_moves`, run before the log dirs are
loaded): a ``-future`` dir is an unfinished copy and removed; a ``-moved`` dir is complete: it becomes
the replica if the source is gone (the crash came after step 3's second rename), else it is removed.
Unlike Kafka, an interrupted move is not resumed after a restart: the replica stays where it was.
"""

from __future__ import annotations

import logging
import os
import shutil
import uuid

from strom._util import filesystem
from strom._util.filesystem import fsync_dir

log = logging.getLogger(__name__)

__all__ = [
    "FUTURE_SUFFIX",
    "MOVED_SUFFIX",
    "copy_changed",
    "future_dir",
    "mark_complete",
    "settle_moves",
]

FUTURE_SUFFIX = "-future"
MOVED_SUFFIX = "-moved"
# Segment logs are append-only and large: after step 1 they are trusted while their identity holds.
# Every other file is small and may be rewritten in place (an index entry, a snapshot): always recopied.
_TRUSTED_SUFFIX = ".log"

Identity = tuple[int, int, int]  # inode, size, modification time (ns)


def future_dir(dest_log_dir: str, partition_dir_name: str) -> str:
    return os.path.join(dest_log_dir, f"{partition_dir_name}.{uuid.uuid4().hex}{FUTURE_SUFFIX}")


def _identity(path: str) -> Identity | None:
    try:
        found = os.stat(path)
    except FileNotFoundError:
        return None
    return found.st_ino, found.st_size, found.st_mtime_ns


def copy_changed(
    source: str,
    target: str,
    copied: dict[str, Identity],
    always: frozenset[str] = frozenset(),
    final: bool = False,
) -> int:
    """Copy into ``target`` the files of ``source`` not yet copied as they are now (``copied``: file name
    -> the identity it had before its last copy, updated here); ``always``: names copied regardless.
    ``final``: also recopy every file but the trusted segment logs, drop files the source no longer has,
    and fsync everything. Returns the bytes copied."""
    os.makedirs(target, exist_ok=True)
    names = set(os.listdir(source))
    done = 0
    for name in sorted(names):
        path = os.path.join(source, name)
        before = _identity(path)
        if before is None or not os.path.isfile(path):
            continue
        trusted = name.endswith(_TRUSTED_SUFFIX) and name not in always
        if copied.get(name) == before and (trusted or not final):
            continue
        try:
            shutil.copyfile(path, os.path.join(target, name))
        except FileNotFoundError:  # deleted meanwhile (retention): the final pass settles it
            copied.pop(name, None)
            continue
        copied[name] = before
        done += before[1]
    if final:
        for name in sorted(set(os.listdir(target)) - names):
            filesystem.unlink(os.path.join(target, name))
            copied.pop(name, None)
        for name in sorted(os.listdir(target)):
            fd = filesystem.open(os.path.join(target, name), os.O_RDONLY)
            try:
                filesystem.fsync(fd)
            finally:
                os.close(fd)
        fsync_dir(target)
    return done


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
