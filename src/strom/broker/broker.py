"""The broker: composition root and life cycle of one Strom broker process.

`Broker` builds the components and wires each to the ports it uses; none of them receives the broker:

    LogManager (storage) ─┐
    Purgatory(clock) ─────┼─> ReplicaManager ──> CoordinatorPartitions ──> Group/Transaction/RegistryService
    ClusterMetadataStore ─┤        │
    IsrStore ─────────────┘        └─> ControlPlane ──> TopicAdmin

A single node and a member of a ZooKeeper cluster run the same components: `ClusterMember` (with its
controller) and `ZkIsrStore` over the metadata store (`strom.cluster.metadata_store`). This module is
the only place that chooses the store: with ``zookeeper.connect`` a ZooKeeper session (or a session
handed in: `strom.testing.inprocess_cluster` runs several brokers over one local store); otherwise a
`LocalStore` persisted in the first log dir and `SingleNodeMember`, a cluster of one whose controller
is in-process (`strom.broker.control.single_node`). Request handlers reach the components through
`handler_ports` (the `HandlerPorts` the listeners are built on, never the broker itself) and never ask
which mode they are in.

Background jobs (retention, flush, checkpoints, producer-id expiration, the log cleaner, ISR expiry,
offset expiry, transaction timeouts, following ``_schemas``, and with tiered storage the remote log
manager's copies and expirations) run on the broker's clock.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass

from google.protobuf.descriptor_pb2 import FileDescriptorProto as FileProto

from strom._util.clock import Clock, SystemClock, sleep_ms, yield_to_loop
from strom.broker.authorization import Authorizer
from strom.broker.client_telemetry import ClientTelemetry
from strom.broker.config import BrokerConfig
from strom.broker.config_entities import ConfigEntities
from strom.broker.control.cluster_member import ClusterMember
from strom.broker.control.dynamic_config import DEFAULT_BROKER_ENTITY, DynamicBrokerConfig
from strom.broker.control.entity_view import EntityView
from strom.broker.control.metadata_session import ZkIsrStore, connect_metadata_store
from strom.broker.control.single_node import SingleNodeMember
from strom.broker.control.topic_admin import TopicAdmin
from strom.broker.coordinators.coordinator_partitions import CoordinatorPartitions
from strom.broker.coordinators.group_service import GroupService
from strom.broker.coordinators.registry_service import RegistryService
from strom.broker.coordinators.share_persister import ShareStatePersister
from strom.broker.coordinators.share_state_service import ShareStateService
from strom.broker.coordinators.transaction_service import TransactionService
from strom.broker.group_config_service import GroupConfigs
from strom.broker.handlers.base import HandlerPorts
from strom.broker.lake.wiring import LakeHost
from strom.broker.network.client_quotas import ClientQuotas
from strom.broker.ports import ControlPlane
from strom.broker.replication.purgatory import Purgatory
from strom.broker.replication.replica_fetcher import ReplicaFetcherManager
from strom.broker.replication.replica_manager import ReplicaManager
from strom.broker.replication.share_partitions import ShareConfig, SharePartitionManager
from strom.broker.security.client import ClientSecurity, inter_broker_security
from strom.broker.security.credentials import CredentialStore, ZkCredentialStore
from strom.broker.security.listeners import ListenerSetup, parse_listener_setup
from strom.broker.tiered.remote_log_manager import RemoteLogManager
from strom.broker.tiered.wiring import build_remote_log_manager
from strom.cluster.acl_znodes import AclZnodeStore
from strom.cluster.broker_config_znodes import BrokerConfigZnodes
from strom.cluster.client_metrics_znodes import CONFIG_GROUPS, ClientMetricsZnodes, ConfigEntityZnodes
from strom.cluster.local_store import LocalStore
from strom.cluster.metadata_store import MetadataStore
from strom.cluster.quota_znodes import QuotaZnodeStore
from strom.metrics.counters import BrokerCounters
from strom.registry.protobuf_schema import ProtobufSchema
from strom.storage.cleaner import LogCleaner
from strom.storage.config import LogConfig
from strom.storage.log_manager import LogManager

log = logging.getLogger(__name__)


def listener_setup(config: BrokerConfig) -> ListenerSetup:
    """Kafka's listener settings, validated together (security/listeners.py)."""
    return parse_listener_setup(
        config.get("listeners"),
        config.get("advertised.listeners"),
        config.get("listener.security.protocol.map"),
        config.get("inter.broker.listener.name"),
        config.get("security.inter.broker.protocol"),
    )


@dataclass(frozen=True, slots=True)
class Endpoint:
    host: str
    port: int


class Broker:
    def __init__(
        self, config: BrokerConfig, clock: Clock | None = None, metadata_store: MetadataStore | None = None
    ) -> None:
        self.config = config
        self.listener_setup = listener_setup(config)
        # How this broker reaches the others (the inter-broker listener's TLS and SASL login): every
        # component that opens broker-to-broker connections gets it here, none reads it globally.
        self.inter_broker_security: ClientSecurity = inter_broker_security(
            config, self.listener_setup.listener(self.listener_setup.inter_broker)
        )
        self.clock: Clock = clock or SystemClock()
        self.node_id = config.broker_id
        self.default_log_config = LogConfig.from_properties(config.topic_defaults(), LogConfig())
        self.log_manager = LogManager(
            config.log_dirs,
            self.default_log_config,
            self.clock.time_ms,
            producer_id_expiration_ms=int(config.get("producer.id.expiration.ms")),
            max_open_files=int(config.get("log.max.open.files")) or None,
        )
        self.purgatory = Purgatory(self.clock)
        # Hot-path counters for /metrics (strom.metrics); None with metrics.enabled=false.
        self.metrics = BrokerCounters() if config.get("metrics.enabled") else None
        self.advertised = Endpoint("127.0.0.1", 9092)  # the inter-broker listener's advertised address
        # Every listener's advertised address by listener name (main.py sets them once bound).
        self.listener_endpoints: dict[str, Endpoint] = {}
        self.listener_protocols: dict[str, str] = {}  # listener name -> security protocol
        # Run after every dynamic config notification: the TLS listeners' reloads (main.py), which
        # rebuild a context whose key store or trust store changed (in the config or on disk).
        self.on_broker_config: list[Callable[[], object]] = []
        security = self.inter_broker_security
        fetchers = ReplicaFetcherManager(
            self.node_id,
            int(config.get("replica.fetch.wait.max.ms")),
            int(config.get("replica.fetch.max.bytes")),
            security,
            self.clock,
        )
        # The one place that tells a ZooKeeper cluster member from a cluster of one.
        self._local_store: LocalStore | None = None
        if config.get("zookeeper.connect") or metadata_store is not None:
            metadata_client, self.metadata = connect_metadata_store(config, metadata_store)
        else:
            # A cluster of one: the metadata store in the first log dir, the controller in-process.
            self._local_store = LocalStore(config.log_dirs[0])
            metadata_client, self.metadata = connect_metadata_store(
                config, self._local_store.session(asyncio.get_running_loop()), import_legacy=True
            )
        isr_store = ZkIsrStore(metadata_client)
        self.cluster_id = self.metadata.cluster_id
        # SCRAM credentials: /config/users in the metadata store, as Kafka keeps them in ZooKeeper.
        self.credentials: CredentialStore = ZkCredentialStore(metadata_client)
        self.replica_manager = ReplicaManager(
            self.node_id,
            self.log_manager,
            self.metadata,
            self._log_config_for,
            self.purgatory,
            self.clock,
            isr_store,
            fetchers,
            int(config.get("replica.lag.time.max.ms")),
            config.get("replica.selector.class"),
        )
        kind = SingleNodeMember if self._local_store is not None else ClusterMember
        member = kind(
            config,
            metadata_client,
            self.metadata,
            self.replica_manager,
            self.log_manager,
            self._log_config_for,
            security,
            self.clock,
        )
        member.on_user_change = self.credentials.refresh  # /config/users change notifications
        # LeaderAndIsr answers: replicas in a failed log dir (KIP-112), leaderless partitions' log ends.
        member.channel.on_leader_and_isr_response = member.controller.on_leader_and_isr_response
        # Client quotas: /config/users and /config/clients, re-read on their change notifications.
        self.quotas = ClientQuotas(
            int(config.get("quota.window.num")), 1000 * int(config.get("quota.window.size.seconds"))
        )
        self.quota_store = QuotaZnodeStore(metadata_client)
        self.quota_view = EntityView(self.quota_store.load_all, self.quotas.replace)
        self.quota_view.load()
        # Dynamic broker configs (KIP-226): /config/brokers/<id> and /config/brokers/<default>.
        self.dynamic_config = DynamicBrokerConfig(config)
        self.broker_config_store = BrokerConfigZnodes(metadata_client)
        self.broker_config_view = EntityView(self._read_broker_config, self._apply_broker_config)
        # Client-metrics subscriptions (KIP-714): /config/client-metrics/<name>, on the same notifications.
        self.client_telemetry = ClientTelemetry(
            ClientMetricsZnodes(metadata_client), self.clock, int(config.get("telemetry.max.bytes"))
        )
        self.client_telemetry.view.load()
        # Groups' own configs (the GROUP config resource): /config/groups/<group>, on the same notifications.
        self.group_configs = GroupConfigs(ConfigEntityZnodes(metadata_client, CONFIG_GROUPS), config.get)
        self.group_configs.view.load()
        member.on_entity_change += [
            self.quota_view.refresh,
            self.broker_config_view.refresh,
            self.client_telemetry.view.refresh,
            self.group_configs.view.refresh,
        ]
        self.control: ControlPlane = member
        self.topics = TopicAdmin(
            self.control,
            self.metadata,
            self.log_manager,
            self.default_log_config,
            int(config.get("num.partitions")),
            int(config.get("default.replication.factor")),
            bool(config.get("auto.create.topics.enable")),
            bool(config.get("delete.topic.enable")),
            bool(config.get("remote.log.storage.system.enable")),
        )
        self.broker_config_view.load()  # before the coordinators read topic defaults
        # The coordinators' one door to the replica manager (logs and leadership of internal topics).
        self.coordinator_partitions = CoordinatorPartitions(self.replica_manager)
        self.groups = GroupService(
            config, self.clock, self.coordinator_partitions, self.metadata, self.topics
        )
        self.transactions = TransactionService(
            config, self.clock, self.coordinator_partitions, self.metadata, self.topics, security
        )
        # Markers reaching __consumer_offsets commit or drop the group side's transactional offsets.
        self.transactions.marker_listeners.append(self.groups.on_txn_marker)
        # Share groups' share-partitions on the partitions this broker leads (KIP-932), kept durable
        # through the share coordinator (__share_group_state), wherever it is.
        self.share_state = ShareStateService(
            config, self.clock, self.coordinator_partitions, self.metadata, self.topics
        )
        self.share_persister = ShareStatePersister(self.share_state, self.metadata, security, self.clock)
        share = self.groups.share_config
        share_config = ShareConfig(
            share.record_lock_duration_ms,
            share.delivery_count_limit,
            share.auto_offset_reset,
            share.session_timeout_ms,
            share.max_share_sessions,
        )
        self.shares = SharePartitionManager(
            self.replica_manager, self.clock, share_config, self.share_persister
        )
        group_configs = self.group_configs
        self.shares.config_of = lambda group_id: group_configs.share_config(group_id, share_config)
        self.groups.share_heartbeat_interval_of = group_configs.share_heartbeat_interval_ms
        self.groups.share_session_timeout_of = group_configs.share_session_timeout_ms
        self.groups.consumer_heartbeat_interval_of = group_configs.consumer_heartbeat_interval_ms
        self.groups.consumer_session_timeout_of = group_configs.consumer_session_timeout_ms
        self.registry = RegistryService(
            config, self.clock, self.coordinator_partitions, self.metadata, self.topics, security
        )
        # Tiered storage (KIP-405): None unless remote.log.storage.system.enable, so a broker without it
        # builds and runs none of it.
        self.remote_log_manager: RemoteLogManager | None = None
        if config.get("remote.log.storage.system.enable"):
            self.remote_log_manager = build_remote_log_manager(
                config,
                self.replica_manager,
                self.coordinator_partitions,
                self.topics,
                self.metadata,
                self._log_config_for,
                security,
                self.clock,
            )
            # Followers below a leader's local log start rebuild from the remote log (KIP-405).
            fetchers.remote_aux_state = self.remote_log_manager.remote_aux_state
        # Iceberg topics: the translator is built (and pyiceberg imported) once a led topic needs it.
        self.lake = LakeHost(
            config,
            lambda: list(self.replica_manager.partitions.values()),
            self._log_config_for,
            self._schema_of,
            self.clock,
            lambda name: info.topic_id if (info := self.metadata.topics.get(name)) is not None else None,
            self._protobuf_files_of,
        )
        # None without authorizer.class.name: handlers then skip every ACL check (one attribute test).
        self.authorizer: Authorizer | None = None
        if config.get("authorizer.class.name"):
            acl_store = AclZnodeStore(metadata_client)
            self.authorizer = Authorizer(
                acl_store, config.get("super.users"), bool(config.get("allow.everyone.if.no.acl.found"))
            )
        # What the request handlers reach (handlers/base.py): the listeners get this, not the broker.
        self.handler_ports = HandlerPorts(
            node_id=self.node_id,
            cluster_id=self.cluster_id,
            config=config,
            clock=self.clock,
            metadata=self.metadata,
            replica_manager=self.replica_manager,
            purgatory=self.purgatory,
            control=self.control,
            topics=self.topics,
            groups=self.groups,
            transactions=self.transactions,
            credentials=self.credentials,
            authorizer=self.authorizer,
            metrics=self.metrics,
            quotas=self.quotas,
            config_entities=ConfigEntities(
                self.quota_store,
                self.broker_config_store,
                self.dynamic_config,
                self.quota_view.refresh,
                self.broker_config_view.refresh,
            ),
            remote_log_manager=self.remote_log_manager,
            client_telemetry=self.client_telemetry,
            iceberg_position=self._iceberg_position,
            shares=self.shares,
            share_state=self.share_state,
            share_persister=self.share_persister,
            group_configs=self.group_configs,
        )
        self._tasks: list[asyncio.Task[None]] = []

    def _read_broker_config(self) -> tuple[dict[str, str], dict[str, str]]:
        """This broker's dynamic configs and the cluster-wide default (metadata-store reads)."""
        store = self.broker_config_store
        return store.read(str(self.node_id)), store.read(DEFAULT_BROKER_ENTITY)

    def _apply_broker_config(self, read: tuple[dict[str, str], dict[str, str]]) -> None:
        """Take the dynamic broker configs read; a changed topic default applies to every hosted log."""
        changed = self.dynamic_config.replace(*read)
        for reload in self.on_broker_config:
            reload()  # also without a changed value: a key store file rewritten in place
        if not changed:
            return
        self.default_log_config = self.dynamic_config.log_config()
        self.log_manager.default_config = self.default_log_config
        self.topics.default_log_config = self.default_log_config
        for topic in sorted({tp.topic for tp in self.log_manager.all_logs()}):
            self.log_manager.update_config(topic, self.topics.log_config_for(topic))
        log.info(
            "dynamic broker configs now %s (cluster default %s)",
            self.dynamic_config.per_broker,
            self.dynamic_config.cluster_default,
        )

    def _log_config_for(self, topic: str) -> LogConfig:
        return self.topics.log_config_for(topic)

    def _schema_of(self, schema_id: int) -> tuple[str, str] | None:
        """A registry schema's (type, text), for the Iceberg translator's worker threads: one dict read
        of an immutable entry, which the registry's replay only ever adds."""
        stored = self.registry.registry.state.schemas.get(schema_id)
        return (stored.schema_type, stored.schema) if stored is not None else None

    def _iceberg_position(self, topic: str, index: int) -> tuple[int, int] | None:
        translator = self.lake.translator
        return translator.table_position(topic, index) if translator is not None else None

    def _protobuf_files_of(self, schema_id: int) -> tuple[FileProto, dict[str, FileProto]]:
        """A Protobuf schema compiled with the files it imports (its references), for the Iceberg
        translator's worker threads: the registry's parse, remembered per schema.

        Raises:
            RegistryError: a reference is gone, or the schema does not compile.
            ValueError: the id is not a Protobuf schema's.
        """
        parsed = self.registry.registry.parsed_schema(schema_id)
        if parsed is None or not isinstance(parsed.form, ProtobufSchema):
            raise ValueError(f"schema id {schema_id} is not a Protobuf schema")
        return parsed.form.file, parsed.form.dependencies

    # life cycle --------------------------------------------------------------------------------
    def start_background(self) -> None:
        """Join the cluster (or lead everything, alone) at the advertised endpoint, then the jobs."""
        if self.authorizer is not None:
            self.authorizer.start()
        self.registry.start()
        self.control.start(
            self.advertised.host,
            self.advertised.port,
            tuple((name, e.host, e.port) for name, e in self.listener_endpoints.items()),
            tuple(sorted(self.listener_protocols.items())),
        )
        self.replica_manager.start()
        get = self.config.get
        self._tasks += [
            asyncio.create_task(
                self._periodic("retention", int(get("log.retention.check.interval.ms")), self._run_retention)
            ),
            asyncio.create_task(
                self._periodic("flush", int(get("log.flush.scheduler.interval.ms")), self._run_flush)
            ),
            asyncio.create_task(
                self._periodic(
                    "checkpoint",
                    int(get("log.flush.offset.checkpoint.interval.ms")),
                    self.log_manager.checkpoint_all,
                )
            ),
            # Replicas whose log a full or failing disk kept from opening are tried again.
            asyncio.create_task(self._periodic("reopen-logs", 5_000, self.replica_manager.unopened.retry)),
            asyncio.create_task(
                self._periodic(
                    "producer-expiration",
                    int(get("producer.id.expiration.check.interval.ms")),
                    lambda: self.log_manager.remove_expired_producers(self.clock.time_ms()),
                )
            ),
            asyncio.create_task(self._run_cleaner()),
        ]
        if self.remote_log_manager is not None:
            self._tasks.append(asyncio.create_task(self.remote_log_manager.run()))
        self._tasks.append(asyncio.create_task(self.lake.run()))

    async def _periodic(self, name: str, interval_ms: int, job: Callable[[], object]) -> None:
        while True:
            await sleep_ms(self.clock, max(interval_ms, 10))
            try:
                job()
            except Exception:
                log.exception("background job %s failed", name)

    async def _run_cleaner(self) -> None:
        """Log compaction (storage/cleaner.py) in small steps between other event-loop work."""
        cleaner = LogCleaner(self.log_manager, self.clock.time_ms)
        while True:
            steps = cleaner.clean_steps()
            try:
                for _ in steps:
                    await yield_to_loop()
            except Exception:
                log.exception("background job cleaner failed")
            finally:
                steps.close()
            if cleaner.last_stats is None:
                # log.cleaner.backoff.ms may change at run time (KIP-226): read at each idle spell.
                backoff_ms = int(self.dynamic_config.value("log.cleaner.backoff.ms"))
                await sleep_ms(self.clock, max(backoff_ms, 10))

    def _run_retention(self) -> None:
        deleted = self.log_manager.run_retention(self.clock.time_ms())
        if deleted:
            log.info("retention deleted %d segment(s)", deleted)

    def _run_flush(self) -> None:
        self.log_manager.flush_dirty(self.clock.time_ms())

    async def stop(self) -> None:
        await self.control.controlled_shutdown()
        await self.groups.stop()
        await self.transactions.stop()
        await self.registry.stop()
        await self.share_state.stop()
        self.share_persister.close()
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks.clear()
        if self.remote_log_manager is not None:
            self.remote_log_manager.rlmm.close()
            await self.remote_log_manager.rsm.store.close()
        await self.control.stop()
        await self.replica_manager.stop()
        self.log_manager.shutdown()
        if self._local_store is not None:
            self._local_store.close()
