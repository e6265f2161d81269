"""librdkafka's security properties translated to kafka-python's client arguments
(strom.console.kafka_python_security)."""

from __future__ import annotations

import pytest
from kafka.admin import KafkaAdminClient

from strom.console.kafka_python_security import (
    SUPPORTED,
    UnsupportedProperty,
    kafka_python_security,
    named_files,
)


def test_every_security_property_is_translated() -> None:
    assert kafka_python_security(
        {
            "security.protocol": "sasl_ssl",
            "sasl.mechanisms": "SCRAM-SHA-512",
            "sasl.username": "alice",
            "sasl.password": "s3cret=x",
            "ssl.ca.location": "/pki/ca.crt",
            "ssl.certificate.location": "/pki/client.crt",
            "ssl.key.location": "/pki/client.key",
            "ssl.key.password": "keypass",
            "ssl.endpoint.identification.algorithm": "none",
        }
    ) == {
        "security_protocol": "SASL_SSL",
        "sasl_mechanism": "SCRAM-SHA-512",
        "sasl_plain_username": "alice",
        "sasl_plain_password": "s3cret=x",
        "ssl_cafile": "/pki/ca.crt",
        "ssl_certfile": "/pki/client.crt",
        "ssl_keyfile": "/pki/client.key",
        "ssl_password": "keypass",
        "ssl_check_hostname": False,
    }
    assert kafka_python_security(
        {"sasl.mechanism": "plain", "ssl.endpoint.identification.algorithm": "HTTPS"}
    ) == {
        "sasl_mechanism": "PLAIN",
        "ssl_check_hostname": True,
    }
    assert kafka_python_security({}) == {}


def test_every_argument_produced_is_one_kafka_python_takes() -> None:
    produced = kafka_python_security(
        {key: "x" for key in SUPPORTED if "mechanism" not in key and key != "security.protocol"}
        | {"sasl.mechanism": "PLAIN", "security.protocol": "SSL"}
        | {"ssl.endpoint.identification.algorithm": "https"}
    )
    assert set(produced) <= set(KafkaAdminClient.DEFAULT_CONFIG)


@pytest.mark.parametrize(
    ("properties", "message"),
    [
        ({"debug": "all"}, "--command-config debug: not supported"),
        (
            {"ssl.keystore.location": "k.p12", "acks": "1"},
            "--command-config acks, ssl.keystore.location: not",
        ),
        ({"security.protocol": "TLS"}, "--command-config security.protocol=TLS: expected one of PLAINTEXT"),
        ({"sasl.mechanism": "GSSAPI"}, "--command-config sasl.mechanism=GSSAPI: expected one of PLAIN"),
        ({"ssl.endpoint.identification.algorithm": "dns"}, "ssl.endpoint.identification.algorithm=dns"),
        ({"sasl.mechanism": "PLAIN", "sasl.mechanisms": "SCRAM-SHA-256"}, "disagree"),
    ],
)
def test_what_kafka_python_cannot_take_is_refused_by_name(properties: dict[str, str], message: str) -> None:
    with pytest.raises(UnsupportedProperty, match=message):
        kafka_python_security(properties)


def test_the_files_kafka_python_will_read_are_named() -> None:
    properties = {
        "security.protocol": "SSL",
        "ssl.key.location": "/k",
        "ssl.ca.location": "/ca",
        "ssl.key.password": "p",
    }
    assert named_files(properties) == [("ssl.ca.location", "/ca"), ("ssl.key.location", "/k")]
