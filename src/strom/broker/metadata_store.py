"""Topic metadata for the single-node (embedded) mode, kept in the first log dir.

Files (all written atomically: temp file, fsync, rename, fsync of the directory):
- `meta.properties`: `version=1`, `cluster.id=...`, `node.id=...`, as Kafka writes it. A log dir written
  by another cluster or broker id is refused at start-up rather than silently mixed.
- `strom-topics.json`: `{"topics": {name: {"topic_id": hex, "partitions": n, "replication_factor": r,
  "configs": {name: value}, "leader_epoch": e}}}`: the topic catalogue, rewritten whole on every change
  (changes are rare). `leader_epoch` is the epoch at which this node leads the topic's partitions (0 until
  something makes leadership change; absent in files written before it existed, meaning 0).
- `strom-producer-id`: the start of the next producer id block; ids are handed out in blocks (1000 at a
  time) so the file is written once per block, and a crash skips at most the rest of a block.

This is the single node's stand-in for what ZooKeeper holds in a cluster: the local control plane
(`strom.broker.local_control`) reads and writes it.
"""

from __future__ import annotations

import json
import os
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from strom._util.errors import ConfigError


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


class LocalMetadataStore:
    def __init__(self, log_dir: str, broker_id: int, cluster_id: str | None) -> None:
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
        path = self._dir / "strom-topics.json"
        if not path.exists():
            return {}
        doc = json.loads(path.read_text())
        return {
            name: TopicInfo(
                name=name,
                topic_id=bytes.fromhex(t["topic_id"]),
                partitions=int(t["partitions"]),
                replication_factor=int(t["replication_factor"]),
                configs=dict(t.get("configs", {})),
                leader_epoch=int(t.get("leader_epoch", 0)),
            )
            for name, t in doc["topics"].items()
        }

    def _save_topics(self) -> None:
        doc = {"topics": {name: t.to_json() for name, t in sorted(self.topics.items())}}
        atomic_write(self._dir / "strom-topics.json", json.dumps(doc, indent=1).encode())

    def create_topic(
        self, name: str, partitions: int, replication_factor: int, configs: dict[str, str]
    ) -> TopicInfo:
        info = TopicInfo(name, uuid.uuid4().bytes, partitions, replication_factor, dict(configs))
        self.topics[name] = info
        try:
            self._save_topics()
        except OSError:
            del self.topics[name]  # the catalogue on disk never had it
            raise
        return info

    def delete_topic(self, name: str) -> None:
        del self.topics[name]
        self._save_topics()

    def set_partitions(self, name: str, partitions: int) -> None:
        info = self.topics[name]
        before, info.partitions = info.partitions, partitions
        try:
            self._save_topics()
        except OSError:
            info.partitions = before
            raise

    def set_configs(self, name: str, configs: dict[str, str]) -> None:
        self.topics[name].configs = dict(configs)
        self._save_topics()

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
