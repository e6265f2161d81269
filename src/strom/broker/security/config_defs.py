"""The security settings a broker accepts, under Kafka's names (declared here, parsed by config.py).

Settings that Kafka also reads per listener may be given as ``listener.name.<listener>.<setting>``
(listener name lower-case); SASL's JAAS configs are read only in their listener- and
mechanism-prefixed form ``listener.name.<listener>.<mechanism>.sasl.jaas.config``, as Kafka's broker
does.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from strom._util.errors import ConfigError

LISTENER_PREFIX = "listener.name."

# Values reported as null by DescribeConfigs (Kafka's PASSWORD type).
SENSITIVE = frozenset(
    {
        "ssl.key.password",
        "ssl.keystore.key",
        "sasl.jaas.config",
        "ssl.keystore.password",
        "ssl.truststore.password",
    }
)

MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")


def _parse_list(raw: str) -> list[str]:
    return [part.strip() for part in raw.split(",") if part.strip()]


def _parse_mechanisms(raw: str) -> list[str]:
    names = [name.upper() for name in _parse_list(raw)]
    for name in names:
        if name not in MECHANISMS:
            raise ValueError(f"SASL mechanism {name} is not supported (only {', '.join(MECHANISMS)})")
    return names


def _parse_client_auth(raw: str) -> str:
    value = raw.strip().lower()
    if value not in ("none", "requested", "required"):
        raise ValueError("expected none, requested or required")
    return value


def _parse_pem_type(raw: str) -> str:
    if raw.strip().upper() != "PEM":
        raise ValueError("only PEM stores are supported (KIP-651)")
    return "PEM"


def _parse_kafka_boolean(raw: str) -> bool:
    """Kafka's BOOLEAN type: true or false, in any case."""
    value = raw.strip().lower()
    if value not in ("true", "false"):
        raise ValueError("expected true or false")
    return value == "true"


def parse_reauth(raw: str) -> int:
    value = int(raw)
    if value < 0:
        raise ValueError("must be 0 (sessions never end) or a positive number of milliseconds")
    return value


def _parse_mechanism(raw: str) -> str:
    return _parse_mechanisms(raw)[0] if raw.strip() else ""


# (name, parser, default, doc): config.py turns these into its ConfigDef rows.
SECURITY_CONFIGS: list[tuple[str, Callable[[str], Any], str | None, str]] = [
    (
        "listener.security.protocol.map",
        str,
        None,
        "NAME:PROTOCOL pairs (PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL); default: each protocol name "
        "maps to itself.",
    ),
    ("inter.broker.listener.name", str, None, "The listener brokers use to reach each other."),
    (
        "security.inter.broker.protocol",
        str,
        None,
        "The inter-broker listener by protocol name (PLAINTEXT); exclusive with inter.broker.listener.name.",
    ),
    (
        "sasl.enabled.mechanisms",
        _parse_mechanisms,
        "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
        "SASL mechanisms served on SASL listeners (Kafka's default GSSAPI is not supported).",
    ),
    (
        "sasl.mechanism.inter.broker.protocol",
        _parse_mechanism,
        "PLAIN",
        "The mechanism a broker logs in with on a SASL inter-broker listener.",
    ),
    (
        "connections.max.reauth.ms",
        parse_reauth,
        "0",
        "KIP-368: a SASL session's lifetime; after it a client must re-authenticate on the connection, "
        "or any other request closes it (0: sessions never end).",
    ),
    (
        "connection.failed.authentication.delay.ms",
        int,
        "100",
        "Delay before a failed authentication's reply and close.",
    ),
    ("ssl.keystore.type", _parse_pem_type, "PEM", "Only PEM (KIP-651)."),
    ("ssl.keystore.location", str, None, "PEM file: PKCS#8 private key and certificate chain."),
    ("ssl.keystore.key", str, None, "Inline PEM private key (with ssl.keystore.certificate.chain)."),
    ("ssl.keystore.certificate.chain", str, None, "Inline PEM certificate chain, leaf first."),
    ("ssl.key.password", str, None, "Password of an encrypted private key."),
    ("ssl.truststore.type", _parse_pem_type, "PEM", "Only PEM (KIP-651)."),
    ("ssl.truststore.location", str, None, "PEM file of trusted CA certificates."),
    ("ssl.truststore.certificates", str, None, "Inline PEM trusted CA certificates."),
    (
        "ssl.client.auth",
        _parse_client_auth,
        "none",
        "none, requested or required: ask TLS clients for a certificate (mutual TLS).",
    ),
    ("ssl.enabled.protocols", _parse_list, "TLSv1.2,TLSv1.3", "TLS versions accepted."),
    (
        "ssl.allow.dn.changes",
        _parse_kafka_boolean,
        "false",
        "Whether a key store rotated at run time may change the certificate's subject DN.",
    ),
    (
        "ssl.allow.san.changes",
        _parse_kafka_boolean,
        "false",
        "Whether a key store rotated at run time may drop subject alternative names of the certificate.",
    ),
    (
        "ssl.endpoint.identification.algorithm",
        str,
        "https",
        "https: a broker connecting to another checks its certificate's host name; empty: it does not.",
    ),
    (
        "ssl.principal.mapping.rules",
        str,
        "DEFAULT",
        "RULE:regex/replacement/[L|U] rules mapping a certificate's DN to a user name, then DEFAULT.",
    ),
]

_OVERRIDE = re.compile(r"^listener\.name\.[a-z0-9_\-]+\.(.+)$")
_PER_LISTENER = frozenset(
    {
        "ssl.keystore.type",
        "ssl.keystore.location",
        "ssl.keystore.key",
        "ssl.keystore.certificate.chain",
        "ssl.key.password",
        "ssl.truststore.type",
        "ssl.truststore.location",
        "ssl.truststore.certificates",
        "ssl.client.auth",
        "ssl.enabled.protocols",
        "ssl.allow.dn.changes",
        "ssl.allow.san.changes",
        "ssl.principal.mapping.rules",
        "sasl.enabled.mechanisms",
        "connections.max.reauth.ms",
    }
)


def is_listener_override(key: str) -> bool:
    """Whether ``key`` is a per-listener setting Strom understands."""
    match = _OVERRIDE.match(key)
    if match is None:
        return False
    rest = match.group(1)
    if rest in _PER_LISTENER:
        return True
    mechanism, _, tail = rest.partition(".")
    # Kafka's listener- and mechanism-prefixed forms: the JAAS config, and KIP-368's session lifetime.
    return tail in ("sasl.jaas.config", "connections.max.reauth.ms") and mechanism.upper() in MECHANISMS


# The listener settings KIP-226 lets an operator change per broker at run time (Kafka's reconfigurable SSL
# configs that Strom has): a listener's key store and trust store, for certificate rotation.
DYNAMIC_LISTENER_TLS = frozenset(
    {
        "ssl.keystore.type",
        "ssl.keystore.location",
        "ssl.keystore.key",
        "ssl.keystore.certificate.chain",
        "ssl.key.password",
        "ssl.truststore.type",
        "ssl.truststore.location",
        "ssl.truststore.certificates",
    }
)
_LISTENER_SETTING = re.compile(r"^listener\.name\.([a-z0-9_\-]+)\.(.+)$")


def dynamic_listener_setting(key: str) -> tuple[str, str] | None:
    """(listener, setting) of ``listener.name.<listener>.<setting>`` when the setting may change at run
    time (`DYNAMIC_LISTENER_TLS`); None for any other key."""
    match = _LISTENER_SETTING.match(key)
    if match is None or match.group(2) not in DYNAMIC_LISTENER_TLS:
        return None
    return match.group(1), match.group(2)


def check_override(key: str) -> None:
    if key.startswith(LISTENER_PREFIX) and not is_listener_override(key):
        raise ConfigError(f"unknown per-listener config {key}")


def is_secret(key: str) -> bool:
    """Whether a setting (broker-wide or per listener) holds a secret DescribeConfigs must not show."""
    return any(key == name or key.endswith("." + name) for name in SENSITIVE)
