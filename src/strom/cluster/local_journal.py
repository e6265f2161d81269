"""Persistence of the local metadata store (`strom.cluster.local_store`): a snapshot plus a journal.

Files, in the store's directory (a single node's first log dir):

- ``metadata-store.snapshot``: the persistent nodes as of the last compaction, one JSON document
  ``{"format": 1, "zxid": z, "nodes": [[path, data (base64), version, cversion, ctime_ms, czxid], ...]}``,
  written atomically (temp file, fsync, rename, fsync of the directory).
- ``metadata-store.journal``: every committed write since, one line each, appended and fsynced before
  the write returns to its caller or fires a watch (as durable as a ZooKeeper transaction log with
  ``forceSync``): eight hex digits of the CRC-32 of the JSON text, a space, the JSON text
  ``{"z": zxid, "put": [[node as above], ...], "del": [path, ...]}``, a newline. A put is the node's
  whole image after the write (its parent's too when a child came or went, for the sequence counter).

Loading reads the snapshot, then applies the journal's lines in order up to the first torn one (no
newline, bad CRC or bad JSON: a write the crash interrupted, never acknowledged) and truncates the file
there, so later appends follow the last good line. Puts are whole images and a delete of a missing
path does nothing, so a line replayed over a snapshot that already holds it (a crash between the
snapshot's rename and the journal's truncation) changes nothing.

Compaction: once the journal is larger than both `COMPACT_FROM_BYTES` and the snapshot, the snapshot is
rewritten from the live tree and the journal emptied, so each write costs amortised constant work.

Ephemeral nodes are never persisted: they belong to sessions, and every session ends with the process.
"""

from __future__ import annotations

import base64
import json
import os
import zlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NotRequired, TypedDict, cast

from strom._util import filesystem
from strom._util.filesystem import fsync_dir
from strom._util.json_types import JsonValue

__all__ = ["COMPACT_FROM_BYTES", "JOURNAL", "SNAPSHOT", "MetadataJournal", "PersistedNode"]

SNAPSHOT = "metadata-store.snapshot"
JOURNAL = "metadata-store.journal"
COMPACT_FROM_BYTES = 64 * 1024


@dataclass(slots=True)
class PersistedNode:
    data: bytes
    version: int
    cversion: int
    ctime_ms: int
    czxid: int


def _image(path: str, node: PersistedNode) -> list[Any]:
    data = base64.b64encode(node.data).decode()
    return [path, data, node.version, node.cversion, node.ctime_ms, node.czxid]


def _from_image(image: list[Any]) -> tuple[str, PersistedNode]:
    path, data, version, cversion, ctime_ms, czxid = image
    node = PersistedNode(base64.b64decode(data), int(version), int(cversion), int(ctime_ms), int(czxid))
    return str(path), node


def _line(doc: Mapping[str, JsonValue]) -> bytes:
    text = json.dumps(doc, separators=(",", ":")).encode()
    return b"%08x %s\n" % (zlib.crc32(text), text)


# One journal line: the write's zxid, the node images it put and the paths it deleted.
_JournalEntry = TypedDict(
    "_JournalEntry", {"z": int, "put": NotRequired[list[list[Any]]], "del": NotRequired[list[str]]}
)


def _parse(line: bytes) -> _JournalEntry | None:
    """A journal line's document, None if the line is torn or corrupt."""
    if not line.endswith(b"\n") or len(line) < 10 or line[8:9] != b" ":
        return None
    text = line[9:-1]
    try:
        if int(line[:8], 16) != zlib.crc32(text):
            return None
        doc = json.loads(text)
    except ValueError:
        return None
    return cast(_JournalEntry, doc) if isinstance(doc, dict) else None


class MetadataJournal:
    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = Path(directory)
        self._snapshot = self.directory / SNAPSHOT
        self._journal = self.directory / JOURNAL
        self._fd: int | None = None
        self._journal_bytes = 0
        self._snapshot_bytes = 0

    def load(self) -> tuple[dict[str, PersistedNode], int]:
        """The persisted nodes and the last zxid; opens the journal for appends (truncating a torn tail)."""
        self.directory.mkdir(parents=True, exist_ok=True)
        nodes: dict[str, PersistedNode] = {}
        zxid = 0
        if self._snapshot.exists():
            raw = self._snapshot.read_bytes()
            self._snapshot_bytes = len(raw)
            doc = json.loads(raw)
            zxid = int(doc["zxid"])
            nodes.update(_from_image(image) for image in doc["nodes"])
        good = 0
        if self._journal.exists():
            with open(self._journal, "rb") as fh:
                for line in fh:
                    change = _parse(line)
                    if change is None:
                        break
                    good += len(line)
                    zxid = max(zxid, int(change["z"]))
                    nodes.update(_from_image(image) for image in change.get("put", ()))
                    for path in change.get("del", ()):
                        nodes.pop(path, None)
        self._fd = filesystem.open(self._journal, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        if os.fstat(self._fd).st_size != good:
            filesystem.ftruncate(self._fd, good)
            filesystem.fsync(self._fd)
        self._journal_bytes = good
        return nodes, zxid

    def append(self, zxid: int, puts: Iterable[tuple[str, PersistedNode]], deletes: Iterable[str]) -> None:
        """One committed write, durable when this returns."""
        if self._fd is None:
            raise RuntimeError("journal not loaded")
        line = _line({"z": zxid, "put": [_image(p, n) for p, n in puts], "del": list(deletes)})
        filesystem.write(self._fd, line)
        filesystem.fsync(self._fd)
        self._journal_bytes += len(line)

    def needs_compaction(self) -> bool:
        return self._journal_bytes > max(COMPACT_FROM_BYTES, self._snapshot_bytes)

    def compact(self, nodes: Iterable[tuple[str, PersistedNode]], zxid: int) -> None:
        """Rewrite the snapshot from ``nodes`` (every persistent node), then empty the journal."""
        if self._fd is None:
            raise RuntimeError("journal not loaded")
        raw = json.dumps(
            {"format": 1, "zxid": zxid, "nodes": [_image(p, n) for p, n in nodes]}, separators=(",", ":")
        ).encode()
        tmp = self._snapshot.with_name(SNAPSHOT + ".tmp")
        filesystem.write_file(str(tmp), raw, sync=True)
        filesystem.replace(str(tmp), str(self._snapshot))
        fsync_dir(str(self.directory))
        filesystem.ftruncate(self._fd, 0)
        filesystem.fsync(self._fd)
        self._snapshot_bytes, self._journal_bytes = len(raw), 0

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
