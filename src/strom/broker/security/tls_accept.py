"""Accepting TLS connections so that a failed handshake is seen, and logged.

With ``create_server(ssl=...)`` asyncio (and uvloop) run the handshake before the connection's protocol
hears of it, and drop a failed one without a word (an ``SSLError`` is an ``OSError``, logged only in
debug mode): an operator would never learn that clients fail to connect because of an untrusted
certificate, a TLS version, or a plaintext client. So a TLS listener accepts in clear and each new
connection starts TLS itself with ``loop.start_tls`` (the same TLS transport afterwards, so the data
path is unchanged), which raises on failure: one log line per failed handshake, with the peer address
and the reason OpenSSL gives (``CERTIFICATE_VERIFY_FAILED (unable to get local issuer certificate)``,
``WRONG_VERSION_NUMBER``, ``HTTP_REQUEST``, a timeout), never any certificate content or secret. A
peer that just closes the connection before TLS has anything to say (a TCP health check) is logged at
DEBUG only.

Theory of operation. `_Handshake` is the protocol of the clear connection: it pauses reading at once
(the ClientHello is for the TLS layer), then ``start_tls`` puts the TLS layer on the socket with
`_Handshake` as its application protocol. uvloop delivers what the first read got even when reading
was paused in ``connection_made``: those bytes are handed to the TLS layer right after its own
``connection_made`` (start_tls makes that the next callback). Application bytes can arrive in the same
read that completes the handshake, before ``start_tls`` returns; `_Handshake` keeps them, and once the
connection's real protocol (the Kafka listener's ``BufferedProtocol``, or aiohttp's request handler
on an ``https://`` HTTP listener) has seen ``connection_made`` it gets them, then the transport is
switched to it.

Rate limit: at most `LOG_BURST` lines per `LOG_WINDOW_S` per listener; past that, failures are only
counted and the next line that gets out says how many were left out, so a flood of garbage cannot fill
the log.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import time
from collections.abc import Callable, Coroutine
from typing import cast

log = logging.getLogger(__name__)

LOG_BURST = 10
LOG_WINDOW_S = 10.0


class HandshakeLog:
    """One line per failed handshake, at most `burst` per `window_s`; the rest are counted."""

    def __init__(self, listener: str, burst: int = LOG_BURST, window_s: float = LOG_WINDOW_S) -> None:
        self.listener = listener
        self._burst = burst
        self._window_s = window_s
        self._window_start = float("-inf")
        self._logged = 0
        self.suppressed = 0  # left out since the last line that got out
        self.failures = 0  # every failed handshake since start

    def failed(self, peer: str, reason: str, now_s: float | None = None) -> bool:
        """Record a failure; True if it was logged."""
        now = time.monotonic() if now_s is None else now_s
        self.failures += 1
        if now - self._window_start >= self._window_s:
            self._window_start, self._logged = now, 0
        if self._logged >= self._burst:
            self.suppressed += 1
            return False
        self._logged += 1
        more = f" ({self.suppressed} more failed since the last line)" if self.suppressed else ""
        self.suppressed = 0
        log.warning("TLS handshake from %s on %s failed: %s%s", peer, self.listener, reason, more)
        return True


def failure_reason(exc: BaseException) -> str:
    """What OpenSSL (or the timer) says went wrong, without anything the peer sent verbatim."""
    if isinstance(exc, ssl.SSLCertVerificationError):
        return f"{exc.reason or 'CERTIFICATE_VERIFY_FAILED'} ({exc.verify_message})"
    if isinstance(exc, ssl.SSLError):
        return str(exc.reason or exc.__class__.__name__)
    if isinstance(exc, TimeoutError):
        return "no complete handshake within the time limit"
    if isinstance(exc, ConnectionError | EOFError) or not str(exc):
        return f"connection closed during the handshake ({exc.__class__.__name__})"
    return f"{exc.__class__.__name__}: {exc}"


class _Handshake(asyncio.Protocol):
    """The clear connection until TLS is up; keeps what arrives before the real protocol is ready."""

    def __init__(self, acceptor: TlsAcceptor, app_factory: Callable[[], asyncio.BaseProtocol]) -> None:
        self._acceptor = acceptor
        self._app_factory = app_factory
        self._raw: list[bytes] = []  # clear bytes before the TLS layer took over (uvloop)
        self._tls_started = False
        self._early: list[bytes] = []  # application bytes before the real protocol is in place
        self._eof = False
        self._lost = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's TCPTransport does not subclass asyncio.Transport, but has its interface.
        clear = cast(asyncio.Transport, transport)
        clear.pause_reading()  # the ClientHello is for the TLS layer, not for this protocol
        peer = clear.get_extra_info("peername")
        where = f"{peer[0]}:{peer[1]}" if peer else "?"
        self._acceptor.start(self._upgrade(clear, where))

    async def _upgrade(self, transport: asyncio.Transport, where: str) -> None:
        loop = asyncio.get_running_loop()
        # start_tls swaps the protocol at once and queues the TLS layer's connection_made; this hands
        # it the bytes read so far right after that (a callback queued by a callback runs later).
        loop.call_soon(loop.call_soon, self._replay_raw, transport)
        self._tls_started = True
        try:
            tls = await loop.start_tls(
                transport,
                self,
                self._acceptor.context,
                server_side=True,
                ssl_handshake_timeout=self._acceptor.handshake_timeout_s,
            )
        except (OSError, TimeoutError, EOFError) as exc:
            transport.close()
            if isinstance(exc, ssl.SSLError | TimeoutError):
                self._acceptor.log.failed(where, failure_reason(exc))
            else:  # the peer went away before TLS said anything (a TCP health check, a client giving up)
                log.debug(
                    "connection from %s on %s closed during the TLS handshake",
                    where,
                    self._acceptor.log.listener,
                )
            return
        if tls is None or self._lost:
            return
        app = self._app_factory()
        app.connection_made(tls)
        tls.set_protocol(app)
        for data in self._early:
            _feed(app, data)
        self._early.clear()
        if self._eof and not cast(asyncio.Protocol, app).eof_received():
            tls.close()

    def _replay_raw(self, transport: asyncio.Transport) -> None:
        raw, self._raw = self._raw, []
        tls_layer = transport.get_protocol()
        for data in raw:
            if transport.is_closing():
                return
            _feed(tls_layer, data)  # asyncio's and uvloop's TLS layers are buffered

    def data_received(self, data: bytes) -> None:
        (self._early if self._tls_started else self._raw).append(bytes(data))

    def eof_received(self) -> bool:
        self._eof = True
        return True

    def connection_lost(self, exc: Exception | None) -> None:
        self._lost = True


def _feed(app: asyncio.BaseProtocol, data: bytes) -> None:
    if not hasattr(app, "get_buffer"):
        cast(asyncio.Protocol, app).data_received(data)
        return
    buffered = cast(asyncio.BufferedProtocol, app)
    view = memoryview(data)
    while view:
        buf = memoryview(buffered.get_buffer(len(view)))
        n = min(len(buf), len(view))
        buf[:n] = view[:n]
        buffered.buffer_updated(n)
        view = view[n:]


class TlsAcceptor:
    """A TLS listener's protocol factory: see the module docstring."""

    def __init__(self, context: ssl.SSLContext, listener: str, handshake_timeout_s: float) -> None:
        self.context = context
        self.handshake_timeout_s = handshake_timeout_s
        self.log = HandshakeLog(listener)
        self._upgrades: set[asyncio.Task[None]] = set()

    def factory(self, app_factory: Callable[[], asyncio.BaseProtocol]) -> Callable[[], asyncio.Protocol]:
        return lambda: _Handshake(self, app_factory)

    def start(self, upgrade: Coroutine[None, None, None]) -> None:
        task = asyncio.get_running_loop().create_task(upgrade)
        self._upgrades.add(task)
        task.add_done_callback(self._upgrades.discard)

    def cancel(self) -> None:
        """Abandon handshakes in progress (the listener stops)."""
        for task in list(self._upgrades):
            task.cancel()
