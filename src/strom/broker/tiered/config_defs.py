"""Tiered storage's broker settings (Kafka's names), and the plugin settings under two prefixes.

``rsm.config.*`` configures the remote storage manager (the object store: strom.objectstore.config
names them) and ``rlmm.config.*`` the remote-log metadata manager (``__remote_log_metadata``'s
partitions and replication factor, Kafka's ``remote.log.metadata.topic.*`` names). Both are passed on
without their prefix; the secret access key is never shown by DescribeConfigs.
"""

from __future__ import annotations

from collections.abc import Mapping

RSM_PREFIX = "rsm.config."
RLMM_PREFIX = "rlmm.config."
PLUGIN_PREFIXES = (RSM_PREFIX, RLMM_PREFIX)
SECRET_PLUGIN_SETTINGS = frozenset({RSM_PREFIX + "storage.aws.secret.access.key"})

# (name, parser name, default, doc), spread into the broker's table like the security settings.
TIERED_CONFIGS: tuple[tuple[str, str, str, str], ...] = (
    (
        "remote.log.storage.system.enable",
        "bool",
        "false",
        "Tiered storage on this broker (KIP-405); off, a topic's remote.storage.enable is refused.",
    ),
    (
        "remote.log.manager.task.interval.ms",
        "int",
        "30000",
        "How often the remote log manager copies and expires.",
    ),
    (
        "remote.log.manager.copy.max.bytes.per.second",
        "int",
        str(2**63 - 1),
        "Upper bound of this broker's copy rate to remote storage.",
    ),
    (
        "remote.log.index.file.cache.total.size.bytes",
        "int",
        str(1 << 30),
        "Size of the cache of remote indexes (and segment chunks) used by remote reads.",
    ),
    ("remote.fetch.max.wait.ms", "int", "500", "How long a fetch waits for data read from remote storage."),
)

METADATA_TOPIC = "__remote_log_metadata"
TOPIC_PARTITIONS = "remote.log.metadata.topic.num.partitions"
TOPIC_REPLICATION_FACTOR = "remote.log.metadata.topic.replication.factor"


def plugin_settings(props: Mapping[str, str], prefix: str) -> dict[str, str]:
    """The settings under ``prefix``, without it."""
    return {key[len(prefix) :]: value for key, value in props.items() if key.startswith(prefix)}


def is_plugin_setting(key: str) -> bool:
    return key.startswith(PLUGIN_PREFIXES)
