"""Kafka's listener settings: names, protocol map, advertised addresses, the inter-broker listener."""

from __future__ import annotations

import pytest
from tests.metadata_clients import local_client

from strom._util.errors import ConfigError
from strom.broker.config import BrokerConfig
from strom.broker.security.connection import for_listener
from strom.broker.security.credentials import ZkCredentialStore
from strom.broker.security.listeners import SecurityProtocol, parse_listener_setup


def test_default_map_names_protocols() -> None:
    setup = parse_listener_setup(["PLAINTEXT://:9092", "SASL_SSL://host:9093"], None, None, None, None)
    assert [(item.name, item.protocol) for item in setup.listeners] == [
        ("PLAINTEXT", SecurityProtocol.PLAINTEXT),
        ("SASL_SSL", SecurityProtocol.SASL_SSL),
    ]
    assert setup.listeners[0].host == "0.0.0.0"
    assert setup.inter_broker == "PLAINTEXT"
    assert setup.advertised == {"PLAINTEXT": ("0.0.0.0", 9092), "SASL_SSL": ("host", 9093)}


def test_named_listeners_with_map_and_advertised() -> None:
    setup = parse_listener_setup(
        ["client://0.0.0.0:9093", "INTERNAL://10.0.0.1:9094"],
        ["CLIENT://kafka.example.com:443"],
        "CLIENT:SASL_SSL, INTERNAL:SSL",
        "internal",
        None,
    )
    assert setup.listener("CLIENT").protocol is SecurityProtocol.SASL_SSL
    assert setup.listener("INTERNAL").prefix == "listener.name.internal."
    assert setup.advertised["CLIENT"] == ("kafka.example.com", 443)
    assert setup.advertised["INTERNAL"] == ("10.0.0.1", 9094)
    assert setup.inter_broker == "INTERNAL"


def test_security_inter_broker_protocol_picks_the_listener_of_that_name() -> None:
    setup = parse_listener_setup(["PLAINTEXT://:1", "SSL://:2"], None, None, None, "SSL")
    assert setup.inter_broker == "SSL"


@pytest.mark.parametrize(
    ("listeners", "advertised", "proto_map", "inter_name", "inter_proto", "message"),
    [
        (["CLIENT://:9092"], None, None, None, None, "no security protocol"),
        (["PLAINTEXT://:1", "plaintext://:2"], None, None, None, None, "used twice"),
        (["PLAINTEXT://:1", "SSL://:1"], None, None, None, None, "port 1 is used twice"),
        (["PLAINTEXT://:1"], ["SSL://h:2"], None, None, None, "not one of the listeners"),
        (["A://:1"], None, "A:TLS", None, None, "PROTOCOL one of"),
        (["PLAINTEXT://:1"], None, None, "PLAINTEXT", "PLAINTEXT", "only one of"),
        (["PLAINTEXT://:1"], None, None, "OTHER", None, "not one of the listeners"),
        (["SSL://:1", "SASL_SSL://:2"], None, None, None, None, "inter.broker.listener.name"),
        (["PLAINTEXT//:1"], None, None, None, None, "NAME://host:port"),
        (["PLAINTEXT://host"], None, None, None, None, "no valid port"),
    ],
)
def test_bad_settings_are_refused(
    listeners: list[str],
    advertised: list[str] | None,
    proto_map: str | None,
    inter_name: str | None,
    inter_proto: str | None,
    message: str,
) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_listener_setup(listeners, advertised, proto_map, inter_name, inter_proto)


def test_per_listener_overrides_are_accepted_and_secrets_hidden() -> None:
    jaas = 'org.apache.kafka.common.security.plain.PlainLoginModule required user_a="secret";'
    config = BrokerConfig(
        {
            "listener.name.client.plain.sasl.jaas.config": jaas,
            "listener.name.client.ssl.client.auth": "required",
            "ssl.key.password": "hunter2",
        }
    )
    assert config.for_listener("CLIENT", "ssl.client.auth") == "required"
    assert config.for_listener("OTHER", "ssl.client.auth") == "none"
    assert config.listener_raw("CLIENT", "plain.sasl.jaas.config") == jaas
    described = {name: value for name, value, _ in config.describe()}
    assert described["listener.name.client.plain.sasl.jaas.config"] is None
    assert described["ssl.key.password"] is None
    assert described["listener.name.client.ssl.client.auth"] == "required"
    with pytest.raises(ConfigError, match="unknown broker config"):
        BrokerConfig({"listener.name.client.ssl.bogus": "x"})


def test_reauthentication_lifetime_is_zero_or_positive() -> None:
    assert BrokerConfig({"connections.max.reauth.ms": "60000"}).get("connections.max.reauth.ms") == 60000
    config = BrokerConfig({"listener.name.client.connections.max.reauth.ms": "2000"})
    assert config.for_listener("CLIENT", "connections.max.reauth.ms") == 2000
    assert config.for_listener("OTHER", "connections.max.reauth.ms") == 0
    with pytest.raises(ConfigError, match="positive number of milliseconds"):
        BrokerConfig({"connections.max.reauth.ms": "-1"})


def test_reauthentication_lifetime_per_listener_and_mechanism() -> None:
    props = {
        "listeners": "CLIENT://127.0.0.1:0",
        "listener.security.protocol.map": "CLIENT:SASL_PLAINTEXT",
        "connections.max.reauth.ms": "60000",
        "listener.name.client.connections.max.reauth.ms": "30000",
        "listener.name.client.scram-sha-512.connections.max.reauth.ms": "1000",
    }
    config = BrokerConfig(props)
    listener = parse_listener_setup(["CLIENT://127.0.0.1:0"], None, "CLIENT:SASL_PLAINTEXT", None, None)
    settings = for_listener(config, listener.listener("CLIENT"), lambda: ZkCredentialStore(local_client()[0]))
    assert settings.sasl_settings is not None
    assert settings.sasl_settings.reauth_ms == {"PLAIN": 30000, "SCRAM-SHA-256": 30000, "SCRAM-SHA-512": 1000}
    bad = BrokerConfig({**props, "listener.name.client.plain.connections.max.reauth.ms": "-5"})
    with pytest.raises(ConfigError, match=r"plain\.connections\.max\.reauth\.ms"):
        for_listener(bad, listener.listener("CLIENT"), lambda: ZkCredentialStore(local_client()[0]))
