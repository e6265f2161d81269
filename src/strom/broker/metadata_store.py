"""Topic metadata for the single-node (embedded) mode, kept in the first log dir.

Files (all written atomically: temp file, fsync, rename, fsync of the directory):
- `meta.properties`: `version=1`, `cluster.id=...`, `node.id=...`, as Kafka writes it. A log dir written
  by another cluster or broker id is refused at start-up rather than silently mixed.
- `strom-topics.json`: `{"topics": {name: {"topic_id": hex, "partitions": n, "replication_factor": r,
  "configs": {name: value}, "leader_epoch": e}}}`: the topic catalogue as of its last compaction.
  `leader_epoch` is the epoch at which this node leads the topic's partitions (0 until something makes
  leadership change; absent in files written before it existed, meaning 0).
- `strom-topics.journal`: the changes since, one JSON line each, appended and fsynced per change:
  `{"put": name, "topic": {...as above...}}` or `{"delete": name}`. Rewriting the whole catalogue per
  change made creating N topics cost N² (5,000 topics: minutes). Loading applies the journal to the
  catalogue (a torn last line, never acknowledged, is ignored) and, if there was any, compacts: the
  catalogue is rewritten atomically, then the journal emptied; a crash between the two replays changes
  that are already in the catalogue, which is harmless (puts are whole records, deletes of a missing
  name do nothing). The journal is also compacted whenever it grows larger than the catalogue, so each
  change costs amortised constant work.
- `strom-producer-id`: the start of the next producer id block; ids are handed out in blocks (1000 at a
  time) so the file is written once per block, and a crash skips at most the rest of a block.

This is the single node's stand-in for what ZooKeeper holds in a cluster: the local control plane
(`strom.broker.local_control`) reads and writes it.
"""

from __future__ import annotations

import contextlib
import json
import os
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from strom._util.errors import ConfigError

CATALOGUE = "strom-topics.json"
JOURNAL = "strom-topics.journal"
COMPACT_FROM_BYTES = 64 * 1024  # a journal smaller than this is never compacted while running


def atomic_write(path: Path, data: bytes) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


@dataclass(slots=True)
class TopicInfo:
    name: str
    topic_id: bytes
    partitions: int
    replication_factor: int
    configs: dict[str, str] = field(default_factory=dict)
    leader_epoch: int = 0

    def to_json(self) -> dict[str, Any]:
        return {
            "topic_id": self.topic_id.hex(),
            "partitions": self.partitions,
            "replication_factor": self.replication_factor,
            "configs": self.configs,
            "leader_epoch": self.leader_epoch,
        }


def _topic_from_json(name: str, t: dict[str, Any]) -> TopicInfo:
    return TopicInfo(
        name=name,
        topic_id=bytes.fromhex(t["topic_id"]),
        partitions=int(t["partitions"]),
        replication_factor=int(t["replication_factor"]),
        configs=dict(t.get("configs", {})),
        leader_epoch=int(t.get("leader_epoch", 0)),
    )


class LocalMetadataStore:
    def __init__(self, log_dir: str, broker_id: int, cluster_id: str | None) -> None:
        self._catalogue_bytes = self._journal_bytes = 0
        self._dir = Path(log_dir)
        self._dir.mkdir(parents=True, exist_ok=True)
        self.cluster_id = self._load_meta(broker_id, cluster_id)
        self.topics: dict[str, TopicInfo] = self._load_topics()
        self._next_block = self._load_pid_block()

    # meta.properties -------------------------------------------------------------------------------
    def _load_meta(self, broker_id: int, cluster_id: str | None) -> str:
        path = self._dir / "meta.properties"
        if path.exists():
            props = dict(
                line.split("=", 1)
                for line in path.read_text().splitlines()
                if "=" in line and not line.startswith("#")
            )
            stored_id = int(props.get("node.id", props.get("broker.id", "-1")))
            if stored_id != broker_id:
                raise ConfigError(f"{path} belongs to broker {stored_id}, not broker.id={broker_id}")
            stored_cluster = props["cluster.id"]
            if cluster_id is not None and cluster_id != stored_cluster:
                raise ConfigError(f"{path} belongs to cluster {stored_cluster}, not {cluster_id}")
            return stored_cluster
        chosen = cluster_id or uuid.uuid4().hex[:22]
        atomic_write(path, f"version=1\ncluster.id={chosen}\nnode.id={broker_id}\n".encode())
        return chosen

    # topics ----------------------------------------------------------------------------------------
    def _load_topics(self) -> dict[str, TopicInfo]:
        path = self._dir / CATALOGUE
        topics: dict[str, TopicInfo] = {}
        if path.exists():
            data = path.read_bytes()
            self._catalogue_bytes = len(data)
            doc = json.loads(data)
            topics = {name: _topic_from_json(name, t) for name, t in doc["topics"].items()}
        if self._load_journal(topics):
            self.topics = topics
            self._compact()
        return topics

    def _load_journal(self, topics: dict[str, TopicInfo]) -> bool:
        """Apply the journal's changes to ``topics``; returns whether it held any."""
        try:
            lines = (self._dir / JOURNAL).read_bytes().splitlines()
        except FileNotFoundError:
            return False
        for line in lines:
            try:
                change = json.loads(line)
            except ValueError:
                break  # a torn last append: never acknowledged
            if "delete" in change:
                topics.pop(change["delete"], None)
            else:
                topics[change["put"]] = _topic_from_json(change["put"], change["topic"])
        return bool(lines)

    def _compact(self) -> None:
        """Rewrite the catalogue whole, then empty the journal (see the module docstring)."""
        doc = {"topics": {name: t.to_json() for name, t in sorted(self.topics.items())}}
        data = json.dumps(doc, indent=1).encode()
        atomic_write(self._dir / CATALOGUE, data)
        atomic_write(self._dir / JOURNAL, b"")
        self._catalogue_bytes, self._journal_bytes = len(data), 0

    def _journal(self, change: dict[str, Any]) -> None:
        """Append one change durably (compacting when the journal outgrows the catalogue)."""
        if self._journal_bytes > max(self._catalogue_bytes, COMPACT_FROM_BYTES):
            self._compact()
        line = json.dumps(change, separators=(",", ":")).encode() + b"\n"
        fd = os.open(self._dir / JOURNAL, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            written = os.write(fd, line)
            if written != len(line):
                raise OSError(f"short write to {JOURNAL}")
            os.fsync(fd)
        except OSError:
            with contextlib.suppress(OSError):  # no partial line left for the next append to follow
                os.ftruncate(fd, self._journal_bytes)
            raise
        finally:
            os.close(fd)
        self._journal_bytes += len(line)

    def _save_topic(self, name: str) -> None:
        self._journal({"put": name, "topic": self.topics[name].to_json()})

    def create_topic(
        self, name: str, partitions: int, replication_factor: int, configs: dict[str, str]
    ) -> TopicInfo:
        info = TopicInfo(name, uuid.uuid4().bytes, partitions, replication_factor, dict(configs))
        self.topics[name] = info
        try:
            self._save_topic(name)
        except OSError:
            del self.topics[name]  # the catalogue on disk never had it
            raise
        return info

    def delete_topic(self, name: str) -> None:
        self._journal({"delete": name})
        del self.topics[name]

    def set_partitions(self, name: str, partitions: int) -> None:
        info = self.topics[name]
        before, info.partitions = info.partitions, partitions
        try:
            self._save_topic(name)
        except OSError:
            info.partitions = before
            raise

    def set_configs(self, name: str, configs: dict[str, str]) -> None:
        self.topics[name].configs = dict(configs)
        self._save_topic(name)

    # producer ids ----------------------------------------------------------------------------------
    def _load_pid_block(self) -> int:
        path = self._dir / "strom-producer-id"
        return int(path.read_text().strip()) if path.exists() else 0

    def allocate_producer_ids(self, size: int) -> int:
        """Claim the next block of ``size`` producer ids (persisted first); returns its first id."""
        start = self._next_block
        atomic_write(self._dir / "strom-producer-id", str(start + size).encode())
        self._next_block = start + size
        return start

    def topic_configs(self, name: str) -> dict[str, str]:
        info = self.topics.get(name)
        return dict(info.configs) if info is not None else {}
