"""Dynamic broker configuration (KIP-226) on a real broker over TCP, with confluent-kafka's AdminClient
(BROKER resources) and kafka-python's (BROKER_LOGGER): per-broker and cluster-wide values with their
sources and synonyms, applied to topics without a restart, refused for static configs, kept across a
restart; log levels changed at run time."""

from __future__ import annotations

import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewTopic,
    ResourceType,
)
from kafka.admin import ConfigResource as KpConfigResource
from kafka.admin import ConfigResourceType, KafkaAdminClient
from kafka.protocol.admin import DescribeConfigsRequest, IncrementalAlterConfigsRequest

from strom.testing import BrokerProcess


def _set(
    admin: AdminClient, broker: str, op: AlterConfigOpType = AlterConfigOpType.SET, **configs: str
) -> None:
    entries = [ConfigEntry(k.replace("_", "."), v, incremental_operation=op) for k, v in configs.items()]
    resource = ConfigResource(ResourceType.BROKER, broker, incremental_configs=entries)
    admin.incremental_alter_configs([resource])[resource].result(30)


def _kafka_python(bootstrap: str, request: Any) -> Any:
    """Send one kafka-python message over its admin client's connection: both admin clients refuse
    the BROKER resource with the empty name (the cluster default) that the protocol allows."""
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        manager = admin._manager
        return manager.run(manager.send, request)
    finally:
        admin.close()


def set_cluster_default(bootstrap: str, **configs: str) -> None:
    """IncrementalAlterConfigs SET on the BROKER resource with the empty name."""
    resource = IncrementalAlterConfigsRequest.AlterConfigsResource
    request = IncrementalAlterConfigsRequest(
        resources=[
            resource(
                resource_type=int(ConfigResourceType.BROKER),
                resource_name="",
                configs=[
                    resource.AlterableConfig(name=k.replace("_", "."), config_operation=0, value=v)
                    for k, v in configs.items()
                ],
            )
        ],
        validate_only=False,
    )
    response = _kafka_python(bootstrap, request)
    assert [(r.error_code, r.resource_name) for r in response.responses] == [(0, "")], response


def describe_cluster_default(bootstrap: str) -> dict[str, str]:
    request = DescribeConfigsRequest(
        resources=[
            DescribeConfigsRequest.DescribeConfigsResource(
                resource_type=int(ConfigResourceType.BROKER), resource_name="", configuration_keys=None
            )
        ],
        include_synonyms=False,
    )
    [result] = _kafka_python(bootstrap, request).results
    assert result.error_code == 0, result
    return {c.name: c.value for c in result.configs}


def _describe(admin: AdminClient, rtype: ResourceType, name: str) -> dict[str, Any]:
    resource = ConfigResource(rtype, name)
    result: dict[str, Any] = admin.describe_configs([resource])[resource].result(30)
    return result


def test_broker_configs_change_at_run_time(tmp_path: Path) -> None:
    with BrokerProcess(tmp_path / "b", {"log.retention.ms": "86400000"}) as broker:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        topic = f"d-{uuid.uuid4().hex[:8]}"
        admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)

        before = _describe(admin, ResourceType.BROKER, "0")["log.retention.ms"]
        assert (before.value, before.source) == ("86400000", ConfigSource.STATIC_BROKER_CONFIG.value)
        assert before.is_read_only is False
        assert _describe(admin, ResourceType.BROKER, "0")["broker.id"].is_read_only is True

        set_cluster_default(broker.bootstrap, log_retention_ms="7200000", message_max_bytes="20000")
        _set(admin, "0", log_retention_ms="3600000")  # this broker's, which wins
        described = _describe(admin, ResourceType.BROKER, "0")
        retention = described["log.retention.ms"]
        assert (retention.value, retention.source) == ("3600000", ConfigSource.DYNAMIC_BROKER_CONFIG.value)
        # Every source, strongest first (kafka-python keeps the list; confluent-kafka keys it by name).
        kp = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
        try:
            found = kp.describe_configs(
                [KpConfigResource(ConfigResourceType.BROKER, "0", {"log.retention.ms": None})],
                include_synonyms=True,
                config_filter="all",
            )["broker"]["0"]["log.retention.ms"]
        finally:
            kp.close()
        assert [(s["value"], s["source"]) for s in found["synonyms"]] == [
            ("3600000", "DYNAMIC_BROKER_CONFIG"),
            ("7200000", "DYNAMIC_DEFAULT_BROKER_CONFIG"),
            ("86400000", "STATIC_BROKER_CONFIG"),
            ("604800000", "DEFAULT_CONFIG"),
        ]
        size = described["message.max.bytes"]
        assert (size.value, size.source) == ("20000", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value)
        assert describe_cluster_default(broker.bootstrap) == {
            "log.retention.ms": "7200000",
            "message.max.bytes": "20000",
        }

        # Applied to the topic (no override of its own) at once.
        topic_configs = _describe(admin, ResourceType.TOPIC, topic)
        assert topic_configs["retention.ms"].value == "3600000"
        assert topic_configs["retention.ms"].source == ConfigSource.DYNAMIC_BROKER_CONFIG.value
        assert topic_configs["max.message.bytes"].value == "20000"
        assert topic_configs["max.message.bytes"].source == ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value
        producer = Producer({"bootstrap.servers": broker.bootstrap, "message.max.bytes": 1_000_000})
        failures: list[Any] = []
        producer.produce(topic, b"z" * 50_000, on_delivery=lambda err, _msg: failures.append(err))
        producer.flush(30)
        assert failures and failures[0] is not None and failures[0].name() == "MSG_SIZE_TOO_LARGE"

        # A config Kafka cannot change without a restart is refused, naming it.
        with pytest.raises(KafkaException) as refused:
            _set(admin, "0", num_partitions="3", log_dirs="/elsewhere")
        assert refused.value.args[0].name() == "INVALID_REQUEST"
        assert "log.dirs" in refused.value.args[0].str()
        # min.insync.replicas is one value for the leaders and the controller: the cluster's, not one
        # broker's.
        with pytest.raises(KafkaException) as one_broker:
            _set(admin, "0", min_insync_replicas="2")
        assert one_broker.value.args[0].name() == "INVALID_CONFIG"
        assert "cluster default" in one_broker.value.args[0].str()
        set_cluster_default(broker.bootstrap, min_insync_replicas="1")

        # Kept in the metadata store: still there after a restart.
        broker.restart()
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        retention = _describe(admin, ResourceType.BROKER, "0")["log.retention.ms"]
        assert (retention.value, retention.source) == ("3600000", ConfigSource.DYNAMIC_BROKER_CONFIG.value)

        # DELETE falls back to the next source.
        _set(admin, "0", AlterConfigOpType.DELETE, log_retention_ms="")
        retention = _describe(admin, ResourceType.BROKER, "0")["log.retention.ms"]
        assert (retention.value, retention.source) == (
            "7200000",
            ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value,
        )
        assert _describe(admin, ResourceType.TOPIC, topic)["retention.ms"].value == "7200000"


def test_log_levels_change_at_run_time(tmp_path: Path) -> None:
    with BrokerProcess(tmp_path / "b", {}) as broker:
        admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
        try:

            def levels() -> dict[str, str]:
                resource = KpConfigResource(ConfigResourceType.BROKER_LOGGER, "0")
                found = admin.describe_configs([resource], config_filter="all")["broker_logger"]["0"]
                return {name: str(entry["value"]) for name, entry in found.items()}

            before = levels()
            assert before["root"] in {"INFO", "WARN"}
            assert before["strom.broker.network.server"] == before["root"]
            admin.alter_configs(
                [KpConfigResource(ConfigResourceType.BROKER_LOGGER, "0", {"strom.broker": ("SET", "DEBUG")})],
                raise_on_unknown=False,
                incremental=True,
            )
            after = levels()
            assert after["strom.broker"] == "DEBUG" and after["strom.broker.network.server"] == "DEBUG"
            admin.alter_configs(
                [KpConfigResource(ConfigResourceType.BROKER_LOGGER, "0", {"strom.broker": ("DELETE", None)})],
                raise_on_unknown=False,
                incremental=True,
            )
            assert levels()["strom.broker"] == before["root"]
        finally:
            admin.close()


def _strom_configs(bootstrap: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "strom.cli.main", "--bootstrap-server", bootstrap, "configs", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_strom_configs_in_kafka_configs_words(tmp_path: Path) -> None:
    with BrokerProcess(tmp_path / "b", {}) as broker:
        b = broker.bootstrap
        brokers = ("--entity-type", "brokers")
        done = _strom_configs(
            b, "alter", *brokers, "--entity-default", "--add-config", "log.retention.ms=7200000"
        )
        assert done.stdout == "Completed updating default config for brokers in the cluster.\n", done.stderr
        done = _strom_configs(
            b, "alter", *brokers, "--entity-name", "0", "--add-config", "log.segment.bytes=2097152"
        )
        assert done.returncode == 0, done.stderr
        described = _strom_configs(b, "describe", *brokers, "--entity-name", "0")
        assert described.stdout.splitlines() == [
            "Dynamic configs for broker 0 are:",
            "  log.retention.ms=7200000 sensitive=false synonyms={"
            "DYNAMIC_DEFAULT_BROKER_CONFIG:log.retention.ms=7200000, "
            "DEFAULT_CONFIG:log.retention.ms=604800000}",
            "  log.segment.bytes=2097152 sensitive=false synonyms={"
            "DYNAMIC_BROKER_CONFIG:log.segment.bytes=2097152, DEFAULT_CONFIG:log.segment.bytes=1073741824}",
        ]
        default = _strom_configs(b, "describe", *brokers, "--entity-default")
        assert default.stdout.splitlines() == [
            "Default configs for brokers in the cluster are:",
            "  log.retention.ms=7200000 sensitive=false synonyms={"
            "DYNAMIC_DEFAULT_BROKER_CONFIG:log.retention.ms=7200000}",
        ]
        refused = _strom_configs(b, "alter", *brokers, "--entity-name", "0", "--add-config", "log.dirs=/x")
        assert (
            refused.returncode == 1
            and "Cannot update these configs dynamically: ['log.dirs']" in refused.stderr
        )
        loggers = ("--entity-type", "broker-loggers", "--entity-name", "0")
        assert _strom_configs(b, "alter", *loggers, "--add-config", "strom.broker=DEBUG").returncode == 0
        levels = _strom_configs(b, "describe", *loggers).stdout
        assert "  strom.broker=DEBUG sensitive=false synonyms={}" in levels.splitlines()
