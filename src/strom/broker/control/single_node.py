"""A single node: a cluster of one, with its controller in-process, over the local metadata store.

`SingleNodeMember` is `ClusterMember` (the same registration, controller, ISR writes, ACL and SCRAM
stores, config-change watches) over a `LocalSession` on a `LocalStore` kept in the first log dir
(`strom.cluster.local_store`), with what being alone changes:

* **The controller's requests to this broker are applied in-process** (`InProcessChannel`): LeaderAndIsr,
  UpdateMetadata and StopReplica go straight to the replica manager and the metadata cache, at once.
* **Registration and election happen inside `start`** (the local store always answers), so the node
  leads its partitions and answers Metadata as soon as it listens.
* **Topic changes complete before the request is answered**: after writing the assignment (or the
  deletion mark, or the added partitions), the controller's event for it runs at once
  (`Controller.run_now`) instead of when the watch fires. A topic whose partition logs cannot be made
  (out of descriptors or disk) is rolled back and the request answers KAFKA_STORAGE_ERROR: all of it,
  or nothing, as before. Added partitions get their logs before their assignment is written, so a
  log that cannot be made leaves the topic's partition count as it was.
* **Nothing else steers it**: LeaderAndIsr, UpdateMetadata and StopReplica from the network are refused
  (INVALID_REQUEST) and ControlledShutdown answers NOT_CONTROLLER; a stopping node has nobody to hand
  leadership to.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator
from typing import cast

from strom.broker.control.cluster_member import ClusterMember
from strom.broker.ports import TopicPartition
from strom.broker.topic_info import TopicInfo
from strom.cluster.controller import ControllerChannel
from strom.cluster.propagation import ControllerBody
from strom.cluster.zk_paths import BrokerRegistration
from strom.protocol.api import ApiKey
from strom.protocol.errors import ErrorCode, KafkaError
from strom.protocol.messages import (
    LeaderAndIsrRequest,
    LeaderAndIsrResponse,
    StopReplicaRequest,
    StopReplicaResponse,
    UpdateMetadataRequest,
)

log = logging.getLogger(__name__)

__all__ = ["InProcessChannel", "SingleNodeMember"]


class InProcessChannel:
    """A `ControllerChannel` whose requests to ``node_id`` are handed to ``deliver`` at once."""

    def __init__(self, node_id: int, deliver: Callable[[int, ControllerBody], None]) -> None:
        self._node_id = node_id
        self._deliver = deliver

    def set_brokers(self, brokers: dict[int, BrokerRegistration]) -> None:
        """Only this broker exists."""

    def send(self, broker_id: int, api_key: int, body: ControllerBody) -> None:
        if broker_id == self._node_id:
            self._deliver(api_key, body)


@contextlib.contextmanager
def _journal_errors() -> Iterator[None]:
    """The store's journal that could not be written is a storage error on a single node."""
    try:
        yield
    except KafkaError as exc:
        if exc.code is ErrorCode.REQUEST_TIMED_OUT:
            raise KafkaError(ErrorCode.KAFKA_STORAGE_ERROR, exc.message) from exc
        raise


class SingleNodeMember(ClusterMember):
    RECORDS_BROKER_EPOCHS = False
    _failed: list[str]

    def _controller_channel(self) -> ControllerChannel:
        self._failed = []
        return InProcessChannel(self.node_id, self._apply)

    def _apply(self, api_key: int, body: ControllerBody) -> None:
        if api_key == ApiKey.LEADER_AND_ISR:
            result = self.replica_manager.become_leader_or_follower(cast(LeaderAndIsrRequest, body))
            for e in result["partition_errors"]:
                if e["error_code"]:
                    failure = f"{e['topic_name']}-{e['partition_index']}: {ErrorCode(e['error_code']).name}"
                    log.error("cannot lead %s", failure)
                    self._failed.append(failure)
        elif api_key == ApiKey.UPDATE_METADATA:
            self.metadata.apply_update_metadata(cast(UpdateMetadataRequest, body))
        elif api_key == ApiKey.STOP_REPLICA:
            self.replica_manager.stop_replicas(cast(StopReplicaRequest, body))

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
        self.registrar.listen_at(host, port, endpoints, protocols)
        self._watch_config_changes()
        self.registrar.register_once()
        self.controller.start()
        self.controller.run_now(self.controller.elect)

    async def controlled_shutdown(self) -> None:
        """Nobody to hand leadership to."""

    # topic administration: the controller's event at once -------------------------------------------
    def create_topic(self, name: str, assignment: dict[int, list[int]], configs: dict[str, str]) -> TopicInfo:
        with _journal_errors():
            info = super().create_topic(name, assignment, configs)
        self._create_partitions(name)
        return info

    async def create_topic_in_worker(
        self, name: str, assignment: dict[int, list[int]], configs: dict[str, str]
    ) -> TopicInfo:
        with _journal_errors():
            info = await super().create_topic_in_worker(name, assignment, configs)
        self._create_partitions(name)  # back on the loop: the controller's event touches the broker
        return info

    def _create_partitions(self, name: str) -> None:
        """The controller's event for a topic just written, at once (its requester waits for it)."""
        self._failed.clear()
        self.controller.run_now(self.controller.on_topic_change)
        if self._failed:
            failure = self._failed[0]
            self.metadata_client.mark_topic_for_deletion(name)
            self.controller.run_now(self.controller.on_delete_topics)
            raise KafkaError(ErrorCode.KAFKA_STORAGE_ERROR, f"topic {name} not created: {failure}")

    def delete_topic(self, name: str) -> None:
        super().delete_topic(name)
        self.controller.run_now(self.controller.on_delete_topics)

    def add_partitions(self, name: str, added: dict[int, list[int]]) -> None:
        self._make_logs(name, sorted(added))
        try:
            super().add_partitions(name, added)
        except KafkaError:
            self._drop_logs(name, sorted(added))
            raise
        self._failed.clear()
        self.controller.run_now(lambda: self.controller.on_topic_modified(name))
        if self._failed:
            raise KafkaError(
                ErrorCode.KAFKA_STORAGE_ERROR, f"partitions of {name} not added: {self._failed[0]}"
            )

    def _make_logs(self, name: str, partitions: list[int]) -> None:
        """The added partitions' logs before their assignment is written: one that cannot be made (out
        of descriptors or disk) removes those made and leaves the topic as it was."""
        config = self._log_config_for(name)
        made: list[int] = []
        try:
            for p in partitions:
                self._log_manager.get_or_create_log(name, p, config, sync_dir=False)
                made.append(p)
            self._log_manager.sync_new_dirs()
        except (OSError, KafkaError) as exc:
            self._drop_logs(name, made)
            failed = partitions[len(made)] if len(made) < len(partitions) else partitions[-1]
            raise KafkaError(
                ErrorCode.KAFKA_STORAGE_ERROR, f"partitions of {name} not added: {name}-{failed}: {exc}"
            ) from exc

    def _drop_logs(self, name: str, partitions: list[int]) -> None:
        for p in partitions:
            self._log_manager.delete_log(name, p, checkpoint=False)
        if partitions:
            self._log_manager.checkpoint_all()

    async def wait_for_topic(self, name: str, timeout_ms: int, deleted: bool = False) -> bool:
        return (name in self.metadata.topics) != deleted

    async def wait_for_partitions(self, name: str, count: int, timeout_ms: int) -> bool:
        info = self.metadata.topics.get(name)
        return info is not None and info.partitions >= count

    # requests only a remote controller sends --------------------------------------------------------
    async def leader_and_isr(self, body: LeaderAndIsrRequest) -> LeaderAndIsrResponse:
        return {"error_code": int(ErrorCode.INVALID_REQUEST), "partition_errors": []}

    def stop_replica(self, body: StopReplicaRequest) -> StopReplicaResponse:
        return {"error_code": int(ErrorCode.INVALID_REQUEST), "partition_errors": []}

    def update_metadata(self, body: UpdateMetadataRequest) -> ErrorCode:
        return ErrorCode.INVALID_REQUEST

    async def shutdown_broker(self, broker_id: int) -> list[TopicPartition]:
        raise KafkaError(ErrorCode.NOT_CONTROLLER, "a single node has no controller to shut down through")
