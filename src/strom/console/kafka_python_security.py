"""librdkafka's security properties (``--command-config``) as kafka-python's client arguments.

Every ``strom`` command takes ``--command-config KEY=VALUE`` in librdkafka's vocabulary; the commands
built on kafka-python (`strom.console.kafka_admin`) translate the security subset of it, so the same
flags reach a TLS or SASL cluster with either library:

=========================================  ===========================================================
librdkafka                                 kafka-python
=========================================  ===========================================================
``security.protocol``                      ``security_protocol`` (PLAINTEXT, SSL, SASL_PLAINTEXT,
                                           SASL_SSL; librdkafka accepts any case, so does this)
``sasl.mechanism`` / ``sasl.mechanisms``   ``sasl_mechanism`` (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512)
``sasl.username`` / ``sasl.password``      ``sasl_plain_username`` / ``sasl_plain_password`` (kafka-python
                                           uses these for SCRAM too)
``ssl.ca.location``                        ``ssl_cafile`` (a PEM file of trusted certificates)
``ssl.certificate.location``               ``ssl_certfile`` (the client certificate, for mutual TLS)
``ssl.key.location``                       ``ssl_keyfile``
``ssl.key.password``                       ``ssl_password``
``ssl.endpoint.identification.algorithm``  ``ssl_check_hostname`` (``https`` → check, ``none`` → not)
=========================================  ===========================================================

Anything else is refused by name (`UnsupportedProperty`) rather than ignored: a property the command
would silently drop (``debug``, ``ssl.keystore.location``, GSSAPI's or OAUTHBEARER's settings) would
otherwise leave the user wondering why it had no effect. Pure: no files are read here.
"""

from __future__ import annotations

from collections.abc import Mapping

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")

_RENAMED = {
    "sasl.username": "sasl_plain_username",
    "sasl.password": "sasl_plain_password",
    "ssl.ca.location": "ssl_cafile",
    "ssl.certificate.location": "ssl_certfile",
    "ssl.key.location": "ssl_keyfile",
    "ssl.key.password": "ssl_password",
}
SUPPORTED = (
    "security.protocol",
    "sasl.mechanism",
    "sasl.mechanisms",
    *_RENAMED,
    "ssl.endpoint.identification.algorithm",
)


class UnsupportedProperty(ValueError):
    """A property (or a value of one) kafka-python cannot be given; the message names it."""


def kafka_python_security(properties: Mapping[str, str]) -> dict[str, str | bool]:
    """kafka-python's keyword arguments for librdkafka ``properties``.

    Raises:
        UnsupportedProperty: a property outside `SUPPORTED`, or a value kafka-python has no
            equivalent of.
    """
    unknown = sorted(set(properties) - set(SUPPORTED))
    if unknown:
        raise UnsupportedProperty(
            f"--command-config {', '.join(unknown)}: not supported by the commands built on kafka-python "
            f"(strom transactions, strom topics reassign), which take only {', '.join(SUPPORTED)}"
        )
    both = {properties[k].upper() for k in ("sasl.mechanism", "sasl.mechanisms") if k in properties}
    if len(both) > 1:
        raise UnsupportedProperty("--command-config sasl.mechanism and sasl.mechanisms disagree")
    out: dict[str, str | bool] = {}
    for key, value in properties.items():
        if key == "security.protocol":
            out["security_protocol"] = _one_of(key, value.upper(), PROTOCOLS)
        elif key in ("sasl.mechanism", "sasl.mechanisms"):
            out["sasl_mechanism"] = _one_of(key, value.upper(), MECHANISMS)
        elif key == "ssl.endpoint.identification.algorithm":
            out["ssl_check_hostname"] = _one_of(key, value.lower(), ("https", "none")) == "https"
        else:
            out[_RENAMED[key]] = value
    return out


FILE_PROPERTIES = ("ssl.ca.location", "ssl.certificate.location", "ssl.key.location")


def named_files(properties: Mapping[str, str]) -> list[tuple[str, str]]:
    """The ``(property, path)`` pairs of ``properties`` that name a file kafka-python will read (checked
    before connecting: kafka-python reports a missing one only as a failed connection, retried until
    the timeout)."""
    return [(key, properties[key]) for key in FILE_PROPERTIES if key in properties]


def _one_of(key: str, value: str, allowed: tuple[str, ...]) -> str:
    if value not in allowed:
        raise UnsupportedProperty(f"--command-config {key}={value}: expected one of {', '.join(allowed)}")
    return value
