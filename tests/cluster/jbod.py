"""Shared by the JBOD (KIP-112) cluster tests: brokers with two log dirs, and DescribeLogDirs' answer."""

from __future__ import annotations

from pathlib import Path

from kafka.admin import KafkaAdminClient
from kafka.errors import ReplicaNotAvailableError

from strom.testing import BrokerProcess


def two_dirs(_broker_id: int, data_dir: Path, settings: dict[str, str]) -> BrokerProcess:
    """A `LocalCluster` broker factory: log dirs ``<data dir>/logs-a`` and ``<data dir>/logs-b``."""
    return BrokerProcess(data_dir, {**settings, "log.dirs": f"{data_dir}/logs-a,{data_dir}/logs-b"})


def dir_error(bootstrap: str, broker: int, log_dir: Path) -> int:
    """The error code DescribeLogDirs of ``broker`` gives ``log_dir`` (kafka-python's admin client)."""
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        (answer,) = admin.describe_log_dirs(brokers=[broker])
    finally:
        admin.close()
    (found,) = [d for d in answer["log_dirs"] if d["log_dir"] == str(log_dir)]
    return int(found["error_code"])


def place(bootstrap: str, broker: int, topic: str, dirs: dict[int, Path]) -> None:
    """Before ``topic`` exists: ``broker`` is to make its replica of each partition in the dir given
    (AlterReplicaLogDirs for a replica not hosted yet, Kafka's rule), not where the fewest are."""
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        answer = admin.alter_replica_log_dirs({(topic, p, broker): str(d) for p, d in dirs.items()})
    finally:
        admin.close()
    assert set(answer.values()) == {ReplicaNotAvailableError}
