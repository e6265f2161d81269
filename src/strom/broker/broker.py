"""The broker: the state request handlers share, and its life cycle.

`Broker` owns the log manager (storage), the topic catalogue (`LocalMetadataStore` in embedded mode),
the purgatory and the background tasks (retention, flush, checkpoints). Handlers reach everything
through it; it holds no protocol logic of its own beyond topic administration rules, which live here
because both the admin APIs and auto-creation on Metadata/Produce apply them.

Theory of operation (single node): the broker is the leader of every partition with a single replica,
so its ISR is itself, the high watermark equals the log end offset after every append, and acks=all is
satisfied as soon as the leader has appended (with `min.insync.replicas` checked against an ISR of one).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from strom._util.clock import Clock, SystemClock
from strom.broker.config import BrokerConfig
from strom.broker.metadata_store import LocalMetadataStore, TopicInfo
from strom.broker.purgatory import Purgatory
from strom.protocol.errors import ErrorCode, KafkaError
from strom.storage.config import LogConfig
from strom.storage.log import PartitionLog
from strom.storage.log_manager import LogManager

if TYPE_CHECKING:
    from strom.broker.cluster_member import ClusterMember
    from strom.broker.metadata_cache import ClusterMetadataStore
    from strom.broker.replica_manager import ReplicaManager

log = logging.getLogger(__name__)

_LEGAL_TOPIC = re.compile(r"^[a-zA-Z0-9._-]+$")
MAX_TOPIC_NAME_LENGTH = 249
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state"})
LEADER_EPOCH = 0


def validate_topic_name(name: str) -> None:
    if not name or name in (".", ".."):
        raise KafkaError(ErrorCode.INVALID_TOPIC_EXCEPTION, f"topic name {name!r} is illegal")
    if len(name) > MAX_TOPIC_NAME_LENGTH:
        raise KafkaError(
            ErrorCode.INVALID_TOPIC_EXCEPTION,
            f"topic name is longer than {MAX_TOPIC_NAME_LENGTH} characters",
        )
    if not _LEGAL_TOPIC.match(name):
        raise KafkaError(
            ErrorCode.INVALID_TOPIC_EXCEPTION,
            f"topic name {name!r} has characters other than ASCII alphanumerics, '.', '_' and '-'",
        )


@dataclass(frozen=True, slots=True)
class Endpoint:
    host: str
    port: int


class Broker:
    def __init__(self, config: BrokerConfig, clock: Clock | None = None) -> None:
        self.config = config
        self.clock: Clock = clock or SystemClock()
        self.node_id = config.broker_id
        self.rack: str | None = config.get("broker.rack")
        # Cluster mode (zookeeper.connect set): metadata from the controller, replication, ISR.
        self.cluster: ClusterMember | None = None
        self.replica_manager: ReplicaManager | None = None
        self.metadata: LocalMetadataStore | ClusterMetadataStore
        if config.get("zookeeper.connect"):
            from strom.broker.cluster_member import ClusterMember

            self.cluster = ClusterMember(self)
            self.metadata = self.cluster.metadata
            self.replica_manager = self.cluster.replica_manager
        else:
            self.metadata = LocalMetadataStore(config.log_dirs[0], self.node_id, config.get("cluster.id"))
        self.cluster_id = self.metadata.cluster_id
        self.default_log_config = LogConfig.from_properties(config.topic_defaults(), LogConfig())
        self.log_manager = LogManager(
            config.log_dirs,
            self.default_log_config,
            self.clock.time_ms,
            producer_id_expiration_ms=int(config.get("producer.id.expiration.ms")),
        )
        self.purgatory = Purgatory()
        self.advertised: Endpoint = Endpoint("127.0.0.1", 9092)
        self._tasks: list[asyncio.Task[None]] = []
        self._ensure_logs()

    # topic administration ----------------------------------------------------------------------
    def log_config_for(self, topic: str) -> LogConfig:
        info = self.metadata.topics.get(topic)
        overrides = info.configs if info else {}
        return LogConfig.from_properties(overrides, self.default_log_config)

    def _ensure_logs(self) -> None:
        """Open (or create) every partition log the catalogue names, as their only (leader) replica.

        A leader whose ISR is itself advances the high watermark to its log end offset on becoming
        leader, so records acknowledged before a crash (which wrote no checkpoint) are readable again.
        """
        if self.cluster is not None:
            return  # cluster mode: replicas are opened by LeaderAndIsr, high watermarks are replicated
        for info in self.metadata.topics.values():
            config = self.log_config_for(info.name)
            for p in range(info.partitions):
                plog = self.log_manager.get_or_create_log(info.name, p, config)
                plog.high_watermark = plog.log_end_offset

    def create_topic(
        self,
        name: str,
        partitions: int,
        replication_factor: int,
        configs: dict[str, str],
        validate_only: bool = False,
    ) -> TopicInfo | None:
        validate_topic_name(name)
        if name in self.metadata.topics:
            raise KafkaError(ErrorCode.TOPIC_ALREADY_EXISTS, f"topic {name!r} already exists")
        if partitions == -1:
            partitions = int(self.config.get("num.partitions"))
        if replication_factor == -1:
            replication_factor = int(self.config.get("default.replication.factor"))
        if partitions <= 0:
            raise KafkaError(ErrorCode.INVALID_PARTITIONS, "number of partitions must be larger than 0")
        if replication_factor <= 0:
            raise KafkaError(ErrorCode.INVALID_REPLICATION_FACTOR, "replication factor must be larger than 0")
        if self.cluster is not None:
            LogConfig.from_properties(configs, self.default_log_config)  # raises INVALID_CONFIG
            self.cluster.validate_assignment(partitions, replication_factor)
            if validate_only:
                return None
            return self.cluster.create_topic(name, partitions, replication_factor, configs)
        assert isinstance(self.metadata, LocalMetadataStore)
        if replication_factor > 1:
            raise KafkaError(
                ErrorCode.INVALID_REPLICATION_FACTOR,
                f"replication factor: {replication_factor} larger than available brokers: 1",
            )
        config = LogConfig.from_properties(configs, self.default_log_config)  # raises INVALID_CONFIG
        if validate_only:
            return None
        info = self.metadata.create_topic(name, partitions, replication_factor, configs)
        for p in range(partitions):
            self.log_manager.get_or_create_log(name, p, config)
        log.info("created topic %s with %d partitions", name, partitions)
        return info

    def maybe_auto_create(self, name: str) -> TopicInfo | None:
        if not self.config.get("auto.create.topics.enable"):
            return None
        try:
            return self.create_topic(name, -1, -1, {})
        except KafkaError as exc:
            if exc.code == ErrorCode.TOPIC_ALREADY_EXISTS:
                return self.metadata.topics[name]
            raise

    def delete_topic(self, name: str) -> None:
        info = self.metadata.topics.get(name)
        if info is None:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {name!r} does not exist")
        if not self.config.get("delete.topic.enable"):
            raise KafkaError(ErrorCode.TOPIC_DELETION_DISABLED, "delete.topic.enable is false")
        if self.cluster is not None:
            self.cluster.delete_topic(name)
            return
        assert isinstance(self.metadata, LocalMetadataStore)
        self.metadata.delete_topic(name)
        for p in range(info.partitions):
            self.log_manager.delete_log(name, p)
            self.purgatory.notify((name, p))
        log.info("deleted topic %s", name)

    def add_partitions(self, name: str, total: int, validate_only: bool = False) -> None:
        if self.cluster is not None:
            self.cluster.add_partitions(name, total, validate_only)
            return
        assert isinstance(self.metadata, LocalMetadataStore)
        info = self.metadata.topics.get(name)
        if info is None:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {name!r} does not exist")
        if total <= info.partitions:
            raise KafkaError(
                ErrorCode.INVALID_PARTITIONS,
                f"topic currently has {info.partitions} partitions, which is higher than or equal to "
                f"the requested {total}",
            )
        if validate_only:
            return
        config = self.log_config_for(name)
        for p in range(info.partitions, total):
            self.log_manager.get_or_create_log(name, p, config)
        self.metadata.set_partitions(name, total)

    def set_topic_configs(self, name: str, configs: dict[str, str], validate_only: bool = False) -> None:
        if name not in self.metadata.topics:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {name!r} does not exist")
        config = LogConfig.from_properties(configs, self.default_log_config)
        if validate_only:
            return
        if self.cluster is not None:
            self.cluster.set_topic_configs(name, configs)
            self.log_manager.update_config(name, config)
            return
        assert isinstance(self.metadata, LocalMetadataStore)
        self.metadata.set_configs(name, configs)
        self.log_manager.update_config(name, config)

    def partition_log(self, topic: str, partition: int) -> PartitionLog:
        """The log of a partition this broker leads, or the Kafka error a client should see."""
        if self.replica_manager is not None:
            return self.replica_manager.leader_partition(topic, partition).log
        info = self.metadata.topics.get(topic)
        if info is None or not 0 <= partition < info.partitions:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        plog = self.log_manager.get_log(topic, partition)
        if plog is None:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        return plog

    # life cycle --------------------------------------------------------------------------------
    def start_background(self) -> None:
        self._tasks.append(
            asyncio.create_task(
                self._periodic(
                    "retention", int(self.config.get("log.retention.check.interval.ms")), self._run_retention
                )
            )
        )
        self._tasks.append(
            asyncio.create_task(
                self._periodic(
                    "flush", int(self.config.get("log.flush.scheduler.interval.ms")), self._run_flush
                )
            )
        )
        self._tasks.append(asyncio.create_task(self._periodic("checkpoint", 60_000, self._checkpoint)))
        self._tasks.append(
            asyncio.create_task(
                self._periodic(
                    "producer-expiration",
                    int(self.config.get("producer.id.expiration.check.interval.ms")),
                    lambda: self.log_manager.remove_expired_producers(self.clock.time_ms()),
                )
            )
        )
        self._tasks.append(
            asyncio.create_task(self._run_cleaner(int(self.config.get("log.cleaner.backoff.ms"))))
        )
        if self.cluster is not None:
            self.cluster.start()
        # Consumer groups: replays __consumer_offsets, then serves the group APIs (handlers/groups.py).
        from strom.broker.group_service import GroupService

        self.groups = GroupService(self)
        self.groups.start()

    async def _periodic(self, name: str, interval_ms: int, job: Callable[[], object]) -> None:
        while True:
            await asyncio.sleep(max(interval_ms, 10) / 1000)
            try:
                job()
            except Exception:
                log.exception("background job %s failed", name)

    async def _run_cleaner(self, backoff_ms: int) -> None:
        """Log compaction (storage/cleaner.py) in small steps between other event-loop work."""
        from strom.storage.cleaner import LogCleaner

        cleaner = LogCleaner(self.log_manager, self.clock.time_ms)
        while True:
            steps = cleaner.clean_steps()
            try:
                for _ in steps:
                    await asyncio.sleep(0)
            except Exception:
                log.exception("background job cleaner failed")
            finally:
                steps.close()
            if cleaner.last_stats is None:
                await asyncio.sleep(max(backoff_ms, 10) / 1000)

    def _run_retention(self) -> None:
        deleted = self.log_manager.run_retention(self.clock.time_ms())
        if deleted:
            log.info("retention deleted %d segment(s)", deleted)

    def _run_flush(self) -> None:
        self.log_manager.flush_dirty(self.clock.time_ms())

    def _checkpoint(self) -> None:
        self.log_manager.checkpoint_all()

    async def stop(self) -> None:
        if self.cluster is not None and self.config.get("controlled.shutdown.enable"):
            await self.cluster.controlled_shutdown()
        groups = getattr(self, "groups", None)
        if groups is not None:
            await groups.stop()
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks.clear()
        if self.cluster is not None:
            await self.cluster.stop()
        self.log_manager.shutdown()
