"""What a broker keeps about itself in its first log dir: ``meta.properties``.

``meta.properties`` holds ``version=1``, ``cluster.id=...``, ``node.id=...``, as Kafka writes it
(atomically: temp file, fsync, rename, fsync of the directory). A log dir written by another cluster or
broker id is refused at start-up rather than silently mixed (`pin_log_dir`).

The cluster's metadata itself (topics, partition states, configs, ACLs, SCRAM users, producer-id
blocks) lives in the metadata store (`strom.cluster.metadata_store`): ZooKeeper in a cluster, the local
store in the first log dir on a single node. The files a single node kept before that
(``strom-topics.json`` and the rest) are imported once by `strom.broker.control.catalogue_import`.
"""

from __future__ import annotations

import uuid
from pathlib import Path

from strom._util.errors import ConfigError
from strom.storage.checkpoint import write_atomically


def pin_log_dir(log_dir: str, broker_id: int, cluster_id: str | None) -> str:
    """The cluster id ``meta.properties`` in ``log_dir`` records (written now if absent: ``cluster_id``,
    or a new one); raises `ConfigError` if the dir belongs to another broker id or cluster."""
    directory = Path(log_dir)
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "meta.properties"
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
    write_atomically(str(path), f"version=1\ncluster.id={chosen}\nnode.id={broker_id}\n")
    return chosen
