"""Producer-state snapshot files: ``<20-digit offset>.snapshot`` in the partition directory.

A snapshot named ``N.snapshot`` holds the idempotent-producer state after every batch below offset
``N`` (Kafka's ``ProducerStateManager`` snapshot, version 1, byte for byte; big-endian)::

    offset size field
     0      2   version int16               1
     2      4   crc uint32                  CRC-32C of every byte from offset 6 to the end
     6      4   entry count int32
    10     46   per producer, in this order:
                  producer_id int64
                  producer_epoch int16
                  last_sequence int32           sequence of the producer's last batch's last record
                  last_offset int64             offset of that record
                  offset_delta int32            last_sequence - first sequence of that batch
                  timestamp int64               max timestamp of that batch
                  coordinator_epoch int32       -1: no transaction marker seen (no transactions yet)
                  current_txn_first_offset int64  -1: no open transaction

Only each producer's last batch is kept, as in Kafka: a log opened from a snapshot recognises a
retry of that batch, and of every batch appended after the snapshot (their headers are replayed).

Writes go to ``<name>.tmp``, are fsynced, renamed into place and the directory fsynced, so a crash
leaves the old file set or the new one (the loader removes stray ``*.tmp``). A file that is short,
of another version, or fails its CRC raises `CorruptSnapshotError`; the caller deletes it and falls
back to an older snapshot or to replaying batch headers. Pure encode/decode plus thin file helpers.
"""

from __future__ import annotations

import contextlib
import os
import re
import struct
from collections.abc import Iterable
from typing import NamedTuple

import crc32c as _crc32c

from strom._util import filesystem
from strom._util.filesystem import fsync_dir

VERSION = 1
SUFFIX = ".snapshot"
NO_OFFSET = -1
NO_COORDINATOR_EPOCH = -1

_PREFIX = struct.Struct(">hIi")  # version, crc, entry count
_ENTRY = struct.Struct(">qhiqiqiq")
_CRC_START = 6
_FILE = re.compile(r"^(\d{20})\.snapshot$")

assert _ENTRY.size == 46


class CorruptSnapshotError(Exception):
    """A snapshot file that cannot be trusted (truncated, unknown version or CRC mismatch)."""


class SnapshotEntry(NamedTuple):
    producer_id: int
    producer_epoch: int
    last_sequence: int
    last_offset: int
    offset_delta: int
    timestamp: int
    coordinator_epoch: int = NO_COORDINATOR_EPOCH
    current_txn_first_offset: int = NO_OFFSET


def encode(entries: Iterable[SnapshotEntry]) -> bytes:
    """The file contents for ``entries``."""
    rows = list(entries)
    out = bytearray(_PREFIX.size + _ENTRY.size * len(rows))
    for i, row in enumerate(rows):
        _ENTRY.pack_into(out, _PREFIX.size + i * _ENTRY.size, *row)
    _PREFIX.pack_into(out, 0, VERSION, 0, len(rows))
    crc = _crc32c.crc32c(memoryview(out)[_CRC_START:])
    _PREFIX.pack_into(out, 0, VERSION, crc, len(rows))
    return bytes(out)


def decode(data: bytes) -> list[SnapshotEntry]:
    """Parse and verify a snapshot file's contents.

    Raises:
        CorruptSnapshotError: the data is short, of another version, mis-sized or fails its CRC.
    """
    if len(data) < _PREFIX.size:
        raise CorruptSnapshotError(f"snapshot of {len(data)} bytes is shorter than its header")
    version, crc, count = _PREFIX.unpack_from(data, 0)
    if version != VERSION:
        raise CorruptSnapshotError(f"unknown snapshot version {version}")
    computed = _crc32c.crc32c(memoryview(data)[_CRC_START:])
    if computed != crc:
        raise CorruptSnapshotError(f"snapshot CRC mismatch (stored {crc}, computed {computed})")
    if count < 0 or len(data) != _PREFIX.size + count * _ENTRY.size:
        raise CorruptSnapshotError(f"snapshot of {len(data)} bytes cannot hold {count} entries")
    return [SnapshotEntry(*row) for row in _ENTRY.iter_unpack(memoryview(data)[_PREFIX.size :])]


def path_for(directory: str, offset: int) -> str:
    return os.path.join(directory, f"{offset:020d}{SUFFIX}")


def list_offsets(directory: str) -> list[int]:
    """Offsets of the snapshot files in ``directory``, ascending."""
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return []
    return sorted(int(m.group(1)) for m in map(_FILE.match, names) if m)


def write(directory: str, offset: int, entries: Iterable[SnapshotEntry], durable: bool = True) -> None:
    """Atomically write ``<offset>.snapshot``; raises OSError if the disk refuses.

    ``durable=False`` skips both fsyncs, for a caller that syncs the whole file system afterwards
    (the clean shutdown): until then a crash may leave the file missing or torn, and a torn one
    fails its CRC and is deleted when read.
    """
    path = path_for(directory, offset)
    tmp = path + ".tmp"
    try:
        filesystem.write_file(tmp, encode(entries), sync=durable)
        filesystem.replace(tmp, path)
    except OSError:
        with contextlib.suppress(OSError):
            filesystem.unlink(tmp)
        raise
    if durable:
        fsync_dir(directory)


def read(directory: str, offset: int) -> list[SnapshotEntry]:
    """Read and verify ``<offset>.snapshot``.

    Raises:
        CorruptSnapshotError: see `decode`; also for a file that cannot be read.
    """
    try:
        with open(path_for(directory, offset), "rb") as f:
            return decode(f.read())
    except OSError as exc:
        raise CorruptSnapshotError(f"cannot read snapshot {offset}: {exc}") from exc


def delete(directory: str, offset: int) -> None:
    with contextlib.suppress(FileNotFoundError):
        filesystem.unlink(path_for(directory, offset))
