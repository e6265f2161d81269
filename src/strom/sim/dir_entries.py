"""Directory entries on a simulated disk: a file's name is durable only once its directory is fsynced.

POSIX makes a file's *content* durable at ``fsync`` of the file, and its *name* (a create, a rename,
an unlink) durable at ``fsync`` of the directory that holds the name; until then a power loss may undo
the change. `DirectoryEntries` keeps, for each directory of one simulated disk, the changes made to
its names through the file-system port since that directory's last fsync, in order. An fsync of the
directory (``fsync_dir``) forgets its changes: they are on the platter. A ``syncfs`` forgets all.

A machine crash (`crash`) keeps, per directory, a prefix of its changes drawn from the seed (a file
system writes one directory's changes back in the order they were made) and undoes the rest, newest
first across the disk: a created file vanishes with its content; a renamed file is back under its old
name and the file it replaced, if any, under the new one; an unlinked file is back. So that a
replaced or unlinked file can come back, the disk keeps a hard link to it, in a directory beside the
disk's root (the same file system), until the change is durable or the crash has decided.

A rename between two directories is a change of both: undone if either directory drops it. Directories
made or removed whole (``os.makedirs``, ``shutil.rmtree``) do not go through the port: their own names
count as durable when made, and a change under a directory removed since is not undone (nothing of it
is left to bring back).

The content of the files is `strom.sim.disk`'s business: the callbacks ``moved(old, new)`` (a file or
directory now lives at another path; paths under a directory move with it) and ``dropped(path)`` (a
file is gone) let it follow the names.
"""

from __future__ import annotations

import itertools
import os
import random
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["DirectoryEntries", "NameChange"]


@dataclass(slots=True, eq=False)
class NameChange:
    """One change of a directory's names not yet durable."""

    seq: int
    kind: str  # "create", "rename" or "unlink"
    path: str  # the name created or unlinked, or a rename's new name
    source: str = ""  # a rename's old name
    kept: str | None = None  # a hard link to the file the change replaced or unlinked


def _under(path: str, top: str) -> bool:
    return path == top or path.startswith(top + os.sep)


class DirectoryEntries:
    def __init__(self, root: str, moved: Callable[[str, str], None], dropped: Callable[[str], None]) -> None:
        self._aside = root.rstrip(os.sep) + ".unlinked"
        self._moved = moved
        self._dropped = dropped
        self.pending: dict[str, list[NameChange]] = {}  # directory -> its changes since its last fsync
        self._seq = itertools.count()
        self.undone = 0  # changes undone by crashes

    @property
    def unsynced(self) -> int:
        return sum(len(changes) for changes in self.pending.values())

    # changes ----------------------------------------------------------------------------------------------
    def created(self, path: str) -> None:
        self._note(NameChange(next(self._seq), "create", path), os.path.dirname(path))

    def keep(self, path: str) -> str | None:
        """Before ``path`` is replaced or unlinked: a hard link to its file, for a crash to bring back
        (None when it is no file: nothing, or a directory)."""
        if not os.path.isfile(path):
            return None
        os.makedirs(self._aside, exist_ok=True)
        kept = os.path.join(self._aside, str(next(self._seq)))
        os.link(path, kept)
        self._moved(path, kept)
        return kept

    def renamed(self, source: str, path: str, kept: str | None) -> None:
        change = NameChange(next(self._seq), "rename", path, source, kept)
        self._note(change, os.path.dirname(path))
        if os.path.dirname(source) != os.path.dirname(path):
            self._note(change, os.path.dirname(source))
        if os.path.isdir(path):  # the changes under a renamed directory follow it
            self._rebase(source, path)

    def unlinked(self, path: str, kept: str | None) -> None:
        self._note(NameChange(next(self._seq), "unlink", path, kept=kept), os.path.dirname(path))

    def _note(self, change: NameChange, directory: str) -> None:
        self.pending.setdefault(directory, []).append(change)

    def _rebase(self, old: str, new: str) -> None:
        for directory in [d for d in self.pending if _under(d, old)]:
            self.pending[new + directory[len(old) :]] = self.pending.pop(directory)
        for changes in self.pending.values():
            for change in changes:
                if _under(change.path, old):
                    change.path = new + change.path[len(old) :]
                if change.source and _under(change.source, old):
                    change.source = new + change.source[len(old) :]

    # durability -------------------------------------------------------------------------------------------
    def synced(self, directory: str) -> None:
        """``directory`` was fsynced: its changes are durable."""
        changes = self.pending.pop(directory, None)
        if changes:
            self._release(changes)

    def synced_all(self) -> None:
        changes = [c for cs in self.pending.values() for c in cs]
        self.pending.clear()
        self._release(changes)

    def _release(self, changes: list[NameChange]) -> None:
        for change in changes:
            if change.kept is not None and not any(change in cs for cs in self.pending.values()):
                self._forget(change.kept)
                change.kept = None

    def _forget(self, kept: str) -> None:
        if os.path.lexists(kept):
            os.unlink(kept)
        self._dropped(kept)

    # a power loss -----------------------------------------------------------------------------------------
    def crash(self, rng: random.Random) -> int:
        """Keep a prefix of each directory's changes, undo the rest (module docstring); how many undone."""
        undone: dict[int, NameChange] = {}
        everything: dict[int, NameChange] = {}
        for directory in sorted(self.pending):
            changes = self.pending[directory]
            kept = rng.randrange(len(changes) + 1)
            for change in changes:
                everything[change.seq] = change
            for change in changes[kept:]:
                undone[change.seq] = change
        self.pending.clear()
        for seq in sorted(undone, reverse=True):
            self._undo(undone[seq])
        for change in everything.values():
            if change.kept is not None:
                self._forget(change.kept)
        self.undone += len(undone)
        return len(undone)

    def _undo(self, change: NameChange) -> None:
        if change.kind == "create":
            if os.path.isfile(change.path):
                os.unlink(change.path)
                self._dropped(change.path)
            return
        if change.kind == "rename":
            if (
                not os.path.exists(change.path)
                or os.path.exists(change.source)
                or not os.path.isdir(os.path.dirname(change.source))
            ):
                return  # removed whole since, or its old name taken again: nothing to undo
            os.replace(change.path, change.source)
            self._moved(change.path, change.source)
        if (
            change.kept is not None
            and not os.path.exists(change.path)
            and os.path.isdir(os.path.dirname(change.path))  # its directory not removed whole since
        ):
            os.replace(change.kept, change.path)
            self._moved(change.kept, change.path)
            change.kept = None
