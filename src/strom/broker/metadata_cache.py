"""The broker's view of the cluster: what UpdateMetadata last said, plus topic configs.

`ClusterMetadataStore` holds the topics (``topics``, with their configs), the live brokers, the
controller, and per partition the leader, leader epoch, replicas, ISR and offline replicas. Every broker
answers Metadata from this cache. In a ZooKeeper cluster the controller's UpdateMetadata requests fill
it; on a single node its in-process controller hands the same bodies over directly
(`strom.broker.control.single_node`), describing a cluster of one.

A *full* UpdateMetadata (version 0, or ``type`` 2) carries the whole cluster state (internal_specs.py),
so applying it replaces the cache. An *incremental* one (``type`` 1) carries every live broker but only
the partitions that changed since the controller's previous request to this broker, and the topics
deleted since: they are merged in (a topic whose id differs from the cached one was deleted and
created again, so its old partitions go). The controller sends a full one first, after its election and
after each registration of this broker, and a broker's requests arrive in order, so the merged cache
equals the controller's view. Requests from a controller epoch older than the newest seen are ignored,
full or incremental. Topic configs are not in
UpdateMetadata: they are read from ``/config/topics/<t>`` when a topic first appears and re-read when a
``/config/changes`` notification names it (the loader is injected: the metadata store, ZooKeeper in a
cluster or the local store on a single node). Producer ids come in blocks claimed from the metadata
store's ``/latest_producer_id_block`` (unique across the cluster, and across restarts).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from strom.broker.topic_info import TopicInfo
from strom.protocol.messages import (
    UpdateMetadataRequest,
    UpdateMetadataRequestPartitionState,
    UpdateMetadataRequestTopicState,
)

PRODUCER_ID_BLOCK = 1000
#: UpdateMetadata's ``type`` (version 1+; KIP-866's numbering). Version 0 is always full.
INCREMENTAL, FULL = 1, 2


@dataclass(frozen=True, slots=True)
class PartitionMetadata:
    leader: int
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    offline_replicas: tuple[int, ...]


def _partition(s: UpdateMetadataRequestPartitionState) -> PartitionMetadata:
    return PartitionMetadata(
        int(s["leader"]),
        int(s["leader_epoch"]),
        tuple(s["replicas"]),
        tuple(s["isr"]),
        tuple(s["offline_replicas"]),
    )


@dataclass(frozen=True, slots=True)
class LiveBroker:
    node_id: int
    host: str
    port: int
    rack: str | None
    # Listener name -> advertised (host, port); Metadata answers with the listener the client is on.
    endpoints: dict[str, tuple[str, int]] = field(default_factory=dict)

    def endpoint(self, listener: str) -> tuple[str, int] | None:
        if not self.endpoints:
            return self.host, self.port
        return self.endpoints.get(listener)


class ClusterMetadataStore:
    def __init__(
        self,
        cluster_id: str,
        load_configs: Callable[[str], dict[str, str]],
        allocate_producer_ids: Callable[[int], int],
    ) -> None:
        self.cluster_id = cluster_id
        self.topics: dict[str, TopicInfo] = {}
        self.partitions: dict[tuple[str, int], PartitionMetadata] = {}
        self.brokers: dict[int, LiveBroker] = {}
        self.controller_id = -1
        self.controller_epoch = -1
        self._load_configs = load_configs
        # Configs read for topics not listed yet, until the next UpdateMetadata: one store read per
        # topic, not per partition, when a restarted broker is told to lead thousands at once.
        self._unlisted_configs: dict[str, dict[str, str]] = {}
        self._allocate_producer_ids = allocate_producer_ids
        # Topic id -> name (KIP-516 lookups), rebuilt on the first lookup after an UpdateMetadata.
        self._names_by_id: dict[bytes, str] | None = None
        self._next_pid = 0
        self._pid_block_end = 0

    def topic_configs(self, name: str) -> dict[str, str]:
        """A topic's config overrides: from the cache, else from the metadata store (a broker that
        just started is told to lead its partitions before the controller's UpdateMetadata lists them,
        and its logs must get their topic's config, e.g. segment.bytes or cleanup.policy, at once)."""
        info = self.topics.get(name)
        if info is not None:
            return info.configs
        configs = self._unlisted_configs.get(name)
        if configs is None:
            configs = self._unlisted_configs[name] = self._load_configs(name)
        return configs

    def apply_update_metadata(self, body: UpdateMetadataRequest) -> bool:
        """Apply the controller's view (replace, or merge an incremental one); False if the request is
        from a stale controller."""
        epoch = int(body["controller_epoch"])
        if epoch < self.controller_epoch:
            return False
        self.controller_epoch = epoch
        self.controller_id = int(body["controller_id"])
        self._unlisted_configs.clear()
        self._names_by_id = None
        self._apply_brokers(body)
        if int(body.get("type", FULL)) == INCREMENTAL:
            self._merge(body["topics"], body.get("deleted_topics") or [])
            return True
        partitions: dict[tuple[str, int], PartitionMetadata] = {}
        topics: dict[str, TopicInfo] = {}
        for topic in body["topics"]:
            self._add_topic(topic, topics, partitions)
        self.topics = topics
        self.partitions = partitions
        return True

    def _merge(self, changed: list[UpdateMetadataRequestTopicState], deleted: list[str]) -> None:
        for name in deleted:
            self._drop_topic(name)
        for topic in changed:
            name, topic_id = topic["topic_name"], bytes(topic["topic_id"])
            old = self.topics.get(name)
            if old is not None and old.topic_id != topic_id:
                self._drop_topic(name)
                old = None
            states = topic["partition_states"]
            for s in states:
                self.partitions[(name, int(s["partition_index"]))] = _partition(s)
            count = max([old.partitions if old else 0, *(int(s["partition_index"]) + 1 for s in states)])
            if old is not None:
                old.partitions = count
            else:
                rf = len(states[0]["replicas"]) if states else 0
                self.topics[name] = TopicInfo(name, topic_id, count, rf, self._load_configs(name))

    def _drop_topic(self, name: str) -> None:
        info = self.topics.pop(name, None)
        if info is not None:
            for p in range(info.partitions):
                self.partitions.pop((name, p), None)

    def _apply_brokers(self, body: UpdateMetadataRequest) -> None:
        self.brokers = {
            int(b["id"]): LiveBroker(
                int(b["id"]),
                b["host"],
                int(b["port"]),
                b.get("rack"),
                {e["listener"]: (e["host"], int(e["port"])) for e in b.get("endpoints") or ()},
            )
            for b in body["live_brokers"]
        }

    def _add_topic(
        self,
        topic: UpdateMetadataRequestTopicState,
        topics: dict[str, TopicInfo],
        partitions: dict[tuple[str, int], PartitionMetadata],
    ) -> None:
        name = topic["topic_name"]
        states = topic["partition_states"]
        for s in states:
            partitions[(name, int(s["partition_index"]))] = _partition(s)
        old = self.topics.get(name)
        configs = old.configs if old is not None else self._load_configs(name)
        rf = len(states[0]["replicas"]) if states else 0
        topics[name] = TopicInfo(name, bytes(topic["topic_id"]), len(states), rf, configs)

    def topic_name(self, topic_id: bytes) -> str | None:
        """The name of the topic with this id (KIP-516), None if no listed topic has it."""
        if self._names_by_id is None:
            self._names_by_id = {info.topic_id: name for name, info in self.topics.items()}
        return self._names_by_id.get(topic_id)

    def replica_racks(self, topic: str, partition: int) -> frozenset[str]:
        """The racks (``broker.rack``) of a partition's live replicas; empty when none names one."""
        state = self.partitions.get((topic, partition))
        if state is None:
            return frozenset()
        brokers = (self.brokers.get(r) for r in state.replicas)
        return frozenset(b.rack for b in brokers if b is not None and b.rack)

    def partition_leader(self, topic: str, partition: int) -> LiveBroker | None:
        """The live broker leading a partition, if the cache knows one."""
        meta = self.partitions.get((topic, partition))
        if meta is None:
            return None
        return self.brokers.get(meta.leader)

    def read_configs(self, topic: str) -> dict[str, str]:
        """A topic's config overrides as stored (a metadata-store read: call it off the loop)."""
        return self._load_configs(topic)

    def set_configs(self, topic: str, configs: dict[str, str]) -> bool:
        """Take a listed topic's overrides as read by `read_configs`; whether the topic is listed."""
        info = self.topics.get(topic)
        if info is None:
            return False
        info.configs = configs
        return True

    def next_producer_id(self) -> int:
        if self._next_pid >= self._pid_block_end:
            self._next_pid = self._allocate_producer_ids(PRODUCER_ID_BLOCK)
            self._pid_block_end = self._next_pid + PRODUCER_ID_BLOCK
        pid = self._next_pid
        self._next_pid += 1
        return pid
