"""The control plane of a ZooKeeper cluster member (`strom.broker.ports.ControlPlane` over ZooKeeper).

`ClusterMember` is the broker's control plane in a cluster (a single node uses its subclass
`strom.broker.control.single_node.SingleNodeMember` over the local store; request handlers cannot tell them
apart). It owns

* the metadata-store session (`strom.cluster.kafka_metadata.KafkaMetadataClient` over ZooKeeper or the
  local store, opened by `strom.broker.control.metadata_session`; strom.cluster is the only door to
  kazoo) and the broker's ephemeral registration ``/brokers/ids/<id>`` (re-created after a session
  expiry; at start it waits for a previous incarnation's znode to expire, as a restarted Kafka broker
  does);
* the controller elector/controller (`strom.cluster.controller.Controller`) and its channel;
* the metadata cache (`ClusterMetadataStore`) the handlers read, kept up to date by UpdateMetadata and by
  ``/config/changes`` notifications for topic configs (those for users and clients go to the SCRAM
  credentials, and every notification about a user, client or broker to `on_entity_change`: the client
  quotas and the dynamic broker configs);
* topic administration: create (the assignment, decided by `strom.broker.control.topic_admin`, written to
  ZooKeeper; the controller does the rest), delete (marked for the controller), add partitions, configs;
* controlled shutdown: before stopping, ask the controller to move leadership away;
* the broker epoch (KIP-380): the epoch of this process's registration. A controller's request carries
  the epoch of the registration it decided for; one meant for an earlier registration, or arriving
  before this process has registered at all, is refused with STALE_BROKER_EPOCH. A process restarted
  within the session timeout finds the previous one still registered: without this fence a controller
  that has not seen the restart (or one elected meanwhile) would make it leader or in-sync follower
  with the previous process's state while its log may have lost what that process had acknowledged (a
  machine crash loses unsynced writes). Once it registers, the controller sees a new epoch and treats it
  as a broker that failed and started (`strom.cluster.controller`): out of every ISR, its leaderships
  moved, then a follower that must catch up.

While ZooKeeper is unreachable the administrative requests that need it fail with REQUEST_TIMED_OUT (a
retriable error, what a ZooKeeper-mode Kafka broker answers once its ZooKeeper wait expires) instead of
closing the client's connection; produce and fetch do not need ZooKeeper and go on.

Every wait here (registration retries, polls of the metadata cache, controlled-shutdown attempts)
and the controller's run on the broker's clock.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from strom._util.clock import Clock, Deadline, sleep_ms, yield_to_loop
from strom.broker.config import BrokerConfig
from strom.broker.control.controller_channel import KafkaControllerChannel
from strom.broker.control.registration import BrokerRegistrar
from strom.broker.control.zookeeper_calls import needs_zookeeper
from strom.broker.metadata_cache import ClusterMetadataStore
from strom.broker.network.net_client import BrokerConnection
from strom.broker.ports import Outcome, Reassignments, TopicPartition
from strom.broker.replication.replica_manager import ReplicaManager
from strom.broker.security.client import ClientSecurity
from strom.broker.topic_info import TopicInfo
from strom.cluster import zk_paths as paths
from strom.cluster.controller import Controller, ControllerChannel, ControllerConfig
from strom.cluster.kafka_metadata import KafkaMetadataClient
from strom.cluster.metadata_store import MetadataStoreError
from strom.cluster.zk_paths import TopicAssignment
from strom.protocol.api import ApiKey
from strom.protocol.errors import ErrorCode, KafkaError
from strom.protocol.messages import (
    LeaderAndIsrRequest,
    LeaderAndIsrResponse,
    LeaderAndIsrResponsePartitionError,
    StopReplicaRequest,
    StopReplicaResponse,
    UpdateMetadataRequest,
)
from strom.protocol.uuid_text import new_uuid
from strom.storage.config import LogConfig
from strom.storage.log_manager import LogManager

log = logging.getLogger(__name__)

#: Partitions of one LeaderAndIsr applied between two yields of the event loop.
LEADER_AND_ISR_SLICE = 500
#: How often a wait for a topic looks at the metadata cache again.
METADATA_POLL_MS = 50
CONTROLLED_SHUTDOWN_TIMEOUT_MS = 10_000
CONTROLLED_SHUTDOWN_BACKOFF_MS = 500
CONFIG_CHANGE_RETRY_MS = 1_000


@dataclass(frozen=True)
class _ConfigChange:
    """One ``/config/changes`` notification as read: about a topic (with its configs as stored), else
    about users, clients or brokers (``user`` set when it names a user)."""

    name: str
    topic: str | None
    topic_configs: dict[str, str]
    user: str | None


def stale_broker_epoch(request_epoch: int, registered: int | None) -> bool:
    """Whether a controller's request was meant for an earlier registration of this broker id than
    ``registered`` (or comes before this process registered: None); -1, a request without an epoch
    (an older version), is not checked."""
    if request_epoch == -1:
        return False
    return registered is None or request_epoch < registered


class ClusterMember:
    #: See `ControllerConfig.record_broker_epochs` (a single node does not).
    RECORDS_BROKER_EPOCHS = True

    def __init__(
        self,
        config: BrokerConfig,
        metadata_client: KafkaMetadataClient,
        metadata: ClusterMetadataStore,
        replica_manager: ReplicaManager,
        log_manager: LogManager,
        log_config_for: Callable[[str], LogConfig],
        security: ClientSecurity,
        clock: Clock,
    ) -> None:
        self.node_id = config.broker_id
        self._security = security  # how this broker reaches the others
        self._clock = clock
        self.rack: str | None = config.get("broker.rack")
        self.controlled_shutdown_enable = bool(config.get("controlled.shutdown.enable"))
        self.session_timeout_ms = int(config.get("zookeeper.session.timeout.ms"))
        self.metadata_client = metadata_client
        self._metadata = metadata
        self.replica_manager = replica_manager
        self._log_manager = log_manager
        self._log_config_for = log_config_for
        self.channel = KafkaControllerChannel(f"controller-{self.node_id}", security, clock)
        self.controller = Controller(
            self.metadata_client,
            self.node_id,
            self._controller_channel(),
            ControllerConfig(
                auto_leader_rebalance=bool(config.get("auto.leader.rebalance.enable")),
                leader_imbalance_check_interval_s=float(
                    config.get("leader.imbalance.check.interval.seconds")
                ),
                unclean_leader_election_default=bool(config.get("unclean.leader.election.enable")),
                min_insync_replicas_default=int(config.get("min.insync.replicas")),
                record_broker_epochs=self.RECORDS_BROKER_EPOCHS,
            ),
            clock,
        )
        self.on_user_change: Callable[[str], Awaitable[None]] | None = None  # SCRAM credentials changed
        # users/..., clients/..., brokers/... notifications: the client quotas and the dynamic broker
        # configs re-read theirs (each a few znodes; a notification does not say which kind changed).
        self.on_entity_change: list[Callable[[], Awaitable[None]]] = []
        self._config_changed = asyncio.Event()
        self._config_changes_task: asyncio.Task[None] | None = None
        # Topic-config writes made here: a notification read that overlapped one may hold the configs
        # from before it, so it is read again rather than applied over the newer value.
        self._topic_config_writes = 0
        self._registration_task: asyncio.Task[None] | None = None
        self._reregistration_task: asyncio.Task[None] | None = None
        self.registrar = BrokerRegistrar(self.node_id, self.rack, metadata_client, clock)

    def _controller_channel(self) -> ControllerChannel:
        """How this broker's controller reaches brokers (the network; a single node overrides it)."""
        return self.channel

    @property
    def metadata(self) -> ClusterMetadataStore:
        return self._metadata

    @property
    def controller_active(self) -> bool:
        return self.controller.active

    @property
    def zookeeper_state(self) -> str | None:
        return self.metadata_client.session_state

    @property
    def broker_epoch(self) -> int | None:
        """The epoch of this process's current registration; None until it has registered."""
        return self.registrar.broker_epoch

    # life cycle ------------------------------------------------------------------------------------
    def start(
        self,
        host: str,
        port: int,
        endpoints: tuple[tuple[str, str, int], ...] = (),
        protocols: tuple[tuple[str, str], ...] = (),
    ) -> None:
        self.registrar.listen_at(host, port, endpoints, protocols)
        self.metadata_client.on_state_change(self._on_session_event)
        self._watch_config_changes()
        self._registration_task = asyncio.create_task(self._register_then_elect())

    async def _register_then_elect(self) -> None:
        await self.registrar.register(self._clock.monotonic_ms() + 3 * self.session_timeout_ms + 10_000)
        self.controller.start()

    async def _register_then_reelect(self) -> None:
        # Registered first, as Kafka's broker does: a controller elected before would take this broker
        # for dead, and move its leaderships to replicas that may have restarted with less.
        await self.registrar.register(deadline_ms=None)
        self.controller.stand()

    def _on_session_event(self, event: str) -> None:
        if event == "RECONNECTED_NEW_SESSION":
            log.warning("ZooKeeper session expired; registering broker %d again", self.node_id)
            self.controller.session_expired()
            if self._reregistration_task is not None:
                self._reregistration_task.cancel()
            self._reregistration_task = asyncio.create_task(self._register_then_reelect())
        elif event == "LOST":
            log.warning("ZooKeeper session lost")
            self.controller.session_expired()  # no election until registered under the next one
            if self._reregistration_task is not None:
                # The next new session starts its own attempt.
                self._reregistration_task.cancel()
                self._reregistration_task = None

    def _watch_config_changes(self) -> None:
        """Follow ``/config/changes``: the watch only wakes `_follow_config_changes`, which reads the
        new notifications and what they name in a worker thread (ZooKeeper round trips) and applies them
        on the loop, one notification after the other."""
        seen = set(self.metadata_client.watch_children(paths.CONFIG_CHANGES, self._config_changed.set))
        self._config_changes_task = asyncio.create_task(self._follow_config_changes(seen))

    async def _follow_config_changes(self, seen: set[str]) -> None:
        while True:
            await self._config_changed.wait()
            self._config_changed.clear()
            try:
                writes = self._topic_config_writes
                changes = await asyncio.to_thread(self._read_config_changes, seen)
                if self._topic_config_writes != writes:
                    self._config_changed.set()
                    continue
                for change in changes:
                    await self._apply_config_change(change)
                    seen.add(change.name)  # only once applied: a failed one is read again
            except MetadataStoreError as exc:
                # Not armed: the store calls back once it can. A read failed: try again after a pause.
                log.info("config change notifications not applied yet: %s", exc)
                await sleep_ms(self._clock, CONFIG_CHANGE_RETRY_MS)
                self._config_changed.set()

    async def _apply_config_change(self, change: _ConfigChange) -> None:
        # The controller's elections read min ISR and unclean election as the leaders do.
        self.controller.enqueue(lambda: self.controller.on_config_change(change.topic))
        if change.topic is not None:
            if self.metadata.set_configs(change.topic, change.topic_configs):
                self._log_manager.update_config(change.topic, self._log_config_for(change.topic))
            return
        if change.user is not None and self.on_user_change is not None:
            await self.on_user_change(change.user)
        for refresh in self.on_entity_change:
            await refresh()

    def _read_config_changes(self, seen: set[str]) -> list[_ConfigChange]:
        """In a worker thread: re-arm the watch, then read each new notification (and a topic's configs)."""
        children = self.metadata_client.watch_children(paths.CONFIG_CHANGES, self._config_changed.set)
        changes = []
        for name in sorted(set(children) - seen):
            topic = self.metadata_client.read_config_change(name)
            if topic is not None:
                changes.append(_ConfigChange(name, topic, self.metadata.read_configs(topic), None))
            else:
                changes.append(_ConfigChange(name, None, {}, self.metadata_client.read_user_change(name)))
        return changes

    async def controlled_shutdown(self) -> None:
        """Ask the controller to move leadership off this broker (a few attempts, then give up)."""
        if not self.controlled_shutdown_enable:
            return
        for _attempt in range(3):
            controller_id = self.metadata.controller_id
            try:
                if controller_id == self.node_id and self.controller.active:
                    async with Deadline(self._clock, CONTROLLED_SHUTDOWN_TIMEOUT_MS):
                        remaining = await self.controller.call(
                            lambda: self.controller.controlled_shutdown(self.node_id)
                        )
                    if not remaining:
                        return
                elif controller_id in self.metadata.brokers:
                    target = self.metadata.brokers[controller_id]
                    conn = BrokerConnection(
                        target.host, target.port, f"broker-{self.node_id}", self._security, self._clock
                    )
                    try:
                        response = await conn.send(
                            ApiKey.CONTROLLED_SHUTDOWN,
                            0,
                            {"broker_id": self.node_id, "broker_epoch": -1},
                            CONTROLLED_SHUTDOWN_TIMEOUT_MS,
                        )
                    finally:
                        conn.close()
                    if response["error_code"] == 0 and not response["remaining_partitions"]:
                        return
            except (ConnectionError, TimeoutError) as exc:
                log.info("controlled shutdown attempt failed: %s", exc)
            await sleep_ms(self._clock, CONTROLLED_SHUTDOWN_BACKOFF_MS)
        log.warning("controlled shutdown incomplete; stopping anyway")

    async def stop(self) -> None:
        for task in (self._registration_task, self._reregistration_task, self._config_changes_task):
            if task is not None:
                task.cancel()
        await self.controller.stop()
        await self.channel.close()
        self.metadata_client.close()

    # topic administration --------------------------------------------------------------------------
    @needs_zookeeper
    def live_brokers(self) -> dict[int, str | None]:
        """Registered brokers and their racks, read from ZooKeeper (the cache may lag a new broker)."""
        return {b.broker_id: b.rack for b in self.metadata_client.get_brokers().values()}

    @needs_zookeeper
    def create_topic(self, name: str, assignment: dict[int, list[int]], configs: dict[str, str]) -> TopicInfo:
        if self.metadata_client.get_topic_assignment(name) is not None:
            raise KafkaError(ErrorCode.TOPIC_ALREADY_EXISTS, f"topic {name!r} already exists")
        topic_id = new_uuid()
        self.metadata_client.create_topic(name, TopicAssignment(topic_id, dict(assignment)), configs)
        log.info("created topic %s in ZooKeeper: %s", name, assignment)
        return TopicInfo(name, topic_id, len(assignment), len(assignment[0]), dict(configs))

    async def create_topic_in_worker(
        self, name: str, assignment: dict[int, list[int]], configs: dict[str, str]
    ) -> TopicInfo:
        """The topic's znodes written in a worker thread; the controller's watch does the rest."""
        return await asyncio.to_thread(ClusterMember.create_topic, self, name, assignment, configs)

    @needs_zookeeper
    def topic_assignment(self, name: str) -> dict[int, list[int]] | None:
        found = self.metadata_client.get_topic_assignment(name)
        return None if found is None else dict(found[0].partitions)

    @needs_zookeeper
    def delete_topic(self, name: str) -> None:
        if self.metadata_client.get_topic_assignment(name) is None:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {name!r} does not exist")
        self.metadata_client.mark_topic_for_deletion(name)

    @needs_zookeeper
    def add_partitions(self, name: str, added: dict[int, list[int]]) -> None:
        found = self.metadata_client.get_topic_assignment(name)
        if found is None:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {name!r} does not exist")
        assignment, version = found
        if min(added) != len(assignment.partitions):
            raise KafkaError(
                ErrorCode.REASSIGNMENT_IN_PROGRESS, "topic assignment changed concurrently; retry"
            )
        assignment.partitions.update(added)
        if self.metadata_client.set_topic_assignment(name, assignment, version) is None:
            raise KafkaError(
                ErrorCode.REASSIGNMENT_IN_PROGRESS, "topic assignment changed concurrently; retry"
            )

    @needs_zookeeper
    def set_topic_configs(self, name: str, configs: dict[str, str]) -> None:
        self._topic_config_writes += 1
        self.metadata_client.set_topic_config(name, configs)
        info = self.metadata.topics.get(name)
        if info is not None:
            info.configs = dict(configs)

    async def wait_for_topic(self, name: str, timeout_ms: int, deleted: bool = False) -> bool:
        """Until this broker's metadata cache shows the topic with leaders (or, if ``deleted``, gone)."""
        deadline_ms = self._clock.monotonic_ms() + max(timeout_ms, 0)
        while self._clock.monotonic_ms() < deadline_ms:
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
            await sleep_ms(self._clock, METADATA_POLL_MS)
        return False

    async def wait_for_partitions(self, name: str, count: int, timeout_ms: int) -> bool:
        deadline_ms = self._clock.monotonic_ms() + max(timeout_ms, 0)
        while self._clock.monotonic_ms() < deadline_ms:
            info = self.metadata.topics.get(name)
            if info is not None and info.partitions >= count:
                return await self.wait_for_topic(name, deadline_ms - self._clock.monotonic_ms())
            await sleep_ms(self._clock, METADATA_POLL_MS)
        return False

    # requests only a controller sends -------------------------------------------------------------
    def stale_broker_epoch(self, request_epoch: int) -> bool:
        stale = stale_broker_epoch(request_epoch, self.broker_epoch)
        if stale:
            log.info(
                "broker %d: refusing a controller request for broker epoch %d (ours: %s)",
                self.node_id,
                request_epoch,
                self.broker_epoch,
            )
        return stale

    async def leader_and_isr(self, body: LeaderAndIsrRequest) -> LeaderAndIsrResponse:
        """Applied in slices of `LEADER_AND_ISR_SLICE` partitions with the event loop let go between
        them: a LeaderAndIsr for thousands of partitions (a broker failure, a new controller) would
        otherwise hold the loop for seconds, and on the controller's own broker that holds back the
        controller's requests to every other broker, which then start only after it."""
        if self.stale_broker_epoch(body.get("broker_epoch", -1)):
            return {"error_code": int(ErrorCode.STALE_BROKER_EPOCH), "partition_errors": []}
        states = body["partition_states"]
        if len(states) <= LEADER_AND_ISR_SLICE:
            return self.replica_manager.become_leader_or_follower(body)
        errors: list[LeaderAndIsrResponsePartitionError] = []
        for start in range(0, len(states), LEADER_AND_ISR_SLICE):
            part = self.replica_manager.become_leader_or_follower(
                {
                    "controller_id": body["controller_id"],
                    "controller_epoch": body["controller_epoch"],
                    "partition_states": states[start : start + LEADER_AND_ISR_SLICE],
                    "live_leaders": body["live_leaders"],
                }
            )
            if part["error_code"]:  # a newer controller spoke meanwhile: the rest is stale too
                return part
            errors.extend(part["partition_errors"])
            await yield_to_loop()
        return {"error_code": 0, "partition_errors": errors}

    def stop_replica(self, body: StopReplicaRequest) -> StopReplicaResponse:
        if self.stale_broker_epoch(body.get("broker_epoch", -1)):
            return {"error_code": int(ErrorCode.STALE_BROKER_EPOCH), "partition_errors": []}
        return self.replica_manager.stop_replicas(body)

    def update_metadata(self, body: UpdateMetadataRequest) -> ErrorCode:
        if self.stale_broker_epoch(body.get("broker_epoch", -1)):
            return ErrorCode.STALE_BROKER_EPOCH
        if not self.metadata.apply_update_metadata(body):
            return ErrorCode.STALE_CONTROLLER_EPOCH
        return ErrorCode.NONE

    async def shutdown_broker(self, broker_id: int) -> list[TopicPartition]:
        if not self.controller.active:
            raise KafkaError(ErrorCode.NOT_CONTROLLER)
        remaining: list[TopicPartition] = await self.controller.call(
            lambda: self.controller.controlled_shutdown(broker_id)
        )
        return remaining

    # admin APIs, executed as controller events ----------------------------------------------------
    async def elect_leaders(self, election_type: int, partitions: list[TopicPartition] | None) -> Outcome:
        if not self.controller.active:
            # Per partition, as Kafka's (ZK) controller does: v0 has no top-level error code, so a
            # top-level NOT_CONTROLLER with no results would read as "nothing to report".
            return dict.fromkeys(partitions or [], (ErrorCode.NOT_CONTROLLER, None))
        outcome: Outcome = await self.controller.call(
            lambda: self.controller.elect_leaders(election_type, partitions)
        )
        return outcome

    async def reassign(self, targets: dict[TopicPartition, list[int] | None]) -> Outcome:
        outcome: Outcome = await self.controller.call(lambda: self.controller.reassign(targets))
        return outcome

    async def list_reassignments(self) -> Reassignments:
        found: Reassignments = await self.controller.call(self.controller.list_reassignments)
        return found
