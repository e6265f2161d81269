"""Building the remote log manager from the broker's settings (the composition root calls this only
with ``remote.log.storage.system.enable``)."""

from __future__ import annotations

import os
from collections.abc import Callable

from strom._util.clock import Clock
from strom.broker.config import BrokerConfig
from strom.broker.control.topic_admin import TopicAdmin
from strom.broker.coordinators.coordinator_partitions import CoordinatorPartitions
from strom.broker.metadata_cache import ClusterMetadataStore
from strom.broker.replication.replica_manager import ReplicaManager
from strom.broker.security.client import ClientSecurity
from strom.broker.tiered.config_defs import RLMM_PREFIX, RSM_PREFIX, plugin_settings
from strom.broker.tiered.metadata_topic import RemoteLogMetadataManager
from strom.broker.tiered.remote_log_manager import RemoteLogManager
from strom.objectstore.config import open_object_store
from strom.storage.config import LogConfig
from strom.tiered.remote_storage import RemoteStorageManager

# The filesystem backend's directory when rsm.config.* names no store: beside the first log dir's logs.
DEFAULT_REMOTE_DIR = "remote-storage"


def build_remote_log_manager(
    config: BrokerConfig,
    replica_manager: ReplicaManager,
    partitions: CoordinatorPartitions,
    topics: TopicAdmin,
    metadata: ClusterMetadataStore,
    log_config_for: Callable[[str], LogConfig],
    security: ClientSecurity,
    clock: Clock,
) -> RemoteLogManager:
    store = open_object_store(
        plugin_settings(config.plugin_settings, RSM_PREFIX),
        os.path.join(config.log_dirs[0], DEFAULT_REMOTE_DIR),
    )
    rlmm = RemoteLogMetadataManager(
        plugin_settings(config.plugin_settings, RLMM_PREFIX), partitions, topics, metadata, security, clock
    )
    return RemoteLogManager(
        config.broker_id,
        lambda: list(replica_manager.partitions.values()),
        log_config_for,
        metadata,
        rlmm,
        RemoteStorageManager(store),
        clock,
        int(config.get("remote.log.manager.task.interval.ms")),
        int(config.get("remote.log.manager.copy.max.bytes.per.second")),
        int(config.get("remote.log.index.file.cache.total.size.bytes")),
        int(config.get("remote.fetch.max.wait.ms")),
    )
