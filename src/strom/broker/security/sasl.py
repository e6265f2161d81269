"""SASL on a connection before it is authenticated (Kafka's SaslServerAuthenticator).

A client on a SASL listener sends ApiVersions (answered by the ordinary handler), then SaslHandshake
naming a mechanism among ``sasl.enabled.mechanisms``, then SaslAuthenticate requests carrying the
mechanism's tokens until the exchange completes (PLAIN: one; SCRAM: two). SaslHandshake v0 means the
legacy exchange: the tokens then travel as bare ``int32 size + bytes`` frames, both ways, and a
failure can only be told by closing. Until the exchange completes any other request closes the
connection without a reply, as in Kafka.

An unknown mechanism is answered UNSUPPORTED_SASL_MECHANISM (with the enabled list), a bad token or
wrong credentials SASL_AUTHENTICATION_FAILED with a generic message, each after
``connection.failed.authentication.delay.ms``, and then the connection is closed. The broker log says
why, naming the user but never a password or token. On success the connection's principal becomes
``User:<name>``.

Re-authentication (KIP-368). With ``connections.max.reauth.ms`` > 0 a completed exchange starts a
session of that length, which SaslAuthenticate v1+ tells the client as ``session_lifetime_ms``
(SaslAuthenticate v0 and the legacy exchange cannot say it, but their sessions end all the same, as in
Kafka). A client that has used SaslAuthenticate v1+ may start the exchange again on the same connection
with SaslHandshake v1+ at any time, also after its session has ended: same mechanism (else
UNSUPPORTED_SASL_MECHANISM and close), same principal (else SASL_AUTHENTICATION_FAILED and close); only
SaslAuthenticate may follow until it completes, and completion starts a new session. librdkafka 2.2+
does this at 90 % of the lifetime, kafka-python 3 and the Java client at 85-95 %. Any other request
arriving after the session ended closes the connection without a reply (Kafka's expired-connection
kill): a client that does not re-authenticate reconnects and logs in again. Each is logged (INFO), as
each login is.

Where an exchange stands is one `SaslState` (sasl_state.py: handshake, authenticate, legacy token,
complete, re-authenticate, failed), moved only along that module's table; `SaslAuthenticator` is its
driver, and the network layer follows it (a login or re-authentication beginning or ending moves the
connection's own state, broker/network/connection_state.py). Failure delays and session ends run on the
broker's clock.
"""

from __future__ import annotations

import hmac
import logging
import struct
from collections.abc import Callable
from dataclasses import dataclass, field

from strom._util.clock import Clock, sleep_ms
from strom.broker.security.credentials import CredentialStore
from strom.broker.security.listeners import ANONYMOUS
from strom.broker.security.sasl_state import IN_EXCHANGE, SaslState, next_sasl_state
from strom.broker.security.scram import ScramError, ScramServer
from strom.metrics.counters import AuthCounters
from strom.protocol.api import ApiKey
from strom.protocol.codec import (
    Chunk,
    CorruptFrame,
    UnsupportedVersion,
    decode_request,
    encode_response_chunks,
)
from strom.protocol.errors import ErrorCode
from strom.protocol.messages import SaslAuthenticateResponse, SaslHandshakeResponse
from strom.protocol.request_header import RequestPrefix

log = logging.getLogger(__name__)

_SIZE = struct.Struct(">i")
# The largest frame a connection may send before it is authenticated (Kafka's default
# sasl.server.max.receive.size): an unauthenticated client cannot make the broker buffer
# socket.request.max.bytes (100 MB) per frame. Larger frames close the connection.
MAX_UNAUTHENTICATED_BYTES = 512 * 1024
# Module globals for the per-request checks: an enum class's attribute lookup is a Python call.
_HANDSHAKE, _COMPLETE = SaslState.HANDSHAKE, SaslState.COMPLETE


class AuthenticationFailed(Exception):
    """The client's credentials or token are wrong; the message is for the log only."""


@dataclass(frozen=True, slots=True)
class SaslSettings:
    """One SASL listener's settings, shared by its connections."""

    listener: str
    mechanisms: tuple[str, ...]
    plain_users: dict[str, str]  # PLAIN logins from the JAAS config (user_<name>)
    credentials: Callable[[], CredentialStore]  # SCRAM credentials (looked up per exchange)
    reauth_ms: dict[str, int]  # session lifetime per mechanism (connections.max.reauth.ms; 0: no end)
    failure_delay_ms: int
    counters: AuthCounters = field(default_factory=AuthCounters)  # /metrics (socket-server-metrics)


class _Plain:
    def __init__(self, users: dict[str, str]) -> None:
        self._users = users
        self.username: str | None = None
        self.complete = False

    def step(self, token: bytes) -> bytes:
        parts = token.split(b"\0")
        if len(parts) != 3:
            raise AuthenticationFailed("malformed PLAIN token")
        try:
            authzid, user, password = (p.decode("utf-8") for p in parts)
        except UnicodeDecodeError:
            raise AuthenticationFailed("PLAIN token is not UTF-8") from None
        if not user or not password:
            raise AuthenticationFailed("PLAIN token with an empty user name or password")
        if authzid and authzid != user:
            raise AuthenticationFailed(f"authorization id of {user!r} differs from the user name")
        expected = self._users.get(user)
        # Compared in constant time, also for an unknown user (against the given password itself).
        ok = hmac.compare_digest((expected or password + "x").encode(), password.encode())
        if expected is None or not ok:
            raise AuthenticationFailed(f"wrong user name or password for {user!r}")
        self.username, self.complete = user, True
        return b""  # PLAIN's reply is empty (kafka-python and aiokafka check it)


class _Scram:
    def __init__(self, mechanism: str, store: CredentialStore) -> None:
        self._server = ScramServer(mechanism, lambda user: store.get(user, mechanism))
        self._stage = 0
        self.username: str | None = None
        self.complete = False

    def step(self, token: bytes) -> bytes:
        try:
            if self._stage == 0:
                self._stage = 1
                return self._server.first(token)
            if self._stage == 1:
                reply = self._server.final(token)
                self.username, self.complete = self._server.username, True
                return reply
        except ScramError as exc:
            raise AuthenticationFailed(str(exc)) from None
        raise AuthenticationFailed("SCRAM token after the exchange completed")


@dataclass(slots=True)
class Step:
    answer: list[Chunk] | None = None
    close: bool = False


class SaslAuthenticator:
    """One connection's SASL exchange, driven through the states of sasl_state.py: `gates` says which
    frames `receive` takes (every frame until `authenticated`, then re-authentications)."""

    def __init__(self, settings: SaslSettings, clock: Clock) -> None:
        self._settings = settings
        self._clock = clock
        self.state = SaslState.HANDSHAKE
        # Logged in (also while re-authenticating): the frame limit of unauthenticated clients is off.
        # Kept by _move, read per frame.
        self.authenticated = False
        self.principal = ANONYMOUS
        self._mechanism: _Plain | _Scram | None = None  # the exchange in progress (IN_EXCHANGE states)
        self._mechanism_name = ""
        self._expires_ms: int | None = None  # end of the session on the clock (connections.max.reauth.ms > 0)
        self._reauth_capable = False  # the client has sent SaslAuthenticate v1+ (Kafka's rule)
        self.reauthentications = 0

    def _move(self, target: SaslState) -> None:
        self.state = next_sasl_state(self.state, target)
        self.authenticated = target is _COMPLETE or target is SaslState.REAUTHENTICATE

    def gates(self, prefix: RequestPrefix) -> bool:
        """Whether this frame goes to `receive` rather than to the handlers: every frame until the
        connection is authenticated (ApiVersions before the handshake excepted), and afterwards a
        re-authentication (KIP-368) or any request once the session has ended (which closes).
        ``prefix``: the frame's `strom.protocol.request_header.peek_request_header`."""
        state = self.state
        if state is _HANDSHAKE:
            return prefix[0] != ApiKey.API_VERSIONS
        if state is not _COMPLETE:
            return True  # an exchange in progress takes every frame; FAILED closes
        if self._reauth_capable and prefix[0] == ApiKey.SASL_HANDSHAKE and prefix[1] >= 1:
            return True
        return self._expires_ms is not None and self._clock.monotonic_ms() > self._expires_ms

    async def receive(self, payload: bytearray, prefix: RequestPrefix, client_host: str) -> Step:
        """Take a gated frame (``prefix``: its header's, meaningless for a bare legacy token)."""
        if self.state is SaslState.LEGACY_TOKEN:
            return await self._legacy_token(bytes(payload), client_host)
        key, version, correlation_id = prefix
        starts_reauth = key == ApiKey.SASL_HANDSHAKE and version >= 1 and self._reauth_capable
        if self.state is SaslState.COMPLETE and not starts_reauth:
            self._settings.counters.expired_connections_killed += 1
            log.info(
                "closing connection from %s on %s: the SASL session of %s has expired "
                "(connections.max.reauth.ms) and API key %d is not a re-authentication",
                client_host,
                self._settings.listener,
                self.principal,
                key,
            )
            return self._fail()
        if key not in (ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE):
            log.warning(
                "closing connection from %s on %s: API key %d before SASL authentication",
                client_host,
                self._settings.listener,
                key,
            )
            return self._fail()
        try:
            body = decode_request(payload).body
        except (CorruptFrame, UnsupportedVersion) as exc:
            log.warning("closing connection from %s: malformed SASL request (%s)", client_host, exc)
            return self._fail()
        if key == ApiKey.SASL_HANDSHAKE:
            return await self._handshake(version, correlation_id, str(body.get("mechanism", "")), client_host)
        return await self._authenticate(
            version, correlation_id, bytes(body.get("auth_bytes") or b""), client_host
        )

    async def _handshake(self, version: int, correlation_id: int, mechanism: str, client_host: str) -> Step:
        enabled = list(self._settings.mechanisms)
        if self.state is SaslState.COMPLETE and mechanism != self._mechanism_name:
            log.warning(
                "closing connection from %s: re-authentication of %s with %r, not %s",
                client_host,
                self.principal,
                mechanism[:64],
                self._mechanism_name,
            )
            return self._refuse_handshake(version, correlation_id, ErrorCode.UNSUPPORTED_SASL_MECHANISM)
        if self.state in IN_EXCHANGE:
            return self._refuse_handshake(version, correlation_id, ErrorCode.ILLEGAL_SASL_STATE)
        if mechanism not in enabled:
            log.warning(
                "closing connection from %s: SASL mechanism %r is not enabled", client_host, mechanism[:64]
            )
            await self._delay()
            return self._refuse_handshake(version, correlation_id, ErrorCode.UNSUPPORTED_SASL_MECHANISM)
        if mechanism == "PLAIN":
            self._mechanism = _Plain(self._settings.plain_users)
        else:
            self._mechanism = _Scram(mechanism, self._settings.credentials())
        self._mechanism_name = mechanism
        if self.state is SaslState.COMPLETE:
            self._move(SaslState.REAUTHENTICATE)
        else:
            self._move(SaslState.LEGACY_TOKEN if version == 0 else SaslState.AUTHENTICATE)
        return self._reply(
            ApiKey.SASL_HANDSHAKE, version, correlation_id, {"error_code": 0, "mechanisms": enabled}
        )

    async def _authenticate(self, version: int, correlation_id: int, token: bytes, client_host: str) -> Step:
        mechanism = self._mechanism
        if mechanism is None or self.state not in IN_EXCHANGE:
            log.warning("closing connection from %s: SaslAuthenticate before SaslHandshake", client_host)
            body: SaslAuthenticateResponse = {
                "error_code": int(ErrorCode.ILLEGAL_SASL_STATE),
                "error_message": "SaslHandshake first",
                "auth_bytes": b"",
                "session_lifetime_ms": 0,
            }
            return self._reply(ApiKey.SASL_AUTHENTICATE, version, correlation_id, body, close=True)
        self._reauth_capable = self._reauth_capable or version >= 1
        try:
            reply = mechanism.step(token)
            if mechanism.complete and self.state is SaslState.REAUTHENTICATE:
                self._check_same_principal(mechanism)
        except AuthenticationFailed as exc:
            self._log_failure(client_host, exc)
            await self._delay()
            body = {
                "error_code": int(ErrorCode.SASL_AUTHENTICATION_FAILED),
                "error_message": f"Authentication failed during {self._mechanism_name}: invalid credentials",
                "auth_bytes": b"",
                "session_lifetime_ms": 0,
            }
            return self._reply(ApiKey.SASL_AUTHENTICATE, version, correlation_id, body, close=True)
        lifetime = self._settings.reauth_ms.get(self._mechanism_name, 0) if mechanism.complete else 0
        self._complete(mechanism, client_host)
        body = {"error_code": 0, "error_message": None, "auth_bytes": reply, "session_lifetime_ms": lifetime}
        return self._reply(ApiKey.SASL_AUTHENTICATE, version, correlation_id, body)

    async def _legacy_token(self, token: bytes, client_host: str) -> Step:
        mechanism = self._mechanism
        assert mechanism is not None
        try:
            reply = mechanism.step(token)
        except AuthenticationFailed as exc:
            self._log_failure(client_host, exc)
            await self._delay()
            return self._fail()  # the legacy exchange has no way to say why
        self._complete(mechanism, client_host)
        return Step([_SIZE.pack(len(reply)) + reply])

    def _check_same_principal(self, mechanism: _Plain | _Scram) -> None:
        if f"User:{mechanism.username}" != self.principal:
            raise AuthenticationFailed(
                f"re-authentication as User:{mechanism.username} on a connection of {self.principal}"
            )

    def _complete(self, mechanism: _Plain | _Scram, client_host: str) -> None:
        """After a token: COMPLETE once the mechanism is done (else the exchange goes on)."""
        if not mechanism.complete or mechanism.username is None:
            return
        again = self.state is SaslState.REAUTHENTICATE
        self._move(SaslState.COMPLETE)
        self.principal = f"User:{mechanism.username}"
        self._mechanism = None
        reauth_ms = self._settings.reauth_ms.get(self._mechanism_name, 0)
        self._expires_ms = self._clock.monotonic_ms() + reauth_ms if reauth_ms > 0 else None
        counters = self._settings.counters
        if again:
            self.reauthentications += 1
            counters.successful_reauthentication += 1
        else:
            counters.successful_authentication += 1
        log.info(
            "SASL %s %s from %s on %s as %s",
            self._mechanism_name,
            "re-authentication" if again else "connection",
            client_host,
            self._settings.listener,
            self.principal,
        )

    def _log_failure(self, client_host: str, exc: Exception) -> None:
        if self.state is SaslState.REAUTHENTICATE:
            self._settings.counters.failed_reauthentication += 1
        else:
            self._settings.counters.failed_authentication += 1
        log.warning(
            "SASL %s authentication from %s on %s failed: %s",
            self._mechanism_name,
            client_host,
            self._settings.listener,
            exc,
        )

    async def _delay(self) -> None:
        if self._settings.failure_delay_ms > 0:
            await sleep_ms(self._clock, self._settings.failure_delay_ms)

    def _fail(self) -> Step:
        """FAILED: the connection closes without a reply."""
        self._move(SaslState.FAILED)
        return Step(close=True)

    def _refuse_handshake(self, version: int, correlation_id: int, code: ErrorCode) -> Step:
        """A SaslHandshake error listing the enabled mechanisms; the connection closes after it."""
        body: SaslHandshakeResponse = {"error_code": int(code), "mechanisms": list(self._settings.mechanisms)}
        return self._reply(ApiKey.SASL_HANDSHAKE, version, correlation_id, body, close=True)

    def _reply(
        self,
        key: int,
        version: int,
        correlation_id: int,
        body: SaslHandshakeResponse | SaslAuthenticateResponse,
        close: bool = False,
    ) -> Step:
        """An answer; ``close``: FAILED, and the connection closes once it has gone out."""
        if close:
            self._move(SaslState.FAILED)
        return Step(encode_response_chunks(key, version, correlation_id, body), close)
