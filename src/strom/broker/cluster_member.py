"""Cluster mode glue: one broker's membership in a ZooKeeper-coordinated Strom cluster.

`ClusterMember` is created by `Broker` when ``zookeeper.connect`` is set. It owns

* the ZooKeeper session (`strom.cluster.zk.KafkaZkClient`, the only door to kazoo) and the broker's
  ephemeral registration ``/brokers/ids/<id>`` (re-created after a session expiry; at start it waits
  for a previous incarnation's znode to expire, as a restarted Kafka broker does);
* the controller elector/controller (`strom.cluster.controller.Controller`) and its channel;
* the metadata cache (`ClusterMetadataStore`) the handlers read, kept up to date by UpdateMetadata and by
  ``/config/changes`` notifications for topic configs;
* the replica manager, with ISR writes as conditional ZooKeeper writes plus ISR change notifications;
* topic administration in cluster mode: create (rack-aware assignment written to ZooKeeper, the
  controller does the rest), delete (marked for the controller), add partitions, alter configs;
* controlled shutdown: before stopping, ask the controller to move leadership away.

While ZooKeeper is unreachable the administrative requests that need it fail with REQUEST_TIMED_OUT (a
retriable error, what a ZooKeeper-mode Kafka broker answers once its ZooKeeper wait expires) instead of
closing the client's connection; produce and fetch do not need ZooKeeper and go on.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar

from strom.broker.controller_channel import KafkaControllerChannel
from strom.broker.metadata_cache import ClusterMetadataStore
from strom.broker.metadata_store import LocalMetadataStore, TopicInfo
from strom.broker.net_client import BrokerConnection
from strom.broker.replica_manager import ReplicaManager
from strom.cluster import zk_paths as paths
from strom.cluster.assignment import assign_replicas
from strom.cluster.controller import Controller, ControllerConfig
from strom.cluster.election import LeaderAndIsr
from strom.cluster.zk import KafkaZkClient, ZkError
from strom.cluster.zk_paths import BrokerRegistration, TopicAssignment
from strom.protocol.api import ApiKey
from strom.protocol.errors import ErrorCode, KafkaError

if TYPE_CHECKING:
    from strom.broker.broker import Broker

log = logging.getLogger(__name__)

_P = ParamSpec("_P")
_R = TypeVar("_R")


def _needs_zookeeper(method: Callable[_P, _R]) -> Callable[_P, _R]:
    """ZooKeeper unreachable -> REQUEST_TIMED_OUT (retriable) for the client, not a closed connection."""

    @functools.wraps(method)
    def wrapper(*args: _P.args, **kwargs: _P.kwargs) -> _R:
        try:
            return method(*args, **kwargs)
        except ZkError as exc:
            raise KafkaError(ErrorCode.REQUEST_TIMED_OUT, f"ZooKeeper unavailable: {exc}") from exc

    return wrapper


class ClusterMember:
    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        config = broker.config
        self.session_timeout_ms = int(config.get("zookeeper.session.timeout.ms"))
        self.zk = KafkaZkClient(
            str(config.get("zookeeper.connect")), self.session_timeout_ms, asyncio.get_running_loop()
        )
        self.zk.start()
        cluster_id = self.zk.get_or_create_cluster_id(config.get("cluster.id") or uuid.uuid4().hex[:22])
        # meta.properties still pins the log dir to this broker id and cluster.
        LocalMetadataStore(config.log_dirs[0], broker.node_id, cluster_id)
        self.metadata = ClusterMetadataStore(cluster_id, self.zk.get_topic_config, self._allocate_pids)
        self.replica_manager = ReplicaManager(broker, self._write_isr, self.zk.notify_isr_change)
        self.channel = KafkaControllerChannel(f"controller-{broker.node_id}")
        self.controller = Controller(
            self.zk,
            broker.node_id,
            self.channel,
            ControllerConfig(
                auto_leader_rebalance=bool(config.get("auto.leader.rebalance.enable")),
                leader_imbalance_check_interval_s=float(
                    config.get("leader.imbalance.check.interval.seconds")
                ),
                unclean_leader_election_default=bool(config.get("unclean.leader.election.enable")),
            ),
        )
        self._registration_task: asyncio.Task[None] | None = None
        self.metadata_listeners: list[Callable[[], None]] = []

    def _allocate_pids(self, size: int) -> int:
        return self.zk.allocate_producer_id_block(self.broker.node_id, size)

    def _write_isr(self, topic: str, partition: int, state: LeaderAndIsr) -> LeaderAndIsr | None:
        return self.zk.update_partition_state(topic, partition, state)

    # life cycle ------------------------------------------------------------------------------------
    def start(self) -> None:
        self.replica_manager.start()
        self.zk.on_state_change(self._on_session_event)
        self._watch_config_changes()
        self._registration_task = asyncio.create_task(self._register_then_elect())

    def registration(self) -> BrokerRegistration:
        ep = self.broker.advertised
        return BrokerRegistration(self.broker.node_id, ep.host, ep.port, self.broker.rack)

    async def _register_then_elect(self) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 3 * self.session_timeout_ms / 1000 + 10
        while True:
            try:
                self.zk.register_broker(self.registration())
                break
            except ZkError as exc:
                if loop.time() > deadline:
                    log.error("giving up registering broker %d: %s", self.broker.node_id, exc)
                    raise
                log.info("waiting to register broker %d: %s", self.broker.node_id, exc)
                await asyncio.sleep(0.5)
        log.info("registered broker %d in ZooKeeper at %s", self.broker.node_id, self.registration())
        self.controller.start()

    def _on_session_event(self, event: str) -> None:
        if event == "RECONNECTED_NEW_SESSION":
            log.warning("ZooKeeper session expired; registering broker %d again", self.broker.node_id)
            try:
                self.zk.register_broker(self.registration())
            except ZkError:
                log.exception("re-registration failed")
            self.controller.enqueue(self.controller.elect)
        elif event == "LOST":
            log.warning("ZooKeeper session lost")

    def _watch_config_changes(self) -> None:
        seen: set[str] = set()

        def on_change() -> None:
            try:
                children = self.zk.watch_children(paths.CONFIG_CHANGES, on_change)
            except ZkError:
                return
            for child in sorted(set(children) - seen):
                seen.add(child)
                topic = self.zk.read_config_change(child)
                if topic is None:
                    continue
                configs = self.metadata.reload_configs(topic)
                if configs is not None:
                    self.broker.log_manager.update_config(topic, self.broker.log_config_for(topic))

        seen.update(self.zk.watch_children(paths.CONFIG_CHANGES, on_change))

    async def controlled_shutdown(self) -> None:
        """Ask the controller to move leadership off this broker (a few attempts, then give up)."""
        for _attempt in range(3):
            controller_id = self.metadata.controller_id
            try:
                if controller_id == self.broker.node_id and self.controller.active:
                    remaining = await asyncio.wait_for(
                        self.controller.call(
                            lambda: self.controller.controlled_shutdown(self.broker.node_id)
                        ),
                        10,
                    )
                    if not remaining:
                        return
                elif controller_id in self.metadata.brokers:
                    target = self.metadata.brokers[controller_id]
                    conn = BrokerConnection(target.host, target.port, f"broker-{self.broker.node_id}")
                    try:
                        response = await conn.send(
                            ApiKey.CONTROLLED_SHUTDOWN, 0, {"broker_id": self.broker.node_id}, timeout_s=10
                        )
                    finally:
                        conn.close()
                    if response["error_code"] == 0 and not response["remaining_partitions"]:
                        return
            except (ConnectionError, TimeoutError) as exc:
                log.info("controlled shutdown attempt failed: %s", exc)
            await asyncio.sleep(0.5)
        log.warning("controlled shutdown incomplete; stopping anyway")

    async def stop(self) -> None:
        if self._registration_task is not None:
            self._registration_task.cancel()
        await self.controller.stop()
        await self.replica_manager.stop()
        await self.channel.close()
        self.zk.close()

    # topic administration --------------------------------------------------------------------------
    @_needs_zookeeper
    def live_brokers(self) -> dict[int, str | None]:
        """Registered brokers and their racks, read from ZooKeeper (the cache may lag a new broker)."""
        return {b.broker_id: b.rack for b in self.zk.get_brokers().values()}

    @_needs_zookeeper
    def create_topic(
        self, name: str, partitions: int, replication_factor: int, configs: dict[str, str]
    ) -> TopicInfo:
        if self.zk.get_topic_assignment(name) is not None:
            raise KafkaError(ErrorCode.TOPIC_ALREADY_EXISTS, f"topic {name!r} already exists")
        assignment = assign_replicas(self.live_brokers(), partitions, replication_factor)
        topic_id = uuid.uuid4().bytes
        self.zk.create_topic(name, TopicAssignment(topic_id, assignment), configs)
        log.info("created topic %s in ZooKeeper: %s", name, assignment)
        return TopicInfo(name, topic_id, partitions, replication_factor, dict(configs))

    @_needs_zookeeper
    def validate_assignment(self, partitions: int, replication_factor: int) -> None:
        assign_replicas(self.live_brokers(), partitions, replication_factor)

    @_needs_zookeeper
    def delete_topic(self, name: str) -> None:
        if self.zk.get_topic_assignment(name) is None:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {name!r} does not exist")
        self.zk.mark_topic_for_deletion(name)

    @_needs_zookeeper
    def add_partitions(self, name: str, total: int, validate_only: bool) -> None:
        found = self.zk.get_topic_assignment(name)
        if found is None:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {name!r} does not exist")
        assignment, version = found
        current = len(assignment.partitions)
        if total <= current:
            raise KafkaError(
                ErrorCode.INVALID_PARTITIONS,
                f"topic currently has {current} partitions, which is higher than or equal to the "
                f"requested {total}",
            )
        rf = len(assignment.partitions[0])
        added = assign_replicas(self.live_brokers(), total - current, rf, first_partition=current)
        if validate_only:
            return
        assignment.partitions.update(added)
        if self.zk.set_topic_assignment(name, assignment, version) is None:
            raise KafkaError(
                ErrorCode.REASSIGNMENT_IN_PROGRESS, "topic assignment changed concurrently; retry"
            )

    @_needs_zookeeper
    def set_topic_configs(self, name: str, configs: dict[str, str]) -> None:
        self.zk.set_topic_config(name, configs)
        info = self.metadata.topics.get(name)
        if info is not None:
            info.configs = dict(configs)

    async def wait_for_topic(self, name: str, timeout_ms: int, deleted: bool = False) -> bool:
        """Until this broker's metadata cache shows the topic with leaders (or, if ``deleted``, gone)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max(timeout_ms, 0) / 1000
        while loop.time() < deadline:
            info = self.metadata.topics.get(name)
            if deleted and info is None:
                return True
            if (
                not deleted
                and info is not None
                and all(
                    (m := self.metadata.partitions.get((name, p))) is not None and m.leader >= 0
                    for p in range(info.partitions)
                )
            ):
                return True
            await asyncio.sleep(0.05)
        return False

    async def wait_for_partitions(self, name: str, count: int, timeout_ms: int) -> bool:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max(timeout_ms, 0) / 1000
        while loop.time() < deadline:
            info = self.metadata.topics.get(name)
            if info is not None and info.partitions >= count:
                return await self.wait_for_topic(name, int((deadline - loop.time()) * 1000))
            await asyncio.sleep(0.05)
        return False

    def on_metadata_updated(self) -> None:
        """Hook run after every UpdateMetadata (the group service follows coordinator moves here)."""
        for callback in self.metadata_listeners:
            callback()

    def describe(self) -> dict[str, Any]:
        return {"controller": self.metadata.controller_id, "brokers": sorted(self.metadata.brokers)}
