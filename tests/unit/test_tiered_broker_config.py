"""Tiered storage's broker settings: Kafka's names with their defaults, the ``rsm.config.*`` and
``rlmm.config.*`` prefixes passed on (the secret key never described), and the topic configs' rules."""

from __future__ import annotations

import pytest

from strom._util.errors import ConfigError
from strom.broker.config import BrokerConfig
from strom.broker.tiered.config_defs import RLMM_PREFIX, RSM_PREFIX, plugin_settings
from strom.protocol.errors import KafkaError
from strom.storage.config import LogConfig


def test_defaults_and_plugin_settings() -> None:
    config = BrokerConfig(
        {
            "remote.log.storage.system.enable": "true",
            "rsm.config.storage.s3.bucket.name": "b",
            "rsm.config.storage.aws.secret.access.key": "hush",
            "rlmm.config.remote.log.metadata.topic.num.partitions": "3",
        }
    )
    assert config.get("remote.log.storage.system.enable") is True
    assert config.get("remote.log.manager.task.interval.ms") == 30000
    assert config.get("remote.fetch.max.wait.ms") == 500
    assert plugin_settings(config.plugin_settings, RSM_PREFIX) == {
        "storage.s3.bucket.name": "b",
        "storage.aws.secret.access.key": "hush",
    }
    assert plugin_settings(config.plugin_settings, RLMM_PREFIX) == {
        "remote.log.metadata.topic.num.partitions": "3"
    }
    described = {name: value for name, value, _ in config.describe()}
    assert described["rsm.config.storage.s3.bucket.name"] == "b"
    assert described["rsm.config.storage.aws.secret.access.key"] is None
    assert BrokerConfig({}).get("remote.log.storage.system.enable") is False


def test_other_prefixes_are_still_unknown() -> None:
    with pytest.raises(ConfigError, match=r"unknown broker config: rsmx\.config\.a"):
        BrokerConfig({"rsmx.config.a": "1"})


def test_topic_configs_follow_kafkas_rules() -> None:
    config = LogConfig.from_properties({"remote.storage.enable": "true", "local.retention.ms": "1000"})
    assert (config.remote_storage_enable, config.local_retention_ms, config.local_retention_bytes) == (
        True,
        1000,
        -2,
    )
    with pytest.raises(KafkaError, match="unsupported for compacted topics"):
        LogConfig.from_properties({"remote.storage.enable": "true", "cleanup.policy": "compact"})
    with pytest.raises(KafkaError, match=r"must not be more than retention\.ms"):
        LogConfig.from_properties({"retention.ms": "100", "local.retention.ms": "1000"})
    with pytest.raises(KafkaError, match=r"must not be more than retention\.bytes"):
        LogConfig.from_properties({"retention.bytes": "100", "local.retention.bytes": "-1"})
    with pytest.raises(KafkaError, match=r"local\.retention\.ms"):
        LogConfig.from_properties({"local.retention.ms": "-3"})
