"""What a listener's security protocol asks of each connection: TLS context, principal from the
client certificate (SSL) or from SASL (SASL_PLAINTEXT, SASL_SSL).

`ListenerSecurity` is built once per listener at start-up (`for_listener`); the network layer asks it
for a connection's principal once, when the connection is made, never per request.

Rotation (KIP-226): the settings are read through the broker's dynamic config, and
`ListenerSecurity.reload_tls` (called after every dynamic config change) rebuilds a TLS listener's
context when its key store or trust store settings changed or the files they name changed on disk. The
new context serves new connections only; the ones already open keep the session they negotiated, as in
Kafka. A store that fails to load, or a certificate that changes the subject DN or drops a SAN of the
one served (keystore_check.py, `ListenerSecurity.check_keystore`), is logged and the old context kept.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from strom._util.clock import Clock
from strom._util.errors import ConfigError
from strom.broker.security.config_defs import parse_reauth
from strom.broker.security.credentials import CredentialStore
from strom.broker.security.jaas import parse_jaas
from strom.broker.security.keystore_check import KeystoreCertificate, check_rotation, served_certificate
from strom.broker.security.listeners import ANONYMOUS, Listener, SecurityProtocol
from strom.broker.security.sasl import SaslAuthenticator, SaslSettings
from strom.broker.security.tls import (
    Settings,
    certificate_principal,
    parse_mapping_rules,
    server_context,
    stores_version,
)
from strom.broker.security.tls_accept import TlsAcceptor

log = logging.getLogger(__name__)

TLS_HANDSHAKE_TIMEOUT_S = 30.0


@dataclass(slots=True)
class ListenerSecurity:
    listener: Listener
    tls: ssl.SSLContext | None = None
    mapping_rules: list[Any] = field(default_factory=list)
    sasl_settings: SaslSettings | None = None
    _acceptor: TlsAcceptor | None = None
    _stores: tuple[object, ...] = ()  # the key store and trust store the context was built from
    certificate: KeystoreCertificate | None = None  # the key store's leaf, as served (rotation check)

    def reload_tls(self, settings: Settings) -> bool:
        """Rebuild the TLS context if its stores changed (settings or files); whether it did."""
        if self.tls is None:
            return False
        stores = stores_version(settings, self.listener.name)
        if stores == self._stores:
            return False
        try:
            certificate = self.check_keystore(settings)
            tls = listener_tls(settings, self.listener)
        except ConfigError as exc:
            log.error("listener %s keeps its TLS key store and trust store: %s", self.listener.name, exc)
            return False
        assert tls is not None
        self.tls, self._stores, self.certificate = tls, stores, certificate
        if self._acceptor is not None:
            self._acceptor.context = tls  # read by each new connection's handshake
        log.info("listener %s: TLS key store and trust store reloaded", self.listener.name)
        return True

    def check_keystore(self, settings: Settings) -> KeystoreCertificate | None:
        """The certificate of the key store ``settings`` name, if this listener may serve it instead of
        the one it serves (ConfigError in Kafka's words if not: keystore_check.py)."""
        new = served_certificate(settings, self.listener.name)
        if new is not None and self.certificate is not None:
            check_rotation(
                self.certificate,
                new,
                bool(settings.for_listener(self.listener.name, "ssl.allow.dn.changes")),
                bool(settings.for_listener(self.listener.name, "ssl.allow.san.changes")),
            )
        return new

    def authenticator(self, clock: Clock) -> SaslAuthenticator | None:
        """A new connection's SASL state, its session ends and failure delays on the broker's
        ``clock`` (None: not a SASL listener)."""
        return None if self.sasl_settings is None else SaslAuthenticator(self.sasl_settings, clock)

    @classmethod
    def plaintext(cls, host: str, port: int) -> ListenerSecurity:
        return cls(Listener("PLAINTEXT", SecurityProtocol.PLAINTEXT, host, port))

    @property
    def sasl(self) -> bool:
        return self.listener.protocol.uses_sasl

    def protocol_factory(
        self, app_factory: Callable[[], asyncio.BufferedProtocol]
    ) -> Callable[[], asyncio.BaseProtocol]:
        """What ``create_server`` makes per connection: on TLS listeners, a handshake first (on the
        event loop without blocking it, at most TLS_HANDSHAKE_TIMEOUT_S; a failure is logged, rate
        limited, and drops that connection only: tls_accept.py), then ``app_factory``'s protocol."""
        if self.tls is None:
            return app_factory
        if self._acceptor is None:
            self._acceptor = TlsAcceptor(self.tls, self.listener.name, TLS_HANDSHAKE_TIMEOUT_S)
        return self._acceptor.factory(app_factory)

    def stop_handshakes(self) -> None:
        if self._acceptor is not None:
            self._acceptor.cancel()

    def tls_principal(self, transport: asyncio.BaseTransport, client_host: str) -> str | None:
        """The principal a new connection starts with; None (logged) if its certificate is refused.

        On SASL listeners the principal comes from SASL later (Kafka ignores the certificate there).
        """
        if self.tls is None or self.sasl:
            return ANONYMOUS
        principal = certificate_principal(transport.get_extra_info("peercert"), self.mapping_rules)
        if principal is None:
            log.warning("closing TLS connection from %s: its certificate maps to no principal", client_host)
        elif principal != ANONYMOUS:
            log.info("TLS connection from %s on %s as %s", client_host, self.listener.name, principal)
        return principal


def for_listener(
    settings: Settings, listener: Listener, credentials: Callable[[], CredentialStore]
) -> ListenerSecurity:
    """The security of one listener from the broker's settings (raises ConfigError)."""
    stores = stores_version(settings, listener.name) if listener.protocol.uses_tls else ()
    tls = listener_tls(settings, listener)
    rules = parse_mapping_rules(str(settings.for_listener(listener.name, "ssl.principal.mapping.rules")))
    sasl = _sasl_settings(settings, listener, credentials) if listener.protocol.uses_sasl else None
    certificate = served_certificate(settings, listener.name) if tls is not None else None
    return ListenerSecurity(listener, tls, rules, sasl, _stores=stores, certificate=certificate)


def listener_tls(settings: Settings, listener: Listener) -> ssl.SSLContext | None:
    """A listener's TLS context (None: not a TLS listener); raises ConfigError."""
    if not listener.protocol.uses_tls:
        return None
    tls = server_context(settings, listener.name)
    if listener.protocol.uses_sasl:
        # Kafka: on SASL_SSL only a listener-prefixed ssl.client.auth applies.
        raw = settings.listener_raw(listener.name, "ssl.client.auth")
        tls.verify_mode = {"requested": ssl.CERT_OPTIONAL, "required": ssl.CERT_REQUIRED}.get(
            str(raw).lower(), ssl.CERT_NONE
        )
    return tls


def _sasl_settings(
    settings: Settings, listener: Listener, credentials: Callable[[], CredentialStore]
) -> SaslSettings:
    mechanisms = tuple(settings.for_listener(listener.name, "sasl.enabled.mechanisms"))
    if not mechanisms:
        raise ConfigError(f"listener {listener.name}: sasl.enabled.mechanisms is empty")
    plain_users: dict[str, str] = {}
    if "PLAIN" in mechanisms:
        # Kafka's broker reads only the listener- and mechanism-prefixed JAAS config.
        jaas = settings.listener_raw(listener.name, "plain.sasl.jaas.config")
        if jaas is None:
            log.warning(
                "listener %s: PLAIN is enabled but %splain.sasl.jaas.config is not set: no PLAIN logins",
                listener.name,
                listener.prefix,
            )
        else:
            plain_users = parse_jaas(jaas).plain_users()
    return SaslSettings(
        listener.name,
        mechanisms,
        plain_users,
        credentials,
        {mechanism: _reauth_ms(settings, listener, mechanism) for mechanism in mechanisms},
        int(settings.for_listener(listener.name, "connection.failed.authentication.delay.ms")),
    )


def _reauth_ms(settings: Settings, listener: Listener, mechanism: str) -> int:
    """KIP-368's session lifetime: ``listener.name.<l>.<mechanism>.connections.max.reauth.ms`` (Kafka's
    listener- and mechanism-prefixed form), else the listener's or the broker's setting."""
    name = f"{mechanism.lower()}.connections.max.reauth.ms"
    raw = settings.listener_raw(listener.name, name)
    if raw is None:
        return int(settings.for_listener(listener.name, "connections.max.reauth.ms"))
    try:
        return parse_reauth(raw)
    except ValueError as exc:
        raise ConfigError(f"invalid value for {listener.prefix}{name}: {raw!r} ({exc})") from None


def size_hint(first_byte: int, unauthenticated: bool) -> str:
    """The end of the log line for a refused frame size: which limit applied, and whether the size is a
    TLS record header (0x16 0x03 ..), i.e. a TLS client on a plaintext listener."""
    limit = (
        " (socket.request.max.bytes; not yet authenticated)"
        if unauthenticated
        else " (socket.request.max.bytes)"
    )
    return limit + (" - a TLS handshake? This listener is not SSL" if first_byte == 0x16 else "")
