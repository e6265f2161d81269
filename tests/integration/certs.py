"""Test-time PKI with `cryptography`: a CA, a broker certificate for localhost/127.0.0.1 and client
certificates, written as PEM files (keys PKCS#8, as KIP-651 requires)."""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID


@dataclass(frozen=True)
class Pki:
    ca: Path  # CA certificate (the trust store)
    broker: Path  # broker key + chain in one file (ssl.keystore.location)
    broker_key: Path
    broker_cert: Path
    directory: Path

    def client(self, name: x509.Name, tag: str, expired: bool = False) -> tuple[Path, Path]:
        """A client certificate signed by this CA (``expired``: its validity ended yesterday)."""
        ca_key = serialization.load_pem_private_key((self.directory / "ca.key").read_bytes(), None)
        ca_cert = x509.load_pem_x509_certificate(self.ca.read_bytes())
        key = ec.generate_private_key(ec.SECP256R1())
        cert = sign(name, key, ca_cert.subject, ca_key, ca=False, sans=None, expired=expired)  # type: ignore[arg-type]
        cert_path, key_path = self.directory / f"{tag}.crt", self.directory / f"{tag}.key"
        cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        key_path.write_bytes(_pkcs8(key))
        return cert_path, key_path


def _pkcs8(key: ec.EllipticCurvePrivateKey, password: bytes | None = None) -> bytes:
    encryption: serialization.KeySerializationEncryption = (
        serialization.BestAvailableEncryption(password) if password else serialization.NoEncryption()
    )
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, encryption)


def sign(
    subject: x509.Name,
    key: ec.EllipticCurvePrivateKey,
    issuer: x509.Name,
    issuer_key: ec.EllipticCurvePrivateKey,
    ca: bool,
    sans: list[x509.GeneralName] | None,
    expired: bool = False,
) -> x509.Certificate:
    now = datetime.datetime.now(datetime.UTC) - datetime.timedelta(days=3 if expired else 0)
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=2))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    return builder.sign(issuer_key, hashes.SHA256())


def name(common_name: str, org: str = "Strom Test") -> x509.Name:
    return x509.Name(
        [
            x509.NameAttribute(NameOID.COUNTRY_NAME, "US"),
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, org),
            x509.NameAttribute(NameOID.COMMON_NAME, common_name),
        ]
    )


def make_pki(directory: Path, tag: str = "") -> Pki:
    """A fresh CA and a broker certificate valid for DNS:localhost and IP:127.0.0.1."""
    directory.mkdir(parents=True, exist_ok=True)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = name(f"Strom Test CA{tag}")
    ca_cert = sign(ca_name, ca_key, ca_name, ca_key, ca=True, sans=None)
    key = ec.generate_private_key(ec.SECP256R1())
    sans: list[x509.GeneralName] = [
        x509.DNSName("localhost"),
        x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
    ]
    cert = sign(name("localhost"), key, ca_name, ca_key, ca=False, sans=sans)
    (directory / "ca.key").write_bytes(_pkcs8(ca_key))
    ca = directory / "ca.crt"
    ca.write_bytes(ca_cert.public_bytes(serialization.Encoding.PEM))
    broker_key, broker_cert = directory / "broker.key", directory / "broker.crt"
    broker_key.write_bytes(_pkcs8(key))
    broker_cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    combined = directory / "broker.pem"
    combined.write_bytes(_pkcs8(key) + cert.public_bytes(serialization.Encoding.PEM))
    return Pki(ca, combined, broker_key, broker_cert, directory)


def new_broker_keystore(
    pki: Pki, path: Path, common_name: str = "localhost", more_sans: tuple[str, ...] = (), ip: bool = True
) -> bytes:
    """Another key and certificate from the same CA, written to ``path`` as one PEM key store (key, then
    chain); its certificate in DER, as a TLS peer presents it. By default for CN=localhost with the SANs
    DNS:localhost and IP:127.0.0.1 (``ip=False`` leaves the IP out), plus ``more_sans`` DNS names."""
    ca_key = serialization.load_pem_private_key((pki.directory / "ca.key").read_bytes(), None)
    ca_cert = x509.load_pem_x509_certificate(pki.ca.read_bytes())
    key = ec.generate_private_key(ec.SECP256R1())
    sans: list[x509.GeneralName] = [x509.DNSName("localhost"), *map(x509.DNSName, more_sans)]
    if ip:
        sans.append(x509.IPAddress(ipaddress.ip_address("127.0.0.1")))
    cert = sign(name(common_name), key, ca_cert.subject, ca_key, ca=False, sans=sans)  # type: ignore[arg-type]
    path.write_bytes(_pkcs8(key) + cert.public_bytes(serialization.Encoding.PEM))
    return cert.public_bytes(serialization.Encoding.DER)
