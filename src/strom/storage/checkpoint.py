"""Checkpoint files in Kafka's text format, written atomically.

Per log directory (one line per partition)::

    recovery-point-offset-checkpoint   offsets below which segments are known to be fsynced
    log-start-offset-checkpoint        log start offsets (moved by retention and DeleteRecords)
    replication-offset-checkpoint      high watermarks

    0                       <- format version
    2                       <- number of entries
    orders 0 1234           <- "topic partition offset"
    orders 1 998

Per partition directory, ``leader-epoch-checkpoint`` maps each leader epoch to the first offset
written in it, with the same version/count header and "epoch start_offset" lines.

Writes go to ``<name>.tmp``, are fsynced, then renamed over the old file and the directory is
fsynced, so a crash leaves either the old or the new file, never a mix (Kafka's
``CheckpointFile``). A file that does not parse raises `CorruptCheckpointError`; callers treat that as
missing, which only costs a longer recovery.
"""

from __future__ import annotations

import os
from bisect import bisect_right
from collections.abc import Iterable, Mapping
from typing import NamedTuple

from strom._util import filesystem

VERSION = 0

RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT = "log-start-offset-checkpoint"
REPLICATION_OFFSET_CHECKPOINT = "replication-offset-checkpoint"
LEADER_EPOCH_CHECKPOINT = "leader-epoch-checkpoint"

UNDEFINED_EPOCH = -1
UNDEFINED_EPOCH_OFFSET = -1


class CorruptCheckpointError(Exception):
    """A checkpoint file exists but does not parse."""


class TopicPartition(NamedTuple):
    topic: str
    partition: int


def write_atomically(path: str, text: str, durable: bool = True, mode: int | None = None) -> None:
    """Replace ``path`` with ``text`` so that readers see the old or the new content after a crash.

    With ``durable=False`` nothing is fsynced: after a crash the file may be the old one, missing
    or empty (for callers that can rebuild its content, and write many at once). ``mode`` sets the
    file's permissions before any content is written (secrets: 0o600).
    """
    tmp = path + ".tmp"
    if mode is not None and os.path.exists(tmp):
        os.chmod(tmp, mode)  # a leftover temporary file keeps its old mode otherwise
    filesystem.write_file(tmp, text.encode(), mode=0o666 if mode is None else mode, sync=durable)
    if mode is not None:
        os.chmod(tmp, mode)  # exactly ``mode``, whatever the umask took from it
    filesystem.replace(tmp, path)
    if durable:
        filesystem.fsync_dir(os.path.dirname(path) or ".")


def _render(lines: list[str]) -> str:
    return "".join(f"{line}\n" for line in [str(VERSION), str(len(lines)), *lines])


def render_leader_epochs(entries: Iterable[EpochEntry]) -> str:
    """The ``leader-epoch-checkpoint`` text of ``entries`` (the format written below)."""
    return _render([f"{e.epoch} {e.start_offset}" for e in entries])


def _parse(path: str) -> list[list[str]] | None:
    """The entry lines split on spaces, or None when the file does not exist."""
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except FileNotFoundError:
        return None
    return _parse_lines(lines, path)


def parse_leader_epochs(text: str, where: str = "leader-epoch-checkpoint") -> list[EpochEntry]:
    """The entries of a ``leader-epoch-checkpoint`` text (as `render_leader_epochs` writes it; a remote
    segment's copy, for instance). Raises CorruptCheckpointError."""
    try:
        return [EpochEntry(int(e[0]), int(e[1])) for e in _parse_lines(text.splitlines(), where)]
    except (ValueError, IndexError):
        raise CorruptCheckpointError(f"{where}: bad entry") from None


def _parse_lines(lines: list[str], path: str) -> list[list[str]]:
    try:
        if int(lines[0]) != VERSION:
            raise CorruptCheckpointError(f"{path}: unknown version {lines[0]}")
        count = int(lines[1])
    except (IndexError, ValueError):
        raise CorruptCheckpointError(f"{path}: bad header") from None
    entries = [line.split() for line in lines[2:] if line.strip()]
    if len(entries) != count:
        raise CorruptCheckpointError(f"{path}: expected {count} entries, found {len(entries)}")
    return entries


def write_offsets(path: str, offsets: Mapping[TopicPartition, int]) -> None:
    lines = [f"{tp.topic} {tp.partition} {offset}" for tp, offset in sorted(offsets.items())]
    write_atomically(path, _render(lines))


def read_offsets(path: str) -> dict[TopicPartition, int]:
    """Entries of an offset checkpoint; empty when the file is missing.

    Raises:
        CorruptCheckpointError: the file exists but is malformed.
    """
    entries = _parse(path)
    if entries is None:
        return {}
    try:
        return {TopicPartition(e[0], int(e[1])): int(e[2]) for e in entries if len(e) == 3}
    except ValueError:
        raise CorruptCheckpointError(f"{path}: bad entry") from None


class EpochEntry(NamedTuple):
    epoch: int
    start_offset: int


class LeaderEpochFileCache:
    """Leader epoch -> start offset for one partition, mirrored in ``leader-epoch-checkpoint``.

    Epochs and start offsets both increase. The log calls `assign` when it appends a batch of a new
    epoch and the truncate methods when it loses data at either end.
    """

    def __init__(self, path: str) -> None:
        self.path = path
        self.entries: list[EpochEntry] = []
        try:
            parsed = _parse(path) or []
            self.entries = [EpochEntry(int(e[0]), int(e[1])) for e in parsed]
        except (CorruptCheckpointError, ValueError, IndexError):
            self.entries = []  # rebuilt from batch headers by the loader
        self._written = list(self.entries)  # what the file holds (as far as this cache knows)

    @property
    def latest_epoch(self) -> int:
        return self.entries[-1].epoch if self.entries else UNDEFINED_EPOCH

    def assign(self, epoch: int, start_offset: int) -> bool:
        """Record that ``epoch`` starts at ``start_offset``; returns whether anything changed."""
        if epoch < 0 or (self.entries and epoch <= self.entries[-1].epoch):
            return False
        # Entries with a start offset at/after the new one were never really used; Kafka drops them too.
        while self.entries and self.entries[-1].start_offset >= start_offset:
            self.entries.pop()
        self.entries.append(EpochEntry(epoch, start_offset))
        return True

    def assign_and_write(self, epoch: int, start_offset: int, durable: bool) -> None:
        """`assign`, then `write` if anything changed; all or nothing: a write the disk refuses leaves
        the entries as they were, so the epoch is assigned again (at the offset of then) on a retry."""
        before = list(self.entries)
        if self.assign(epoch, start_offset):
            try:
                self.write(durable)
            except OSError:
                self.entries = before
                raise

    def epoch_for_offset(self, offset: int) -> int:
        """The epoch whose range holds ``offset`` (largest entry starting at or before it), or -1."""
        i = bisect_right([e.start_offset for e in self.entries], offset) - 1
        return self.entries[i].epoch if i >= 0 else UNDEFINED_EPOCH

    def end_offset_for(self, epoch: int, log_end_offset: int) -> tuple[int, int]:
        """Kafka's ``endOffsetFor``: (largest epoch <= ``epoch``, first offset of the next higher epoch)."""
        if epoch == UNDEFINED_EPOCH or not self.entries:
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if epoch == self.entries[-1].epoch:
            return epoch, log_end_offset
        i = bisect_right([e.epoch for e in self.entries], epoch)
        if i == len(self.entries):
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        higher = self.entries[i]
        if i == 0:
            return epoch, higher.start_offset
        return self.entries[i - 1].epoch, higher.start_offset

    def truncate_from_end(self, end_offset: int) -> None:
        """Drop epochs that start at or after ``end_offset`` (log truncated to it)."""
        kept = [e for e in self.entries if e.start_offset < end_offset]
        if kept != self.entries:
            self.entries = kept
            self.write()

    def truncate_from_start(self, start_offset: int) -> None:
        """Drop epochs entirely below ``start_offset``; the epoch covering it now starts there."""
        i = bisect_right([e.start_offset for e in self.entries], start_offset) - 1
        if i < 0:
            return
        kept = [EpochEntry(self.entries[i].epoch, start_offset), *self.entries[i + 1 :]]
        if kept != self.entries:
            self.entries = kept
            self.write()

    def clear(self) -> None:
        self.entries = []
        self.write()

    def replace(self, entries: Iterable[EpochEntry]) -> None:
        self.entries = list(entries)
        self.write()

    def write(self, durable: bool = True) -> None:
        """Write the checkpoint; ``durable=False`` only while the log holds no batch (see the loader:
        a missing or unreadable checkpoint is rebuilt from batch headers, which carry the epochs)."""
        write_atomically(self.path, render_leader_epochs(self.entries), durable)
        self._written = list(self.entries)

    def write_if_changed(self, durable: bool = True) -> bool:
        """`write` unless the file already holds these entries; returns whether it wrote."""
        if self.entries == self._written:
            return False
        self.write(durable)
        return True
