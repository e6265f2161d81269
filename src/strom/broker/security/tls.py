"""TLS for a listener from PEM settings (KIP-651), and the principal of a client certificate.

Key store: ``ssl.keystore.location`` names one PEM file holding the private key (PKCS#8, encrypted
with ``ssl.key.password`` or not) and the certificate chain, leaf first; or the same inline in
``ssl.keystore.key`` + ``ssl.keystore.certificate.chain``. Python's ``ssl`` loads keys from files
only, so inline PEM is written once to a private (0600) temporary file that is removed after loading.
Trust store: ``ssl.truststore.location`` (a PEM file of CA certificates) or inline
``ssl.truststore.certificates``. ``ssl.client.auth`` none/requested/required maps to CERT_NONE /
CERT_OPTIONAL / CERT_REQUIRED; ``ssl.enabled.protocols`` bounds the TLS versions. Every setting may be
given per listener as ``listener.name.<listener>.<setting>``.

Principal (Kafka's DefaultKafkaPrincipalBuilder): ``User:`` + the certificate subject as an RFC 2253
distinguished name (most specific RDN first, ``,+"\\<>;`` escaped), or ``User:ANONYMOUS`` without a
certificate. ``ssl.principal.mapping.rules`` (``RULE:pattern/replacement/[L|U]``, then ``DEFAULT``)
rewrite the DN as Kafka's SslPrincipalMapper does: the first rule whose pattern matches the whole DN
wins; a DN no rule matches is refused.
"""

from __future__ import annotations

import contextlib
import os
import re
import ssl
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Protocol, TypedDict

from strom._util.errors import ConfigError

_CLIENT_AUTH = {"none": ssl.CERT_NONE, "requested": ssl.CERT_OPTIONAL, "required": ssl.CERT_REQUIRED}
_VERSIONS = {
    "TLSV1": ssl.TLSVersion.TLSv1,
    "TLSV1.1": ssl.TLSVersion.TLSv1_1,
    "TLSV1.2": ssl.TLSVersion.TLSv1_2,
    "TLSV1.3": ssl.TLSVersion.TLSv1_3,
}


class Settings(Protocol):
    """What the TLS setup reads: a setting as seen by one listener (per-listener override or global)."""

    def for_listener(self, listener: str, name: str) -> Any: ...

    def listener_raw(self, listener: str, name: str) -> str | None: ...


@contextlib.contextmanager
def _pem_file(text: str) -> Iterator[str]:
    fd, path = tempfile.mkstemp(prefix="strom-pem-", suffix=".pem")  # mkstemp: mode 0600
    try:
        with os.fdopen(fd, "w") as out:
            out.write(text if text.endswith("\n") else text + "\n")
        yield path
    finally:
        os.unlink(path)


def _load_keystore(ctx: ssl.SSLContext, settings: Settings, listener: str, required: bool) -> None:
    location = settings.for_listener(listener, "ssl.keystore.location")
    key = settings.for_listener(listener, "ssl.keystore.key")
    chain = settings.for_listener(listener, "ssl.keystore.certificate.chain")
    password = settings.for_listener(listener, "ssl.key.password")
    try:
        if location:
            ctx.load_cert_chain(location, password=password)
        elif key and chain:
            with _pem_file(f"{key.strip()}\n{chain.strip()}\n") as path:
                ctx.load_cert_chain(path, password=password)
        elif key or chain:
            raise ConfigError(
                f"listener {listener}: set both ssl.keystore.key and ssl.keystore.certificate.chain"
            )
        elif required:
            raise ConfigError(
                f"listener {listener}: TLS needs ssl.keystore.location or ssl.keystore.key with "
                "ssl.keystore.certificate.chain (PEM)"
            )
    except (ssl.SSLError, OSError) as exc:
        # The message names the file, never the key or its password.
        raise ConfigError(f"listener {listener}: cannot load the key store: {exc}") from None


def _load_truststore(ctx: ssl.SSLContext, settings: Settings, listener: str) -> bool:
    location = settings.for_listener(listener, "ssl.truststore.location")
    inline = settings.for_listener(listener, "ssl.truststore.certificates")
    try:
        if location:
            ctx.load_verify_locations(cafile=location)
            return True
        if inline:
            ctx.load_verify_locations(cadata=inline)
            return True
    except (ssl.SSLError, OSError) as exc:
        raise ConfigError(f"listener {listener}: cannot load the trust store: {exc}") from None
    return False


def _versions(ctx: ssl.SSLContext, settings: Settings, listener: str) -> None:
    names = [str(n).upper() for n in settings.for_listener(listener, "ssl.enabled.protocols")]
    try:
        versions = sorted(_VERSIONS[name] for name in names)
    except KeyError as exc:
        raise ConfigError(f"ssl.enabled.protocols: unknown protocol {exc.args[0]}") from None
    if not versions:
        raise ConfigError("ssl.enabled.protocols is empty")
    ctx.minimum_version, ctx.maximum_version = versions[0], versions[-1]


def _file_version(path: object) -> tuple[int, int, int] | None:
    try:
        found = os.stat(str(path))
    except OSError:
        return None
    return found.st_ino, found.st_mtime_ns, found.st_size


def stores_version(settings: Settings, listener: str) -> tuple[object, ...]:
    """What a listener's key store and trust store are now: their settings and the files they name (inode,
    modification time, size), so a context is rebuilt when either changes (KIP-226's reload)."""
    out: list[object] = []
    for name in _STORE_SETTINGS:
        value = settings.for_listener(listener, name)
        out.append(value)
        if name.endswith(".location") and value:
            out.append(_file_version(value))
    return tuple(out)


_STORE_SETTINGS = (
    "ssl.keystore.location",
    "ssl.keystore.key",
    "ssl.keystore.certificate.chain",
    "ssl.key.password",
    "ssl.truststore.location",
    "ssl.truststore.certificates",
)


def server_context(settings: Settings, listener: str) -> ssl.SSLContext:
    """The SSLContext of a TLS listener (raises ConfigError on missing or unreadable PEM)."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    _versions(ctx, settings, listener)
    _load_keystore(ctx, settings, listener, required=True)
    has_trust = _load_truststore(ctx, settings, listener)
    client_auth = str(settings.for_listener(listener, "ssl.client.auth"))
    ctx.verify_mode = _CLIENT_AUTH[client_auth]
    if client_auth != "none" and not has_trust:
        raise ConfigError(f"listener {listener}: ssl.client.auth={client_auth} needs a trust store")
    return ctx


def client_context(settings: Settings, listener: str) -> ssl.SSLContext:
    """The SSLContext a broker uses to reach another broker's TLS listener ``listener``."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    _versions(ctx, settings, listener)
    if not _load_truststore(ctx, settings, listener):
        ctx.load_default_certs()
    _load_keystore(ctx, settings, listener, required=False)  # presented if the peer asks (mTLS)
    algorithm = settings.for_listener(listener, "ssl.endpoint.identification.algorithm")
    ctx.check_hostname = bool(algorithm) and str(algorithm).lower() == "https"
    return ctx


# -- principals ------------------------------------------------------------------------------------
# The attribute keywords Java's X500Principal.getName(RFC2253) prints by name.
_KEYWORDS = {
    "commonName": "CN",
    "countryName": "C",
    "localityName": "L",
    "stateOrProvinceName": "ST",
    "organizationName": "O",
    "organizationalUnitName": "OU",
    "streetAddress": "STREET",
    "domainComponent": "DC",
    "userId": "UID",
}


def _escape(value: str) -> str:
    out = []
    for i, ch in enumerate(value):
        if ch in ',+"\\<>;' or (ch == " " and i in (0, len(value) - 1)) or (ch == "#" and i == 0):
            out.append("\\" + ch)
        else:
            out.append(ch)
    return "".join(out)


def subject_dn(subject: tuple[tuple[tuple[str, str], ...], ...]) -> str:
    """RFC 2253 text of ``getpeercert()['subject']`` (which lists RDNs country first: reversed here)."""
    rdns = []
    for rdn in reversed(subject):
        rdns.append("+".join(f"{_KEYWORDS.get(k, k)}={_escape(v)}" for k, v in rdn))
    return ",".join(rdns)


@dataclass(frozen=True, slots=True)
class _Rule:
    pattern: re.Pattern[str] | None  # None: DEFAULT
    replacement: str
    case: str


# Kafka's rule syntax: RULE:pattern/replacement/ with an optional L or U, or DEFAULT; commas separate.
_RULE = re.compile(r"\s*((DEFAULT)|RULE:((\\.|[^\\/])*)/((\\.|[^\\/])*)/([LU]?).*?)\s*(,|$)")


def parse_mapping_rules(text: str) -> list[_Rule]:
    rules: list[_Rule] = []
    pos = 0
    text = text.strip()
    while pos < len(text):
        match = _RULE.match(text, pos)
        if match is None or match.end() == pos:
            raise ConfigError(f"ssl.principal.mapping.rules: cannot parse {text[pos:]!r}")
        if match.group(2):
            rules.append(_Rule(None, "", ""))
        else:
            try:
                pattern = re.compile(match.group(3))
            except re.error as exc:
                raise ConfigError(
                    f"ssl.principal.mapping.rules: bad pattern {match.group(3)!r}: {exc}"
                ) from None
            rules.append(_Rule(pattern, match.group(5), match.group(7)))
        pos = match.end()
    return rules


def _substitute(replacement: str, groups: tuple[str | None, ...]) -> str:
    """Java's replacement syntax: ``$n`` is group n; a backslash escapes the next character."""

    def one(m: re.Match[str]) -> str:
        if m.group(1) is not None:
            return m.group(1)
        index = int(m.group(2))
        return (groups[index] if index < len(groups) else "") or ""

    return re.sub(r"\\(.)|\$(\d)", one, replacement)


def map_dn(dn: str, rules: list[_Rule]) -> str | None:
    """The user name for ``dn`` under the rules; None when no rule matches (authentication fails)."""
    for rule in rules:
        if rule.pattern is None:
            return dn
        match = rule.pattern.fullmatch(dn)
        if match is None:
            continue
        name = _substitute(rule.replacement, (match.group(0), *match.groups()))
        return name.lower() if rule.case == "L" else name.upper() if rule.case == "U" else name
    return None


class PeerCertificate(TypedDict, total=False):
    """The part of ``SSLSocket.getpeercert()`` read here (the peer's subject as RDNs of attribute pairs)."""

    subject: tuple[tuple[tuple[str, str], ...], ...]


def certificate_principal(peercert: PeerCertificate | None, rules: list[_Rule]) -> str | None:
    """``User:<mapped DN>``, ``User:ANONYMOUS`` without a certificate, None if the rules refuse it."""
    if not peercert or not peercert.get("subject"):
        return "User:ANONYMOUS"
    name = map_dn(subject_dn(peercert["subject"]), rules)
    return None if name is None else f"User:{name}"
