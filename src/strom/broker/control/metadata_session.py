"""This broker's session on the metadata store, and the writes it makes there outside the controller.

`connect_metadata_store` opens the session (a ZooKeeper session at ``zookeeper.connect``, or the one
handed in: a `strom.cluster.local_store.LocalSession` for a cluster of one or the in-process cluster),
brings in a former single node's files on the first start (`catalogue_import`), reads or creates the
cluster id, pins the first log dir to it (`meta_properties`) and builds the metadata cache it backs,
whose producer-id blocks are claimed in the store. The composition root hands the session to the
control plane (`cluster_member`), the ACL and SCRAM stores, and `ZkIsrStore`.

`ZkIsrStore` is the replica manager's `strom.broker.ports.IsrStore`: a leader's ISR change is a
conditional write of the partition-state znode, then an ISR-change notification for the controller
(Kafka's ZooKeeper-mode ISR writes); a failed log dir is a log-dir event notification for the
controller (replica_manager.py). Each store call runs in a worker thread, so the event loop never
waits for ZooKeeper (or for the local store's fsync).
"""

from __future__ import annotations

import asyncio
import uuid

from strom.broker.config import BrokerConfig
from strom.broker.control.catalogue_import import import_legacy_catalogue
from strom.broker.control.meta_properties import pin_log_dir
from strom.broker.metadata_cache import ClusterMetadataStore
from strom.broker.ports import TopicPartition
from strom.cluster.election import LeaderAndIsr
from strom.cluster.kafka_metadata import KafkaMetadataClient
from strom.cluster.metadata_store import MetadataStore
from strom.cluster.zookeeper_store import ZooKeeperStore

__all__ = ["ZkIsrStore", "connect_metadata_store"]


def connect_metadata_store(
    config: BrokerConfig, store: MetadataStore | None = None, import_legacy: bool = False
) -> tuple[KafkaMetadataClient, ClusterMetadataStore]:
    """Open the metadata-store session (ZooKeeper at ``zookeeper.connect``, unless ``store`` is given)
    and the metadata cache it backs (call inside the event loop)."""
    client = KafkaMetadataClient(
        store
        or ZooKeeperStore(
            str(config.get("zookeeper.connect")),
            int(config.get("zookeeper.session.timeout.ms")),
            asyncio.get_running_loop(),
        )
    )
    client.start()
    if import_legacy:
        import_legacy_catalogue(config.log_dirs[0], config.broker_id, client)
    cluster_id = client.get_or_create_cluster_id(config.get("cluster.id") or uuid.uuid4().hex[:22])
    # meta.properties still pins the log dir to this broker id and cluster.
    pin_log_dir(config.log_dirs[0], config.broker_id, cluster_id)

    def allocate(size: int) -> int:
        return client.allocate_producer_id_block(config.broker_id, size)

    return client, ClusterMetadataStore(cluster_id, client.get_topic_config, allocate)


class ZkIsrStore:
    """ISR changes as conditional writes of the partition state znode, then a notification; each
    kazoo call runs in a worker thread, so the event loop never waits for ZooKeeper."""

    def __init__(self, client: KafkaMetadataClient) -> None:
        self._client = client

    async def write_isr(self, topic: str, partition: int, state: LeaderAndIsr) -> LeaderAndIsr | None:
        return await asyncio.to_thread(self._client.update_partition_state, topic, partition, state)

    async def notify_isr_change(self, partitions: list[TopicPartition]) -> None:
        await asyncio.to_thread(self._client.notify_isr_change, partitions)

    async def notify_log_dir_failure(self, broker_id: int, partitions: list[TopicPartition]) -> None:
        await asyncio.to_thread(self._client.notify_log_dir_failure, broker_id, partitions)
