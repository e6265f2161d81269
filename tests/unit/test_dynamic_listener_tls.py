"""A listener's key store and trust store as dynamic per-broker configs (KIP-226): accepted per broker
only, read by the listener over its static settings, described with Kafka's synonyms; and the version
of the stores a TLS context is rebuilt on (the settings and the files they name)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from strom.broker.config import BrokerConfig
from strom.broker.control.dynamic_config import (
    SOURCE_DEFAULT,
    SOURCE_DYNAMIC_BROKER,
    SOURCE_STATIC,
    DynamicBrokerConfig,
    check_dynamic,
)
from strom.broker.security.config_defs import dynamic_listener_setting
from strom.broker.security.tls import stores_version
from strom.protocol.errors import ErrorCode, KafkaError

KEY = "listener.name.client.ssl.keystore.location"


def test_which_listener_settings_are_dynamic() -> None:
    assert dynamic_listener_setting(KEY) == ("client", "ssl.keystore.location")
    assert dynamic_listener_setting("listener.name.client.ssl.truststore.certificates") == (
        "client",
        "ssl.truststore.certificates",
    )
    assert dynamic_listener_setting("listener.name.client.ssl.client.auth") is None  # a restart
    assert dynamic_listener_setting("ssl.keystore.location") is None  # broker-wide: static here


def test_a_listener_store_is_accepted_per_broker_only() -> None:
    check_dynamic({KEY: "/etc/strom/new.pem"})
    with pytest.raises(KafkaError) as default:
        check_dynamic({KEY: "/etc/strom/new.pem"}, per_broker=False)
    assert default.value.code == ErrorCode.INVALID_REQUEST
    assert "broker id must be specified" in str(default.value.message)
    with pytest.raises(KafkaError) as bad:
        check_dynamic({"listener.name.client.ssl.keystore.type": "JKS"})
    assert bad.value.code == ErrorCode.INVALID_CONFIG
    with pytest.raises(KafkaError) as static:
        check_dynamic({"listener.name.client.ssl.client.auth": "required"})
    assert static.value.code == ErrorCode.INVALID_REQUEST


def test_the_listener_reads_its_dynamic_value_over_the_static_ones() -> None:
    static = BrokerConfig(
        {"ssl.keystore.location": "/static/broker.pem", "ssl.truststore.location": "/ca.crt"}
    )
    dynamic = DynamicBrokerConfig(static)
    assert dynamic.for_listener("CLIENT", "ssl.keystore.location") == "/static/broker.pem"
    assert dynamic.replace({KEY: "/dynamic/broker.pem"}, {KEY: "/ignored.pem"})
    assert dynamic.for_listener("CLIENT", "ssl.keystore.location") == "/dynamic/broker.pem"
    assert dynamic.for_listener("OTHER", "ssl.keystore.location") == "/static/broker.pem"
    assert dynamic.listener_raw("CLIENT", "ssl.keystore.location") == "/dynamic/broker.pem"
    assert dynamic.listener_keys() == [KEY]
    assert dynamic.listener_synonyms(KEY) == [
        (KEY, "/dynamic/broker.pem", SOURCE_DYNAMIC_BROKER),
        ("ssl.keystore.location", "/static/broker.pem", SOURCE_STATIC),
    ]
    secret = "listener.name.client.ssl.key.password"
    dynamic.replace({secret: "hunter2"}, {})
    assert dynamic.listener_synonyms(secret) == [(secret, None, SOURCE_DYNAMIC_BROKER)]
    trial = dynamic.overlay({KEY: "/trial.pem"})
    assert trial.for_listener("CLIENT", "ssl.keystore.location") == "/trial.pem"
    assert dynamic.for_listener("CLIENT", "ssl.keystore.location") == "/static/broker.pem"
    assert dynamic.synonyms("ssl.enabled.protocols")[-1][2] == SOURCE_DEFAULT


def test_the_stores_version_follows_the_settings_and_the_files(tmp_path: Path) -> None:
    keystore = tmp_path / "broker.pem"
    keystore.write_text("first")
    dynamic = DynamicBrokerConfig(BrokerConfig({"ssl.keystore.location": str(keystore)}))
    first = stores_version(dynamic, "CLIENT")
    assert stores_version(dynamic, "CLIENT") == first
    keystore.write_text("second, rewritten in place")
    os.utime(keystore, ns=(1, 1))  # whatever the file system's clock resolution
    rewritten = stores_version(dynamic, "CLIENT")
    assert rewritten != first
    other = tmp_path / "other.pem"
    other.write_text("x")
    dynamic.replace({KEY: str(other)}, {})
    assert stores_version(dynamic, "CLIENT") != rewritten
