"""Dynamic broker configs (broker/dynamic_config.py): sources in Kafka's order, the dynamic set, the
topic defaults they feed, and the znodes they live in (cluster/broker_config_znodes.py)."""

from __future__ import annotations

import pytest
from tests.metadata_clients import local_client

from strom.broker.config import BrokerConfig
from strom.broker.control.dynamic_config import (
    DYNAMIC_CONFIGS,
    SOURCE_DEFAULT,
    SOURCE_DYNAMIC_BROKER,
    SOURCE_DYNAMIC_DEFAULT,
    SOURCE_STATIC,
    DynamicBrokerConfig,
    check_dynamic,
)
from strom.cluster import zk_paths as paths
from strom.cluster.broker_config_znodes import BrokerConfigZnodes
from strom.protocol.errors import ErrorCode, KafkaError


def test_sources_are_reported_strongest_first() -> None:
    dynamic = DynamicBrokerConfig(BrokerConfig({"log.retention.ms": "86400000"}))
    assert dynamic.synonyms("log.retention.ms") == [
        ("log.retention.ms", "86400000", SOURCE_STATIC),
        ("log.retention.ms", "604800000", SOURCE_DEFAULT),
    ]
    assert dynamic.replace({"log.retention.ms": "3600000"}, {"log.retention.ms": "7200000"})
    assert not dynamic.replace({"log.retention.ms": "3600000"}, {"log.retention.ms": "7200000"})
    assert [s for _n, _v, s in dynamic.synonyms("log.retention.ms")] == [
        SOURCE_DYNAMIC_BROKER,
        SOURCE_DYNAMIC_DEFAULT,
        SOURCE_STATIC,
        SOURCE_DEFAULT,
    ]
    assert dynamic.topic_defaults()["retention.ms"] == "3600000"
    assert dynamic.source_of_topic_default("retention.ms") == SOURCE_DYNAMIC_BROKER
    assert dynamic.source_of_topic_default("segment.bytes") is None
    assert dynamic.log_config().retention_ms == 3_600_000


def test_the_cluster_default_applies_where_the_broker_sets_nothing() -> None:
    dynamic = DynamicBrokerConfig(BrokerConfig({}))
    dynamic.replace({}, {"message.max.bytes": "20000", "unclean.leader.election.enable": "TRUE"})
    defaults = dynamic.topic_defaults()
    assert defaults["max.message.bytes"] == "20000"
    assert defaults["unclean.leader.election.enable"] == "true"
    assert dynamic.source_of_topic_default("max.message.bytes") == SOURCE_DYNAMIC_DEFAULT


def test_static_configs_and_bad_values_are_refused() -> None:
    assert "log.retention.ms" in DYNAMIC_CONFIGS and "broker.id" not in DYNAMIC_CONFIGS
    with pytest.raises(KafkaError) as static:
        check_dynamic({"log.dirs": "/x", "log.segment.bytes": "1048576"})
    assert static.value.code == ErrorCode.INVALID_REQUEST and "log.dirs" in static.value.message
    with pytest.raises(KafkaError) as bad:
        check_dynamic({"log.retention.ms": "soon"})
    assert bad.value.code == ErrorCode.INVALID_CONFIG
    with pytest.raises(KafkaError) as policy:
        check_dynamic({"log.cleanup.policy": "sometimes"})
    assert policy.value.code == ErrorCode.INVALID_CONFIG
    check_dynamic({"log.cleanup.policy": "compact", "min.insync.replicas": "2"}, per_broker=False)
    # One broker's own min ISR would disagree with the controller's eligible leader replicas.
    with pytest.raises(KafkaError) as one_broker:
        check_dynamic({"min.insync.replicas": "2"})
    assert one_broker.value.code == ErrorCode.INVALID_CONFIG and "cluster default" in one_broker.value.message


def test_dynamic_configs_live_in_kafkas_znodes() -> None:
    client, store = local_client()
    znodes = BrokerConfigZnodes(client)
    assert znodes.read("1") == {}
    znodes.write("1", {"log.retention.ms": "1000"})
    znodes.write("<default>", {"message.max.bytes": "2000"})
    data, _ = client.store.get("/config/brokers/1")
    assert paths.decode_topic_config(data) == {"log.retention.ms": "1000"}
    assert znodes.read("<default>") == {"message.max.bytes": "2000"}
    changes = [
        client.store.get(f"{paths.CONFIG_CHANGES}/{c}")[0]
        for c in client.store.children(paths.CONFIG_CHANGES)
    ]
    assert sorted(changes) == [
        b'{"entity_path":"brokers/1","version":2}',
        b'{"entity_path":"brokers/<default>","version":2}',
    ]
    store.close()


def test_the_cleaner_backoff_is_dynamic_too() -> None:
    dynamic = DynamicBrokerConfig(BrokerConfig({"log.cleaner.backoff.ms": "15000"}))
    assert dynamic.value("log.cleaner.backoff.ms") == 15_000
    check_dynamic({"log.cleaner.backoff.ms": "500"})
    with pytest.raises(KafkaError) as refused:
        check_dynamic({"log.cleaner.backoff.ms": "-1"})
    assert refused.value.code == ErrorCode.INVALID_CONFIG
    dynamic.replace({}, {"log.cleaner.backoff.ms": "2000"})
    assert dynamic.value("log.cleaner.backoff.ms") == 2_000
    dynamic.replace({"log.cleaner.backoff.ms": "500"}, {"log.cleaner.backoff.ms": "2000"})
    assert dynamic.value("log.cleaner.backoff.ms") == 500
    assert [s for _n, _v, s in dynamic.synonyms("log.cleaner.backoff.ms")] == [
        SOURCE_DYNAMIC_BROKER,
        SOURCE_DYNAMIC_DEFAULT,
        SOURCE_STATIC,
        SOURCE_DEFAULT,
    ]
    assert "retention.ms" in dynamic.topic_defaults()  # no topic default comes from it


def test_a_stored_per_broker_min_insync_replicas_is_ignored() -> None:
    """Stored before per-broker values were refused: leaders would use it and the controller not."""
    dynamic = DynamicBrokerConfig(BrokerConfig({"min.insync.replicas": "2"}))
    dynamic.replace({"min.insync.replicas": "1", "log.retention.ms": "5000"}, {})
    assert dynamic.per_broker == {"log.retention.ms": "5000"}
    assert dynamic.log_config().min_insync_replicas == 2
