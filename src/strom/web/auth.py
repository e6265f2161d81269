"""Who is asking, on the HTTP listener: HTTP Basic against the broker's own users, or a client certificate.

Turned on by ``http.authentication.method=BASIC`` (Confluent's registry calls it
``authentication.method``), and on by default whenever a Kafka listener authenticates (SASL_PLAINTEXT or
SASL_SSL): a broker whose Kafka side asks for a login does not leave its HTTP side open.
``http.authentication.method=NONE`` turns it off explicitly.

The users are the broker's SASL users, checked as SASL checks them:

* PLAIN: the ``user_<name>="<password>"`` entries of the SASL listeners' PLAIN JAAS configs
  (``listener.name.<l>.plain.sasl.jaas.config``), compared in constant time;
* SCRAM: the stored credential of each enabled SCRAM mechanism (`strom.broker.security.credentials`):
  the password is salted and iterated with the credential's salt and count (PBKDF2, in a worker thread,
  off the event loop) and the derived StoredKey compared with the stored one in constant time. A
  successful check is remembered (keyed by an HMAC of the password under a per-process key, never the
  password) until the credential changes, so a client sending the same credentials with every request
  costs one PBKDF2 run, not one per request.

On an ``https://`` listener with ``ssl.client.auth`` (``listener.name.http.ssl.client.auth``)
``requested`` or ``required``, a verified client certificate is a login too: its principal is
``User:`` + the subject's RFC 2253 DN or the ``ssl.principal.mapping.rules`` result, as on a Kafka SSL
listener. An ``Authorization: Basic`` header wins over the certificate.

A request without credentials, or with wrong ones (after ``connection.failed.authentication.delay.ms``),
is answered 401 with ``WWW-Authenticate: Basic realm="Strom"``. With authentication off, a request is
``User:ANONYMOUS`` (or its certificate's principal), as on a PLAINTEXT Kafka listener. The principal is
left on the request (`PRINCIPAL`) for the ACL checks (`web.authz`). A request that logged in as a
broker may name the user it forwards for (`strom.web.forwarded`); then that user is the principal.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hashlib
import hmac
import logging
import secrets
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from strom._util.errors import ConfigError
from strom.acl.authorizer import parse_super_users
from strom.broker.config import BrokerConfig
from strom.broker.security.credentials import CredentialStore
from strom.broker.security.jaas import parse_jaas
from strom.broker.security.listeners import ANONYMOUS, ListenerSetup
from strom.broker.security.scram import HASHES, ScramCredential, credential_from_salted, salted_password
from strom.broker.security.tls import certificate_principal, parse_mapping_rules
from strom.web.forwarded import (
    CLIENT_HOST_HEADER,
    PRINCIPAL_HEADER,
    broker_principals,
    decode_principal,
    speaks_for_others,
)

log = logging.getLogger(__name__)

METHODS = ("NONE", "BASIC")
REALM = 'Basic realm="Strom", charset="UTF-8"'
PRINCIPAL = "strom.principal"  # the request key holding the authenticated principal
CLIENT_HOST = "strom.client_host"  # the request key of a forwarded request's client address
_CACHE_LIMIT = 4096


def parse_basic(header: str) -> tuple[str, str] | None:
    """``Basic <base64 of user:password>`` -> (user, password); None if it is not that."""
    scheme, _, token = header.strip().partition(" ")
    if scheme.lower() != "basic" or not token.strip():
        return None
    try:
        decoded = base64.b64decode(token.strip(), validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        return None
    user, sep, password = decoded.partition(":")
    if not sep or not user:
        return None
    return user, password


def scram_matches(mechanism: str, credential: ScramCredential, password: str) -> bool:
    """Whether ``password`` derives ``credential`` (the SCRAM server's own check of a password)."""
    hash_name = HASHES[mechanism]
    salted = salted_password(hash_name, password, credential.salt, credential.iterations)
    derived = credential_from_salted(hash_name, salted, credential.salt, credential.iterations)
    return hmac.compare_digest(derived.stored_key, credential.stored_key)


def plain_matches(users: dict[str, frozenset[str]], user: str, password: str) -> bool:
    """PLAIN's check: a ``user_<name>`` entry of some SASL listener with this password."""
    ok = False
    for expected in users.get(user, frozenset({password + "x"})):  # constant time for unknown users too
        ok |= hmac.compare_digest(expected.encode(), password.encode())
    return ok and user in users


def authentication_method(config: BrokerConfig, setup: ListenerSetup) -> str:
    """``http.authentication.method``, defaulting to BASIC when some Kafka listener uses SASL."""
    raw = config.get("http.authentication.method")
    if raw is None or str(raw).strip() == "":
        sasl = any(listener.protocol.uses_sasl for listener in setup.listeners)
        return "BASIC" if sasl else "NONE"
    method = str(raw).strip().upper()
    if method not in METHODS:
        raise ConfigError(f"http.authentication.method must be one of {', '.join(METHODS)}, not {raw!r}")
    return method


@dataclass(slots=True)
class HttpAuthenticator:
    method: str
    plain_users: dict[str, frozenset[str]]
    scram_mechanisms: tuple[str, ...]
    credentials: Callable[[], CredentialStore]
    mapping_rules: list[Any]
    failure_delay_ms: int
    brokers: frozenset[str] = frozenset()  # logins that may name the principal they forward for
    _key: bytes = field(default_factory=lambda: secrets.token_bytes(32))
    _verified: dict[tuple[str, str], tuple[str, bytes]] = field(default_factory=dict)

    @classmethod
    def from_config(
        cls,
        config: BrokerConfig,
        setup: ListenerSetup,
        credentials: Callable[[], CredentialStore],
        inter_broker_user: str = "",
    ) -> HttpAuthenticator:
        """``inter_broker_user``: the broker's own SASL login on the inter-broker listener ("" without)."""
        plain: dict[str, set[str]] = {}
        mechanisms: list[str] = []
        for listener in setup.listeners:
            if not listener.protocol.uses_sasl:
                continue
            enabled = list(config.for_listener(listener.name, "sasl.enabled.mechanisms"))
            mechanisms += [m for m in enabled if m in HASHES and m not in mechanisms]
            jaas = (
                config.listener_raw(listener.name, "plain.sasl.jaas.config") if "PLAIN" in enabled else None
            )
            if jaas is not None:
                for user, password in parse_jaas(jaas).plain_users().items():
                    plain.setdefault(user, set()).add(password)
        if not mechanisms:  # no SASL listener: the SCRAM users still exist (strom users)
            mechanisms = [m for m in config.get("sasl.enabled.mechanisms") if m in HASHES]
        return cls(
            authentication_method(config, setup),
            {user: frozenset(passwords) for user, passwords in plain.items()},
            tuple(sorted(mechanisms, reverse=True)),  # SCRAM-SHA-512 first
            credentials,
            parse_mapping_rules(str(config.for_listener("HTTP", "ssl.principal.mapping.rules"))),
            int(config.get("connection.failed.authentication.delay.ms")),
            broker_principals(parse_super_users(config.get("super.users")), inter_broker_user),
        )

    @property
    def enabled(self) -> bool:
        return self.method == "BASIC"

    async def authenticate(self, request: web.Request) -> str | None:
        """The request's principal, or None: answer 401."""
        header = request.headers.get("Authorization")
        if header is not None:
            login = parse_basic(header)
            if login is not None and await self._check(*login):
                return f"User:{login[0]}"
            log.info(
                "HTTP authentication from %s failed%s",
                request.remote,
                f" for {login[0]!r}" if login is not None else " (not Basic credentials)",
            )
            await asyncio.sleep(self.failure_delay_ms / 1000)
            return None
        certified = self._certificate_principal(request)
        if certified is not None and certified != ANONYMOUS:
            return certified
        return None if self.enabled else ANONYMOUS

    def _certificate_principal(self, request: web.Request) -> str | None:
        transport = request.transport
        if transport is None or transport.get_extra_info("sslcontext") is None:
            return None
        return certificate_principal(transport.get_extra_info("peercert"), self.mapping_rules)

    async def _check(self, user: str, password: str) -> bool:
        if plain_matches(self.plain_users, user, password):
            return True
        fingerprint = hmac.new(self._key, password.encode(), hashlib.sha256).digest()
        store = self.credentials()
        for mechanism in self.scram_mechanisms:
            credential = store.get(user, mechanism)
            if credential is None:
                continue
            text = credential.to_kafka()
            known = self._verified.get((user, mechanism))
            if known is not None and known[0] == text and hmac.compare_digest(known[1], fingerprint):
                return True
            if await asyncio.to_thread(scram_matches, mechanism, credential, password):
                if len(self._verified) >= _CACHE_LIMIT:
                    self._verified.clear()
                self._verified[(user, mechanism)] = (text, fingerprint)
                return True
        return False


def unauthorized() -> web.Response:
    return web.json_response(
        {"error_code": 401, "message": "Unauthorized"},
        status=401,
        headers={"WWW-Authenticate": REALM},
        content_type="application/vnd.schemaregistry.v1+json",
    )


def forbidden(message: str) -> web.Response:
    return web.json_response(
        {"error_code": 403, "message": message},
        status=403,
        content_type="application/vnd.schemaregistry.v1+json",
    )


def authentication_middleware(auth: HttpAuthenticator, public_paths: frozenset[str]) -> Any:
    """Every request gets a principal (`PRINCIPAL`) or a 401; ``public_paths`` are served to anyone.
    A broker's forward is the principal it names (`strom.web.forwarded`); anyone else naming one, 403."""

    @web.middleware
    async def authenticate(request: web.Request, handler: Any) -> web.StreamResponse:
        if request.path in public_paths:
            request[PRINCIPAL] = ANONYMOUS
        else:
            principal = await auth.authenticate(request)
            if principal is None:
                return unauthorized()
            claimed = request.headers.get(PRINCIPAL_HEADER)
            if claimed is not None:
                named = decode_principal(claimed)
                if not speaks_for_others(principal, auth.brokers) or named is None:
                    log.warning(
                        "HTTP request from %s as %s names principal %r: refused (only brokers may)",
                        request.remote,
                        principal,
                        claimed,
                    )
                    return forbidden(f"{PRINCIPAL_HEADER} is accepted from brokers only")
                principal = named
                host = request.headers.get(CLIENT_HOST_HEADER, "").strip()
                if host:
                    request[CLIENT_HOST] = host
            request[PRINCIPAL] = principal
        response: web.StreamResponse = await handler(request)
        return response

    return authenticate
