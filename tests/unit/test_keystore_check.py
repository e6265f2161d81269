"""The rotation check of a listener's key store (strom.broker.security.keystore_check, KIP-226): a new
certificate keeps the served one's subject DN and every SAN, unless ssl.allow.dn.changes /
ssl.allow.san.changes say otherwise. Certificates from the tests' PKI helpers."""

from __future__ import annotations

import ipaddress

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from tests.integration.certs import name, sign

from strom._util.errors import ConfigError
from strom.broker.security.keystore_check import KeystoreCertificate, certificate_of, check_rotation


def _pem(common_name: str, *sans: x509.GeneralName) -> bytes:
    key = ec.generate_private_key(ec.SECP256R1())
    subject = name(common_name)
    certificate = sign(subject, key, subject, key, ca=False, sans=list(sans) or None)
    return certificate.public_bytes(serialization.Encoding.PEM)


LOCALHOST = x509.DNSName("localhost")
LOOPBACK = x509.IPAddress(ipaddress.ip_address("127.0.0.1"))


def _certificate(common_name: str, *sans: x509.GeneralName) -> KeystoreCertificate:
    found = certificate_of(_pem(common_name, *sans))
    assert found is not None
    return found


def test_the_leaf_is_read_with_its_sans() -> None:
    leaf = _pem("broker-0", LOCALHOST, LOOPBACK)
    served = certificate_of(leaf + _pem("some CA"))  # the chain's first certificate is the leaf
    assert served is not None
    assert served.dn == "CN=broker-0,O=Strom Test,C=US"
    assert served.sans == frozenset({"DNS:localhost", "IP:127.0.0.1"})
    assert certificate_of(b"-----BEGIN PRIVATE KEY-----\nnot a certificate\n") is None


def test_same_subject_and_more_sans_pass() -> None:
    served = _certificate("broker-0", LOCALHOST, LOOPBACK)
    check_rotation(served, _certificate("broker-0", LOOPBACK, LOCALHOST), False, False)
    check_rotation(served, _certificate("broker-0", LOCALHOST, LOOPBACK, x509.DNSName("b0")), False, False)


@pytest.mark.parametrize(
    ("name", "sans", "words"),
    [
        ("broker-1", (LOCALHOST, LOOPBACK), "Keystore DistinguishedName does not match"),
        ("broker-0", (LOCALHOST,), "Keystore SubjectAltNames do not match"),
        ("broker-0", (), "Keystore SubjectAltNames do not match"),
    ],
)
def test_another_subject_or_fewer_sans_are_refused(
    name: str, sans: tuple[x509.GeneralName, ...], words: str
) -> None:
    served = _certificate("broker-0", LOCALHOST, LOOPBACK)
    with pytest.raises(ConfigError, match=words):
        check_rotation(served, _certificate(name, *sans), False, False)


def test_the_allow_settings_lift_either_check() -> None:
    served = _certificate("broker-0", LOCALHOST, LOOPBACK)
    check_rotation(served, _certificate("broker-1", LOCALHOST, LOOPBACK), True, False)
    check_rotation(served, _certificate("broker-0"), False, True)
    with pytest.raises(ConfigError, match="SubjectAltNames"):
        check_rotation(served, _certificate("broker-1"), True, False)
