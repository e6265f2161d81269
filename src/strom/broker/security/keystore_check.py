"""The check a rotated key store passes before a listener serves it (KIP-226, Kafka's SslFactory).

Theory of operation. A listener's certificate is what its clients verify: its subject distinguished
name and its subject alternative names (SANs) are what clients match host names and principals
against. Kafka therefore refuses a dynamic key-store update whose certificate changes them: the new
certificate must have the same subject DN as the one served (compared as names, or as RFC 2253 text
ignoring case) and keep every SAN the served one has (it may add more). ``ssl.allow.dn.changes`` and
``ssl.allow.san.changes`` (per listener, default false) lift either rule, as in Kafka. A key store
whose leaf certificate cannot be read is left to the TLS loader, which refuses it.

Both places a new key store arrives check it: an AlterConfigs on this broker (refused with
INVALID_CONFIG and Kafka's message) and the reload after a dynamic config change (the listener keeps
serving the certificate it has, and logs why). The certificate compared against is the one the
listener loaded, kept in memory, so a file rewritten in place is checked too.

`served_certificate` reads the leaf (the first certificate of the PEM chain) from a listener's
settings; `check_rotation` is the pure comparison.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from cryptography import x509

from strom._util.errors import ConfigError
from strom.broker.security.tls import Settings

__all__ = ["KeystoreCertificate", "check_rotation", "served_certificate"]


@dataclass(frozen=True, slots=True)
class KeystoreCertificate:
    """What the rotation check compares of a key store's leaf certificate."""

    subject: x509.Name
    sans: frozenset[str]  # "DNS:localhost", "IP:127.0.0.1", ... (OpenSSL's spelling)

    @property
    def dn(self) -> str:
        return self.subject.rfc4514_string()

    def san_text(self) -> str:
        return "[" + ", ".join(sorted(self.sans)) + "]"


_SAN_PREFIX = {
    x509.DNSName: "DNS",
    x509.IPAddress: "IP",
    x509.RFC822Name: "email",
    x509.UniformResourceIdentifier: "URI",
    x509.DirectoryName: "DirName",
    x509.RegisteredID: "RID",
    x509.OtherName: "othername",
}


def _san(name: x509.GeneralName) -> str:
    value = name.value
    text = value.rfc4514_string() if isinstance(value, x509.Name) else str(value)
    return f"{_SAN_PREFIX.get(type(name), type(name).__name__)}:{text}"


def certificate_of(pem: bytes) -> KeystoreCertificate | None:
    """The leaf of a PEM chain (None: no certificate in it)."""
    try:
        chain = x509.load_pem_x509_certificates(pem)
    except ValueError:
        return None
    leaf = chain[0]
    try:
        names = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        sans: frozenset[str] = frozenset()
    else:
        sans = frozenset(_san(name) for name in names)
    return KeystoreCertificate(leaf.subject, sans)


def served_certificate(settings: Settings, listener: str) -> KeystoreCertificate | None:
    """The leaf certificate of a listener's key store as its settings name it now (None: none readable)."""
    location = settings.for_listener(listener, "ssl.keystore.location")
    try:
        pem = Path(location).read_bytes() if location else None
    except OSError:
        return None
    if pem is None:
        chain = settings.for_listener(listener, "ssl.keystore.certificate.chain")
        pem = str(chain).encode() if chain else None
    return None if pem is None else certificate_of(pem)


def check_rotation(
    served: KeystoreCertificate, new: KeystoreCertificate, allow_dn_changes: bool, allow_san_changes: bool
) -> None:
    """Refuse (ConfigError, in Kafka's words) a new certificate whose subject DN differs from the one
    served, or which drops one of its SANs."""
    same_dn = new.subject == served.subject or new.dn.casefold() == served.dn.casefold()
    if not allow_dn_changes and not same_dn:
        raise ConfigError(
            f"Keystore DistinguishedName does not match: existing={{DN={served.dn}}}, new={{DN={new.dn}}}"
        )
    if not allow_san_changes and not new.sans >= served.sans:
        raise ConfigError(
            "Keystore SubjectAltNames do not match: "
            f"existing={{SAN={served.san_text()}}}, new={{SAN={new.san_text()}}}"
        )
