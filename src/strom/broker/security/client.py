"""How this broker connects to other brokers: the inter-broker listener's TLS and SASL, with the
broker's own credentials.

Kafka's settings: the listener named by ``inter.broker.listener.name`` (or
``security.inter.broker.protocol``) decides TLS and SASL; ``sasl.mechanism.inter.broker.protocol``
names the mechanism; the broker's own login is ``username``/``password`` in that listener's
``listener.name.<listener>.<mechanism>.sasl.jaas.config`` (the same entry whose ``user_<name>``
options are PLAIN's logins); the trust store and, for mutual TLS, the key store are the listener's
``ssl.*`` settings, with ``ssl.endpoint.identification.algorithm=https`` checking host names.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass

from strom._util.errors import ConfigError
from strom.broker.security.jaas import parse_jaas
from strom.broker.security.listeners import Listener
from strom.broker.security.scram import ScramClient, ScramError
from strom.broker.security.tls import Settings, client_context
from strom.protocol.api import ApiKey
from strom.protocol.messages import RequestSender


@dataclass(frozen=True, slots=True)
class ClientSecurity:
    tls: ssl.SSLContext | None = None
    mechanism: str | None = None
    username: str = ""
    password: str = ""

    def __repr__(self) -> str:  # never print the password
        return (
            f"ClientSecurity(tls={self.tls is not None}, mechanism={self.mechanism}, user={self.username!r})"
        )

    async def authenticate(self, exchange: RequestSender) -> int:
        """SaslHandshake v1 + SaslAuthenticate v1 over ``exchange``: the session lifetime the broker
        answers (KIP-368; 0: no end); raises ConnectionError if refused. Also how a connection
        re-authenticates before its session ends."""
        if self.mechanism is None:
            return 0
        answer = await exchange(ApiKey.SASL_HANDSHAKE, 1, {"mechanism": self.mechanism})
        if answer["error_code"]:
            raise ConnectionError(f"SASL mechanism {self.mechanism} refused (error {answer['error_code']})")

        lifetime_ms = 0

        async def step(token: bytes) -> bytes:
            nonlocal lifetime_ms
            reply = await exchange(ApiKey.SASL_AUTHENTICATE, 1, {"auth_bytes": token})
            if reply["error_code"]:
                raise ConnectionError(
                    f"SASL {self.mechanism} login as {self.username!r} failed: {reply['error_message']}"
                )
            lifetime_ms = int(reply.get("session_lifetime_ms") or 0)
            return bytes(reply["auth_bytes"])

        if self.mechanism == "PLAIN":
            await step(b"\0" + self.username.encode() + b"\0" + self.password.encode())
            return lifetime_ms
        client = ScramClient(self.mechanism, self.username, self.password)
        try:
            server_first = await step(client.first())
            client.verify(await step(client.final(server_first)))
        except ScramError as exc:
            raise ConnectionError(f"SCRAM login as {self.username!r}: {exc}") from None
        return lifetime_ms


def inter_broker_security(settings: Settings, listener: Listener) -> ClientSecurity:
    tls = client_context(settings, listener.name) if listener.protocol.uses_tls else None
    if not listener.protocol.uses_sasl:
        return ClientSecurity(tls)
    mechanism = str(settings.for_listener(listener.name, "sasl.mechanism.inter.broker.protocol"))
    jaas = settings.listener_raw(listener.name, f"{mechanism.lower()}.sasl.jaas.config")
    if jaas is None:
        raise ConfigError(
            f"inter-broker listener {listener.name} uses SASL {mechanism}: set "
            f"{listener.prefix}{mechanism.lower()}.sasl.jaas.config with username and password"
        )
    options = parse_jaas(jaas).options
    if not options.get("username") or "password" not in options:
        raise ConfigError(
            f"{listener.prefix}{mechanism.lower()}.sasl.jaas.config: username and password are needed"
        )
    return ClientSecurity(tls, mechanism, options["username"], options["password"])
