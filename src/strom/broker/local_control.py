"""The control plane of a single node: a cluster of one, with no ZooKeeper.

An embedded broker runs the same replica manager, metadata cache and request handlers as a member of a
ZooKeeper cluster. What a controller would do for it, this module does in-process:

* it is the active controller of a cluster whose only live broker is this one;
* every partition of every topic in the local catalogue (`LocalMetadataStore`, files in the first log
  dir) is led by this broker with replicas = ISR = {this broker}, at the topic's stored leader epoch;
* on start and after every topic change it builds the LeaderAndIsr and UpdateMetadata bodies a
  controller would send and applies them directly (`ReplicaManager.become_leader_or_follower`,
  `ClusterMetadataStore.apply_update_metadata`), and topic deletion is a StopReplica with delete;
* ISR changes (`LocalIsrStore`) are a compare-and-set on a version kept in memory: with no followers the
  leader never proposes one, but the port is the same as the ZooKeeper-backed one;
* requests that only a remote controller sends (LeaderAndIsr, UpdateMetadata, StopReplica) are refused,
  since nothing else may steer this node's partitions; elections and reassignments are answered as a
  controller of one broker answers them (nothing to elect; only ``[this broker]`` is a valid target).
"""

from __future__ import annotations

import contextlib
import logging

from strom.broker.metadata_cache import ClusterMetadataStore
from strom.broker.metadata_store import LocalMetadataStore, TopicInfo
from strom.broker.ports import Outcome, Reassignments, TopicPartition
from strom.broker.replica_manager import ReplicaManager
from strom.cluster.election import LeaderAndIsr
from strom.protocol.errors import ErrorCode, KafkaError
from strom.protocol.messages import (
    LeaderAndIsrRequest,
    LeaderAndIsrRequestPartitionState,
    LeaderAndIsrResponse,
    StopReplicaRequest,
    StopReplicaResponse,
    UpdateMetadataRequest,
    UpdateMetadataRequestPartitionState,
    UpdateMetadataRequestTopicState,
)

log = logging.getLogger(__name__)

CONTROLLER_EPOCH = 1
ZK_VERSION = 0


class LocalIsrStore:
    """ISR changes of a cluster of one: accepted when the caller read the current version."""

    def __init__(self) -> None:
        self._versions: dict[TopicPartition, int] = {}

    async def write_isr(self, topic: str, partition: int, state: LeaderAndIsr) -> LeaderAndIsr | None:
        current = self._versions.get((topic, partition), ZK_VERSION)
        if state.zk_version != current:
            return None
        self._versions[(topic, partition)] = current + 1
        return LeaderAndIsr(state.leader, state.leader_epoch, state.isr, state.controller_epoch, current + 1)

    async def notify_isr_change(self, partitions: list[TopicPartition]) -> None:
        """No controller to tell: this node is its own controller and already holds the new state."""


class LocalControlPlane:
    def __init__(
        self,
        store: LocalMetadataStore,
        metadata: ClusterMetadataStore,
        replica_manager: ReplicaManager,
        node_id: int,
        rack: str | None,
    ) -> None:
        self._store = store
        self._metadata = metadata
        self._replica_manager = replica_manager
        self._node_id = node_id
        self._rack = rack
        self._host, self._port = "127.0.0.1", 9092  # until start() knows the bound listener
        self._endpoints: tuple[tuple[str, str, int], ...] = ()

    @property
    def metadata(self) -> ClusterMetadataStore:
        return self._metadata

    @property
    def controller_active(self) -> bool:
        return True

    @property
    def zookeeper_state(self) -> str | None:
        return None

    # life cycle ------------------------------------------------------------------------------------
    def start(
        self,
        host: str,
        port: int,
        endpoints: tuple[tuple[str, str, int], ...] = (),
        protocols: tuple[tuple[str, str], ...] = (),
    ) -> None:
        """Lead every partition of the catalogue and publish the metadata (with the bound endpoints)."""
        self._host, self._port = host, port
        self._endpoints = endpoints
        self._become_leader(list(self._store.topics.values()))

    async def controlled_shutdown(self) -> None:
        """Nothing to hand over: no other broker can lead."""

    async def stop(self) -> None:
        """No session or channel to close."""

    # what a controller would send ------------------------------------------------------------------
    def _partition_state(self, info: TopicInfo, index: int) -> LeaderAndIsrRequestPartitionState:
        me = self._node_id
        return {
            "topic_name": info.name,
            "topic_id": info.topic_id,
            "partition_index": index,
            "controller_epoch": CONTROLLER_EPOCH,
            "leader": me,
            "leader_epoch": info.leader_epoch,
            "isr": [me],
            "zk_version": ZK_VERSION,
            "replicas": [me],
            "adding_replicas": [],
            "removing_replicas": [],
            "is_new": False,
        }

    def _metadata_state(self, info: TopicInfo, index: int) -> UpdateMetadataRequestPartitionState:
        me = self._node_id
        return {
            "partition_index": index,
            "controller_epoch": CONTROLLER_EPOCH,
            "leader": me,
            "leader_epoch": info.leader_epoch,
            "isr": [me],
            "zk_version": ZK_VERSION,
            "replicas": [me],
            "offline_replicas": [],
        }

    def _become_leader(self, topics: list[TopicInfo], first_partition: int = 0) -> list[str]:
        """Lead the partitions from ``first_partition`` on; returns what failed ("topic-partition: ERROR")."""
        # First: opening a log reads the topic's configs from the cache. At start the whole cache,
        # after that only the topics that changed.
        self._publish_metadata(None if self._metadata.controller_id < 0 else topics)
        states = [
            self._partition_state(info, p) for info in topics for p in range(first_partition, info.partitions)
        ]
        if states:
            result = self._replica_manager.become_leader_or_follower(
                {
                    "controller_id": self._node_id,
                    "controller_epoch": CONTROLLER_EPOCH,
                    "partition_states": states,
                    "live_leaders": [
                        {"broker_id": self._node_id, "host_name": self._host, "port": self._port}
                    ],
                }
            )
            failed = [
                f"{e['topic_name']}-{e['partition_index']}: {ErrorCode(e['error_code']).name}"
                for e in result["partition_errors"]
                if e["error_code"]
            ]
            for failure in failed:
                log.error("cannot lead %s", failure)
            return failed
        return []

    def _publish_metadata(
        self, changed: list[TopicInfo] | None = None, removed: tuple[str, ...] = ()
    ) -> None:
        """What a controller's UpdateMetadata would say: all of it, or only ``changed``/``removed`` topics."""
        if changed is not None or removed:
            self._metadata.apply_topic_delta([self._topic_state(i) for i in changed or ()], list(removed))
            return
        topics = [self._topic_state(info) for _, info in sorted(self._store.topics.items())]
        update: UpdateMetadataRequest = {
            "controller_id": self._node_id,
            "controller_epoch": CONTROLLER_EPOCH,
            "topics": topics,
            "live_brokers": [
                {
                    "id": self._node_id,
                    "host": self._host,
                    "port": self._port,
                    "rack": self._rack,
                    "endpoints": [{"listener": n, "host": h, "port": p} for n, h, p in self._endpoints],
                }
            ],
        }
        self._metadata.apply_update_metadata(update)

    def _topic_state(self, info: TopicInfo) -> UpdateMetadataRequestTopicState:
        return {
            "topic_name": info.name,
            "topic_id": info.topic_id,
            "partition_states": [self._metadata_state(info, p) for p in range(info.partitions)],
        }

    # topic administration --------------------------------------------------------------------------
    def live_brokers(self) -> dict[int, str | None]:
        return {self._node_id: self._rack}

    def create_topic(self, name: str, assignment: dict[int, list[int]], configs: dict[str, str]) -> TopicInfo:
        """Store the topic and lead its partitions: all of it, or nothing (KAFKA_STORAGE_ERROR).

        Out of descriptors or disk space, the catalogue write or a partition's log may fail; the topic
        is then removed again (catalogue, logs, metadata), so that no half-created topic remains.
        """
        try:
            info = self._store.create_topic(name, len(assignment), len(assignment[0]), configs)
        except OSError as exc:
            raise KafkaError(ErrorCode.KAFKA_STORAGE_ERROR, f"cannot store topic {name}: {exc}") from exc
        failed = self._become_leader([info])
        if failed:
            self._drop_partitions(name, range(info.partitions))
            with contextlib.suppress(OSError):  # the next start then finds no logs for it either
                self._store.delete_topic(name)
            self._publish_metadata(removed=(name,))
            raise KafkaError(ErrorCode.KAFKA_STORAGE_ERROR, f"topic {name} not created: {failed[0]}")
        return info

    def _drop_partitions(self, name: str, partitions: range) -> None:
        """Best effort: remove the logs of partitions that are being rolled back."""
        self._replica_manager.stop_replicas(
            {
                "controller_id": self._node_id,
                "controller_epoch": CONTROLLER_EPOCH,
                "delete_partitions": True,
                "partitions": [{"topic_name": name, "partition_index": p} for p in partitions],
            }
        )

    def topic_assignment(self, name: str) -> dict[int, list[int]] | None:
        info = self._store.topics.get(name)
        return None if info is None else {p: [self._node_id] for p in range(info.partitions)}

    def add_partitions(self, name: str, added: dict[int, list[int]]) -> None:
        info = self._store.topics[name]
        first = info.partitions
        try:
            self._store.set_partitions(name, first + len(added))
        except OSError as exc:
            raise KafkaError(ErrorCode.KAFKA_STORAGE_ERROR, f"cannot store topic {name}: {exc}") from exc
        failed = self._become_leader([info], first_partition=first)
        if failed:  # all or nothing, as create_topic
            self._drop_partitions(name, range(first, first + len(added)))
            with contextlib.suppress(OSError):
                self._store.set_partitions(name, first)
            info.partitions = first  # also if the catalogue write failed: its file still says so
            self._publish_metadata([info])
            raise KafkaError(ErrorCode.KAFKA_STORAGE_ERROR, f"partitions of {name} not added: {failed[0]}")

    def delete_topic(self, name: str) -> None:
        info = self._store.topics[name]
        self._store.delete_topic(name)
        self._replica_manager.stop_replicas(
            {
                "controller_id": self._node_id,
                "controller_epoch": CONTROLLER_EPOCH,
                "delete_partitions": True,
                "partitions": [{"topic_name": name, "partition_index": p} for p in range(info.partitions)],
            }
        )
        self._publish_metadata(removed=(name,))

    def set_topic_configs(self, name: str, configs: dict[str, str]) -> None:
        self._store.set_configs(name, configs)
        self._metadata.reload_configs(name)

    async def wait_for_topic(self, name: str, timeout_ms: int, deleted: bool = False) -> bool:
        return (name in self._metadata.topics) != deleted

    async def wait_for_partitions(self, name: str, count: int, timeout_ms: int) -> bool:
        info = self._metadata.topics.get(name)
        return info is not None and info.partitions >= count

    # requests only a remote controller sends ------------------------------------------------------
    async def leader_and_isr(self, body: LeaderAndIsrRequest) -> LeaderAndIsrResponse:
        return {"error_code": int(ErrorCode.INVALID_REQUEST), "partition_errors": []}

    def stop_replica(self, body: StopReplicaRequest) -> StopReplicaResponse:
        return {"error_code": int(ErrorCode.INVALID_REQUEST), "partition_errors": []}

    def update_metadata(self, body: UpdateMetadataRequest) -> ErrorCode:
        return ErrorCode.INVALID_REQUEST

    async def shutdown_broker(self, broker_id: int) -> list[TopicPartition]:
        raise KafkaError(ErrorCode.NOT_CONTROLLER, "a single node has no controller to shut down through")

    # admin APIs ------------------------------------------------------------------------------------
    def _known(self, tp: TopicPartition) -> bool:
        info = self._store.topics.get(tp[0])
        return info is not None and 0 <= tp[1] < info.partitions

    async def elect_leaders(self, election_type: int, partitions: list[TopicPartition] | None) -> Outcome:
        wanted = (
            partitions
            if partitions is not None
            else [(name, p) for name, info in self._store.topics.items() for p in range(info.partitions)]
        )
        return {
            tp: (
                ErrorCode.ELECTION_NOT_NEEDED if self._known(tp) else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                None,
            )
            for tp in wanted
        }

    async def reassign(self, targets: dict[TopicPartition, list[int] | None]) -> Outcome:
        outcome: Outcome = {}
        for tp, replicas in targets.items():
            if not self._known(tp):
                outcome[tp] = (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, None)
            elif replicas is None:  # a cancel: nothing ever moves here
                outcome[tp] = (ErrorCode.NO_REASSIGNMENT_IN_PROGRESS, None)
            elif replicas == [self._node_id]:
                outcome[tp] = (ErrorCode.NONE, None)
            else:
                outcome[tp] = (ErrorCode.INVALID_REPLICA_ASSIGNMENT, None)
        return outcome

    async def list_reassignments(self) -> Reassignments:
        return {}
