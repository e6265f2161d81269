"""The ports between the broker core and what backs it: a ZooKeeper cluster, or a cluster of one.

The request handlers, the replica manager and the group service are written once. What differs between
an embedded single node and a member of a ZooKeeper-coordinated cluster sits behind two interfaces:

* `IsrStore`: where the leader records ISR changes (a conditional write of the partition state znode
  in a cluster; a local compare-and-set for a cluster of one) and whom it tells (the controller);
  awaited, never blocking the event loop.
* `ControlPlane`: the cluster's metadata and its controller as this broker reaches them: topic
  administration (assignments, configs, deletion), the controller-only requests (LeaderAndIsr,
  UpdateMetadata, StopReplica, ControlledShutdown), the admin election and reassignment APIs, and
  the broker's life cycle in the cluster (registration, controlled shutdown).
  `strom.broker.control.cluster_member` implements it over the metadata store;
  `strom.broker.control.single_node` specialises it for a cluster of one, whose in-process controller
  feeds the replica manager and the metadata cache directly.
"""

from __future__ import annotations

from typing import Protocol

from strom.broker.metadata_cache import ClusterMetadataStore
from strom.broker.topic_info import TopicInfo
from strom.cluster.election import LeaderAndIsr
from strom.protocol.errors import ErrorCode
from strom.protocol.messages import (
    LeaderAndIsrRequest,
    LeaderAndIsrResponse,
    StopReplicaRequest,
    StopReplicaResponse,
    UpdateMetadataRequest,
)

TopicPartition = tuple[str, int]
Outcome = dict[TopicPartition, tuple[ErrorCode, str | None]]
Reassignments = dict[TopicPartition, tuple[list[int], list[int], list[int]]]


class IsrStore(Protocol):
    """Asynchronous: the replica manager awaits each call in a task of its own (isr_proposals.py), so
    a store that waits for a server does so off the event loop (a worker thread for ZooKeeper)."""

    async def write_isr(self, topic: str, partition: int, state: LeaderAndIsr) -> LeaderAndIsr | None:
        """Store the new state if the stored version still is ``state.zk_version``; None if it moved."""
        ...

    async def notify_isr_change(self, partitions: list[TopicPartition]) -> None: ...

    async def notify_log_dir_failure(self, broker_id: int, partitions: list[TopicPartition]) -> None:
        """Tell the controller that a log dir of this broker failed with these replicas in it."""
        ...


class ControlPlane(Protocol):
    @property
    def metadata(self) -> ClusterMetadataStore: ...

    @property
    def controller_active(self) -> bool: ...

    @property
    def zookeeper_state(self) -> str | None:
        """The ZooKeeper session's state (CONNECTED, SUSPENDED, LOST); None without ZooKeeper."""
        ...

    def start(
        self,
        host: str,
        port: int,
        endpoints: tuple[tuple[str, str, int], ...] = (),
        protocols: tuple[tuple[str, str], ...] = (),
    ) -> None:
        """Join at ``host:port`` (the inter-broker listener), publishing every listener's
        (name, advertised host, port) and security protocol."""
        ...

    async def controlled_shutdown(self) -> None: ...

    async def stop(self) -> None: ...

    # topic administration: assignments are decided by the caller (strom.broker.control.topic_admin)
    def live_brokers(self) -> dict[int, str | None]: ...

    def create_topic(
        self, name: str, assignment: dict[int, list[int]], configs: dict[str, str]
    ) -> TopicInfo: ...

    async def create_topic_in_worker(
        self, name: str, assignment: dict[int, list[int]], configs: dict[str, str]
    ) -> TopicInfo:
        """`create_topic` with the metadata store's writes in a worker thread, so the event loop does
        not wait for them (a coordinator's topic created in the background, on first use); what
        follows them (a single node's controller event) runs on the loop."""
        ...

    def topic_assignment(self, name: str) -> dict[int, list[int]] | None: ...

    def add_partitions(self, name: str, added: dict[int, list[int]]) -> None: ...

    def delete_topic(self, name: str) -> None: ...

    def set_topic_configs(self, name: str, configs: dict[str, str]) -> None: ...

    async def wait_for_topic(self, name: str, timeout_ms: int, deleted: bool = False) -> bool: ...

    async def wait_for_partitions(self, name: str, count: int, timeout_ms: int) -> bool: ...

    # requests only a controller sends
    async def leader_and_isr(self, body: LeaderAndIsrRequest) -> LeaderAndIsrResponse: ...

    def stop_replica(self, body: StopReplicaRequest) -> StopReplicaResponse: ...

    def update_metadata(self, body: UpdateMetadataRequest) -> ErrorCode: ...

    async def shutdown_broker(self, broker_id: int) -> list[TopicPartition]: ...

    # admin APIs executed by the controller
    async def elect_leaders(self, election_type: int, partitions: list[TopicPartition] | None) -> Outcome: ...

    async def reassign(self, targets: dict[TopicPartition, list[int] | None]) -> Outcome: ...

    async def list_reassignments(self) -> Reassignments: ...
