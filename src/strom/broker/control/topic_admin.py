"""Topic administration: the rules, applied once for CreateTopics, auto-creation and the admin APIs.

Kafka's rules live here: legal names (ASCII alphanumerics, '.', '_', '-'; at most 249 characters; not
'.' or '..'), positive partition counts and replication factors (-1 takes the broker default),
configs that `LogConfig` accepts, and replica assignments. An assignment is either chosen rack-aware
(`strom.cluster.assignment`, the rack-alternating order) over the live brokers, or given by the
client: then every partition from 0 up must be listed once, all with the same number of distinct
replicas, each a live broker (INVALID_REPLICA_ASSIGNMENT otherwise), as Kafka's
`AdminZkClient.validateTopicCreate` checks. Where the topic is then stored (the metadata store:
ZooKeeper, or a single node's local store) is the control plane's business; this module never asks which.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from strom.broker.metadata_cache import ClusterMetadataStore
from strom.broker.ports import ControlPlane
from strom.broker.topic_info import TopicInfo
from strom.cluster.assignment import assign_replicas
from strom.protocol.errors import ErrorCode, KafkaError
from strom.storage.config import LogConfig
from strom.storage.log_manager import LogManager

log = logging.getLogger(__name__)

_LEGAL_TOPIC = re.compile(r"^[a-zA-Z0-9._-]+$")
MAX_TOPIC_NAME_LENGTH = 249
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state", "__share_group_state"})


@dataclass(frozen=True, slots=True)
class CoordinatorTopic:
    """A coordinator's records topic as its configs ask for it: compacted, uncompressed, with its own
    segment size; the replication factor and ``min.insync.replicas`` are capped at the live brokers."""

    name: str
    partitions: int
    replication_factor: int
    segment_bytes: int
    min_insync_replicas: int


def _coordinator_configs(segment_bytes: int) -> dict[str, str]:
    """A coordinator's records topic: compacted, uncompressed, with its own segment size."""
    return {
        "cleanup.policy": "compact",
        "compression.type": "uncompressed",
        "segment.bytes": str(segment_bytes),
    }


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


def validate_manual_assignment(
    assignment: Mapping[int, Sequence[int]],
    live_brokers: dict[int, str | None],
    first_partition: int = 0,
    replication_factor: int | None = None,
) -> dict[int, list[int]]:
    """A client-given assignment, checked as Kafka checks it; returns it as plain lists."""

    def invalid(message: str) -> KafkaError:
        return KafkaError(ErrorCode.INVALID_REPLICA_ASSIGNMENT, message)

    expected = list(range(first_partition, first_partition + len(assignment)))
    if sorted(assignment) != expected:
        raise invalid(
            f"partitions should be a consecutive 0-based integer sequence, got {sorted(assignment)}"
        )
    sizes = {len(replicas) for replicas in assignment.values()}
    if replication_factor is not None:
        sizes.add(replication_factor)
    if len(sizes) != 1:
        raise invalid("all partitions should have the same number of replicas")
    out: dict[int, list[int]] = {}
    for partition, replicas in sorted(assignment.items()):
        if not replicas:
            raise invalid(f"partition {partition} has no replicas")
        if len(set(replicas)) != len(replicas):
            raise invalid(f"duplicate brokers in the replica list of partition {partition}: {list(replicas)}")
        unknown = sorted(set(replicas) - set(live_brokers))
        if unknown:
            raise invalid(f"unknown broker(s) in the replica assignment: {unknown}")
        out[partition] = [int(b) for b in replicas]
    return out


class TopicAdmin:
    def __init__(
        self,
        control: ControlPlane,
        metadata: ClusterMetadataStore,
        log_manager: LogManager,
        default_log_config: LogConfig,
        default_partitions: int,
        default_replication_factor: int,
        auto_create: bool,
        delete_enable: bool,
        remote_storage_system_enable: bool = False,
    ) -> None:
        self._control = control
        self._remote_storage_system_enable = remote_storage_system_enable
        self._metadata = metadata
        self._log_manager = log_manager
        self.default_log_config = default_log_config
        self._default_partitions = default_partitions
        self._default_replication_factor = default_replication_factor
        self._auto_create = auto_create
        self._delete_enable = delete_enable

    def _check_tiering(self, config: LogConfig) -> None:
        """Kafka's refusal of ``remote.storage.enable`` on a broker without tiered storage."""
        if config.remote_storage_enable and not self._remote_storage_system_enable:
            raise KafkaError(
                ErrorCode.INVALID_CONFIG,
                "Tiered Storage functionality is disabled in the broker. "
                "Topic cannot be configured with remote log storage.",
            )

    def log_config_for(self, topic: str) -> LogConfig:
        return LogConfig.from_properties(self._metadata.topic_configs(topic), self.default_log_config)

    def resolved_counts(
        self, partitions: int, replication_factor: int, assignment: Mapping[int, Sequence[int]] | None
    ) -> tuple[int, int]:
        """The partition count and replication factor a CreateTopics entry asks for, -1 read as the
        broker's default (KIP-464), as CreateTopics v5+ reports them."""
        if assignment:
            return len(assignment), len(next(iter(assignment.values())))
        return (
            self._default_partitions if partitions == -1 else partitions,
            self._default_replication_factor if replication_factor == -1 else replication_factor,
        )

    def create_topic(
        self,
        name: str,
        partitions: int,
        replication_factor: int,
        configs: dict[str, str],
        validate_only: bool = False,
        assignment: Mapping[int, Sequence[int]] | None = None,
    ) -> TopicInfo | None:
        validate_topic_name(name)
        if name in self._metadata.topics:
            raise KafkaError(ErrorCode.TOPIC_ALREADY_EXISTS, f"topic {name!r} already exists")
        if assignment:
            if partitions != -1 or replication_factor != -1:
                raise KafkaError(
                    ErrorCode.INVALID_REQUEST,
                    "both num_partitions or replication_factor and a replica assignment were given",
                )
            chosen = validate_manual_assignment(assignment, self._control.live_brokers())
        else:
            if partitions == -1:
                partitions = self._default_partitions
            if replication_factor == -1:
                replication_factor = self._default_replication_factor
            chosen = assign_replicas(self._control.live_brokers(), partitions, replication_factor)
        self._check_tiering(LogConfig.from_properties(configs, self.default_log_config))  # INVALID_CONFIG
        if validate_only:
            return None
        info = self._control.create_topic(name, chosen, configs)
        log.info("created topic %s with %d partitions", name, len(chosen))
        return info

    def ensure_internal_topic(
        self,
        name: str,
        partitions: int,
        replication_factor: int,
        configs: dict[str, str],
        min_insync_replicas: int | None = None,
    ) -> None:
        """Create an internal topic (``__consumer_offsets``, ``__transaction_state``) on first use.

        The replication factor is capped at the live brokers, so a single node works, and
        ``min.insync.replicas``, when given, at that replication factor; a concurrent creation
        (TOPIC_ALREADY_EXISTS) is success.
        """
        if name in self._metadata.topics:
            return
        rf, configs = self._internal_settings(replication_factor, configs, min_insync_replicas)
        try:
            self.create_topic(name, partitions, rf, configs)
        except KafkaError as exc:
            if exc.code is not ErrorCode.TOPIC_ALREADY_EXISTS:
                raise

    def _internal_settings(
        self, replication_factor: int, configs: dict[str, str], min_insync_replicas: int | None
    ) -> tuple[int, dict[str, str]]:
        """An internal topic's replication factor and configs, capped at the live brokers."""
        rf = max(1, min(replication_factor, len(self._metadata.brokers)))
        configs = dict(configs)
        if min_insync_replicas is not None:
            configs["min.insync.replicas"] = str(max(1, min(min_insync_replicas, rf)))
        return rf, configs

    def ensure_coordinator_topic(self, topic: CoordinatorTopic) -> None:
        """`ensure_internal_topic` for a coordinator's records (``__transaction_state``)."""
        configs = _coordinator_configs(topic.segment_bytes)
        self.ensure_internal_topic(
            topic.name, topic.partitions, topic.replication_factor, configs, topic.min_insync_replicas
        )

    async def ensure_coordinator_topic_in_worker(self, topic: CoordinatorTopic) -> None:
        """`ensure_coordinator_topic` with the metadata store's writes in a worker thread (ZooKeeper
        round trips, a journal fsync on a single node): for a topic created in the background
        (``__share_group_state``), whose first user does not wait for it, while the broker goes on
        serving."""
        if topic.name in self._metadata.topics:
            return
        configs = _coordinator_configs(topic.segment_bytes)
        rf, configs = self._internal_settings(topic.replication_factor, configs, topic.min_insync_replicas)
        live = await asyncio.to_thread(self._control.live_brokers)  # a metadata-store read as well
        chosen = assign_replicas(live, topic.partitions, rf)
        try:
            await self._control.create_topic_in_worker(topic.name, chosen, configs)
        except KafkaError as exc:
            if exc.code is not ErrorCode.TOPIC_ALREADY_EXISTS:
                raise
            return
        log.info("created topic %s with %d partitions", topic.name, len(chosen))

    def maybe_auto_create(self, name: str) -> TopicInfo | None:
        """The topic created with the broker's defaults, or None when auto-creation is off.

        TOPIC_ALREADY_EXISTS is raised while a creation is on its way (known to the control plane, not
        yet to the metadata cache)."""
        if not self._auto_create:
            return None
        existing = self._metadata.topics.get(name)
        if existing is not None:
            return existing
        return self.create_topic(name, -1, -1, {})

    def delete_topic(self, name: str) -> None:
        if name not in self._metadata.topics:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {name!r} does not exist")
        if not self._delete_enable:
            raise KafkaError(ErrorCode.TOPIC_DELETION_DISABLED, "delete.topic.enable is false")
        self._control.delete_topic(name)
        log.info("deleted topic %s", name)

    def add_partitions(
        self,
        name: str,
        total: int,
        validate_only: bool = False,
        assignment: Sequence[Sequence[int]] | None = None,
    ) -> None:
        current = self._control.topic_assignment(name)
        if current is None:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {name!r} does not exist")
        if total <= len(current):
            raise KafkaError(
                ErrorCode.INVALID_PARTITIONS,
                f"topic currently has {len(current)} partitions, which is higher than or equal to "
                f"the requested {total}",
            )
        first, rf = len(current), len(current[0])
        if assignment:
            if len(assignment) != total - first:
                raise KafkaError(
                    ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                    f"{len(assignment)} replica lists given for {total - first} new partitions",
                )
            added = validate_manual_assignment(
                {first + i: list(r) for i, r in enumerate(assignment)},
                self._control.live_brokers(),
                first,
                rf,
            )
        else:
            added = assign_replicas(self._control.live_brokers(), total - first, rf, first_partition=first)
        if validate_only:
            return
        self._control.add_partitions(name, added)

    def set_topic_configs(self, name: str, configs: dict[str, str], validate_only: bool = False) -> None:
        if name not in self._metadata.topics:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {name!r} does not exist")
        config = LogConfig.from_properties(configs, self.default_log_config)
        self._check_tiering(config)
        was_tiered = self.log_config_for(name).remote_storage_enable
        if was_tiered and not config.remote_storage_enable and not config.remote_log_delete_on_disable:
            raise KafkaError(  # KIP-950: turning tiering off deletes the remote data, only when asked to
                ErrorCode.INVALID_CONFIG,
                "It is invalid to disable remote storage without deleting remote data. If you want to keep "
                "the remote data and turn to read only, set remote.storage.enable=true and "
                "remote.log.copy.disable=true. If you want to disable remote storage and delete all remote "
                "data, set remote.storage.enable=false and remote.log.delete.on.disable=true.",
            )
        if validate_only:
            return
        self._control.set_topic_configs(name, configs)
        self._log_manager.update_config(name, config)
