"""The login `strom.console.wire` derives from ``--command-config``'s librdkafka security properties:
which protocols and mechanisms it speaks, and what it refuses by name."""

from __future__ import annotations

import pytest

from strom.console.clients import ClientOptions
from strom.console.errors import ConsoleError
from strom.console.wire import client_security, supported


def test_plaintext_needs_neither_tls_nor_a_login() -> None:
    security = client_security({"debug": "broker"})  # a librdkafka-only property is not this client's
    assert security.tls is None and security.mechanism is None


@pytest.mark.parametrize("mechanism", ["PLAIN", "scram-sha-256", "SCRAM-SHA-512"])
def test_sasl_plaintext_logs_in_with_the_mechanism_named(mechanism: str) -> None:
    security = client_security(
        {
            "security.protocol": "sasl_plaintext",
            "sasl.mechanisms": mechanism,
            "sasl.username": "alice",
            "sasl.password": "alice-secret",
        }
    )
    assert (security.tls, security.mechanism) == (None, mechanism.upper())
    assert (security.username, security.password) == ("alice", "alice-secret")
    assert "alice-secret" not in repr(security)


def test_sasl_ssl_adds_tls_with_host_name_checks_as_configured() -> None:
    checked = client_security({"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN"})
    assert checked.tls is not None and checked.tls.check_hostname
    unchecked = client_security({"security.protocol": "SSL", "ssl.endpoint.identification.algorithm": "none"})
    assert unchecked.tls is not None and not unchecked.tls.check_hostname and unchecked.mechanism is None


@pytest.mark.parametrize(
    ("config", "named"),
    [
        ({"security.protocol": "SASL_PLAINTEXT"}, "sasl.mechanism=GSSAPI"),  # librdkafka's default
        ({"security.protocol": "SASL_SSL", "sasl.mechanism": "OAUTHBEARER"}, "sasl.mechanism=OAUTHBEARER"),
        ({"security.protocol": "TLS"}, "security.protocol=TLS"),
    ],
)
def test_what_it_cannot_speak_is_refused_by_name(config: dict[str, str], named: str) -> None:
    with pytest.raises(ConsoleError, match=named):
        client_security(config)
    assert not supported(ClientOptions("127.0.0.1:9092", config))
