"""Existing single-node data dirs into the metadata store: the files the embedded mode kept before a single
node became a cluster of one over the local metadata store (`strom.cluster.local_store`).

`import_legacy_catalogue(log_dir, node_id, client)` runs once, on the first start over the metadata
store: when the store has no ``/cluster/id`` yet (every start writes one) and the first log dir holds
files of the former format. It writes into the store what they held, as a controller and the admin
paths would have:

- ``meta.properties``: its ``cluster.id`` becomes ``/cluster/id``.
- ``strom-topics.json`` (``{"topics": {name: {"topic_id": hex, "partitions": n, "replication_factor": r,
  "configs": {...}, "leader_epoch": e}}}``) and ``strom-topics.journal`` (one change per line,
  ``{"put": name, "topic": {...}}`` or ``{"delete": name}``; a torn last line ignored): each topic's
  ``/brokers/topics/<t>`` (every partition on this node, the topic id kept), ``/config/topics/<t>``,
  and each partition's state: leader = this node, ISR = [this node], the stored leader epoch (so the
  log's leader-epoch cache never sees the epoch go back).
- ``strom-producer-id`` (the next free producer id): ``/latest_producer_id_block`` ending just before it.
- ``acls.json`` (a list of bindings in Kafka's ZooKeeper spelling: ``resourceType``, ``name``,
  ``patternType``, ``principal``, ``host``, ``operation``, ``permissionType``): the ``/kafka-acl``
  znodes.
- ``scram-credentials.json`` (``{"users": {name: {mechanism: credential}}}``): ``/config/users/<name>``.

The former files stay where they are (nothing reads them again once ``/cluster/id`` exists), so a
data dir is never left half-converted: an import interrupted by a crash left no ``/cluster/id`` and
runs again, and every write it makes is idempotent (an existing node is overwritten with the same data).
"""

from __future__ import annotations

import functools
import json
import logging
from pathlib import Path
from typing import Required, TypedDict

from strom.acl.model import (
    AccessControlEntry,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
    from_pascal,
)
from strom.cluster import zk_paths as paths
from strom.cluster.acl_znodes import AclZnodeStore
from strom.cluster.election import LeaderAndIsr
from strom.cluster.kafka_metadata import KafkaMetadataClient
from strom.cluster.metadata_store import NodeExistsError
from strom.cluster.zk_paths import PartitionStateDoc, TopicAssignment

log = logging.getLogger(__name__)

__all__ = ["LegacyTopic", "import_legacy_catalogue", "read_legacy_topics"]

CATALOGUE = "strom-topics.json"
JOURNAL = "strom-topics.journal"
PRODUCER_ID = "strom-producer-id"
ACLS = "acls.json"
CREDENTIALS = "scram-credentials.json"


class LegacyTopic(TypedDict, total=False):
    """One topic of the former catalogue, as it was written (the JSON is trusted: strom wrote it)."""

    topic_id: Required[str]  # hex
    partitions: Required[int]
    replication_factor: int
    configs: dict[str, str]
    leader_epoch: int


def read_legacy_topics(log_dir: Path) -> dict[str, LegacyTopic]:
    """The former topic catalogue: the compacted file, then its journal (up to a torn line)."""
    topics: dict[str, LegacyTopic] = {}
    catalogue = log_dir / CATALOGUE
    if catalogue.exists():
        topics.update(json.loads(catalogue.read_bytes())["topics"])
    journal = log_dir / JOURNAL
    if journal.exists():
        for line in journal.read_bytes().splitlines():
            try:
                change = json.loads(line)
            except ValueError:
                break  # a torn last append, never acknowledged
            if "delete" in change:
                topics.pop(change["delete"], None)
            else:
                topics[change["put"]] = change["topic"]
    return topics


def _cluster_id(log_dir: Path) -> str | None:
    path = log_dir / "meta.properties"
    if not path.exists():
        return None
    props = dict(line.split("=", 1) for line in path.read_text().splitlines() if "=" in line)
    return props.get("cluster.id")


def _has_legacy_files(log_dir: Path) -> bool:
    return any((log_dir / name).exists() for name in (CATALOGUE, JOURNAL, PRODUCER_ID, ACLS, CREDENTIALS))


def import_legacy_catalogue(log_dir: str | Path, node_id: int, client: KafkaMetadataClient) -> bool:
    """Import the former single-node files into the store (see the module docstring); whether it did."""
    directory = Path(log_dir)
    store = client.store
    if store.exists(paths.CLUSTER_ID) is not None or not _has_legacy_files(directory):
        return False
    topics = read_legacy_topics(directory)
    for name, topic in sorted(topics.items()):
        _import_topic(client, node_id, name, topic)
    _import_producer_ids(client, node_id, directory)
    acls = _import_acls(client, directory)
    users = _import_credentials(client, directory)
    cluster_id = _cluster_id(directory)
    if cluster_id is not None:
        client.get_or_create_cluster_id(cluster_id)
    log.info(
        "imported the former single-node catalogue of %s: %d topics, %d ACL patterns, %d SCRAM users",
        directory,
        len(topics),
        acls,
        users,
    )
    return True


def _put(client: KafkaMetadataClient, path: str, data: bytes) -> None:
    """Create or overwrite (an interrupted import runs again)."""
    try:
        client.store.create(path, data, make_parents=True)
    except NodeExistsError:
        client.store.set(path, data)


def _import_topic(client: KafkaMetadataClient, node_id: int, name: str, topic: LegacyTopic) -> None:
    count = int(topic["partitions"])
    assignment = TopicAssignment(bytes.fromhex(topic["topic_id"]), {p: [node_id] for p in range(count)})
    _put(client, paths.topic_config_path(name), paths.encode_topic_config(dict(topic.get("configs", {}))))
    _put(client, paths.topic_path(name), assignment.encode())
    state = LeaderAndIsr(node_id, int(topic.get("leader_epoch", 0)), (node_id,), 0)
    doc = PartitionStateDoc(state.leader, state.leader_epoch, state.isr, state.controller_epoch)
    for p in range(count):
        _put(client, paths.partition_state_path(name, p), doc.encode())


def _import_producer_ids(client: KafkaMetadataClient, node_id: int, directory: Path) -> None:
    path = directory / PRODUCER_ID
    if not path.exists():
        return
    next_id = int(path.read_text().strip() or "0")
    if next_id > 0:
        _put(client, paths.PRODUCER_ID_BLOCK, paths.encode_producer_id_block(node_id, 0, next_id - 1))


def _import_acls(client: KafkaMetadataClient, directory: Path) -> int:
    path = directory / ACLS
    if not path.exists():
        return 0
    wanted: dict[ResourcePattern, set[AccessControlEntry]] = {}
    for row in json.loads(path.read_text()):
        pattern = ResourcePattern(
            from_pascal(ResourceType, row["resourceType"]),
            row["name"],
            from_pascal(PatternType, row["patternType"]),
        )
        wanted.setdefault(pattern, set()).add(
            AccessControlEntry(
                row["principal"],
                row["host"],
                from_pascal(AclOperation, row["operation"]),
                from_pascal(AclPermissionType, row["permissionType"]),
            )
        )
    acl_store = AclZnodeStore(client)
    for pattern, entries in wanted.items():
        acl_store.update(pattern, functools.partial(_with, frozenset(entries)))
    return len(wanted)


def _with(
    added: frozenset[AccessControlEntry], current: frozenset[AccessControlEntry]
) -> frozenset[AccessControlEntry]:
    return current | added


def _import_credentials(client: KafkaMetadataClient, directory: Path) -> int:
    path = directory / CREDENTIALS
    if not path.exists():
        return 0
    users: dict[str, dict[str, str]] = json.loads(path.read_text())["users"]
    for user, mechanisms in sorted(users.items()):
        client.update_user_config(user, dict(mechanisms))
    return len(users)
