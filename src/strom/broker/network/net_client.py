"""A minimal asyncio Kafka client connection for broker-to-broker traffic (controller requests, fetchers).

One TCP connection (TCP_NODELAY; TLS and a SASL login first when the inter-broker listener asks for
them, security/client.py; when the other broker ends SASL sessions, KIP-368, the connection logs in
again on the same socket before a request sent past 85 % of the session), one request in flight at a
time (callers serialise through a lock), requests and responses encoded by `strom.protocol.codec`.
Any failure (connection lost, timeout, cancellation, an answer that does not parse or carries the
wrong correlation id) closes the connection and raises `ConnectionError`; the next `send` reconnects.
Callers own retry and back-off policy.

Theory of operation. The connection is an ``asyncio.BufferedProtocol``: the event loop receives into
buffers the protocol hands out. Size prefixes and small frames land in a scratch buffer; once a
frame's size is known and the frame does not fit there, it gets a buffer of its own and the rest of it
is received straight into place. A replica fetcher's response (the leader's batches, often hundreds of
kilobytes) is thus copied once, from the socket into the buffer that the decoded response's records
are views of and that the follower's log writes from; a stream reader would copy it three times more
(its buffer, its growth, the slice it returns). The time limits (of a request's round trip, of a
connection attempt) are deadlines on the broker's clock (`strom._util.clock.Deadline`): timers that
cancel the sending task, not tasks of their own; so is the moment to log in again.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
from collections.abc import Mapping
from typing import Any

from strom._util.buffers import receive_buffer
from strom._util.clock import Clock, Deadline
from strom.broker.security.client import ClientSecurity
from strom.protocol.codec import CorruptFrame, UnsupportedVersion, decode_response, encode_request
from strom.protocol.messages import RequestSender

_SIZE = struct.Struct(">i")

_SCRATCH = 64 * 1024  # receive buffer for size prefixes and frames that fit in it


class _ResponseProtocol(asyncio.BufferedProtocol):
    """Cuts response frames out of the byte stream and hands each to the request waiting for it.

    With ``reuse`` every frame is received into one buffer, kept across responses (grown when a frame
    does not fit) and delivered as a view of it: no allocation and no copy besides the socket's. The
    caller must be done with a response before it sends the next request. Otherwise a frame larger
    than the scratch buffer gets a buffer of its own, and a smaller one is copied out of it.
    """

    def __init__(self, reuse: bool) -> None:
        self._reuse = reuse
        self._buf = bytearray(_SCRATCH)
        self._got = 0  # bytes received into _buf
        self._frame: bytearray | None = None  # without reuse: a large frame being received into place
        self._frame_got = 0
        self._waiter: asyncio.Future[bytearray | memoryview] | None = None
        self._drained: asyncio.Future[None] | None = None
        self._paused = False
        self.error: BaseException | None = None  # set once the connection is unusable

    # -- used by BrokerConnection -----------------------------------------------------------------
    def expect(self) -> asyncio.Future[bytearray | memoryview]:
        """The future of the next frame (one request in flight)."""
        waiter: asyncio.Future[bytearray | memoryview] = asyncio.get_running_loop().create_future()
        if self.error is not None:
            waiter.set_exception(ConnectionError(f"connection lost: {self.error!r}"))
        self._waiter = waiter
        return waiter

    async def drain(self) -> None:
        if self._paused and self.error is None:
            self._drained = asyncio.get_running_loop().create_future()
            await self._drained

    # -- transport callbacks ----------------------------------------------------------------------
    def get_buffer(self, sizehint: int) -> memoryview:
        if self._frame is not None:
            return memoryview(self._frame)[self._frame_got :]
        return memoryview(self._buf)[self._got :]

    def buffer_updated(self, nbytes: int) -> None:
        frame = self._frame
        if frame is not None:
            self._frame_got += nbytes
            if self._frame_got == len(frame):
                self._frame = None
                self._deliver(frame)
            return
        self._got += nbytes
        while self._got >= 4 and self.error is None:
            buf = self._buf
            (size,) = _SIZE.unpack_from(buf)
            if size < 4:
                self._fail(ValueError(f"response size {size}"))
                return
            end = 4 + size
            if self._got >= end:
                if self._reuse:
                    if self._got > end:  # one request in flight: nothing may follow its answer
                        self._fail(ValueError("bytes after the response to the one request in flight"))
                        return
                    self._got = 0
                    self._deliver(memoryview(buf)[4:end])
                    return
                small = buf[4:end]
                buf[: self._got - end] = buf[end : self._got]
                self._got -= end
                self._deliver(small)
                continue
            if end > len(buf):
                if self._reuse:  # grow the kept buffer (views of the old one stay valid)
                    grown = bytearray(max(end, 2 * len(buf)))
                    grown[: self._got] = memoryview(buf)[: self._got]
                    self._buf = grown
                else:  # receive the rest straight into the frame's own buffer
                    frame = receive_buffer(size)  # not zeroed: the socket fills all of it
                    frame[: self._got - 4] = memoryview(buf)[4 : self._got]
                    self._frame, self._frame_got, self._got = frame, self._got - 4, 0
            return

    def _deliver(self, frame: bytearray | memoryview) -> None:
        waiter, self._waiter = self._waiter, None
        if waiter is None:
            self._fail(ValueError("a response arrived with no request waiting for it"))
        elif not waiter.done():
            waiter.set_result(frame)

    def pause_writing(self) -> None:
        self._paused = True

    def resume_writing(self) -> None:
        self._paused = False
        self._wake_drain()

    def eof_received(self) -> bool:
        self._fail(ConnectionError("connection closed by the peer"))
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self._fail(exc or ConnectionError("connection closed"))

    def _fail(self, exc: BaseException) -> None:
        if self.error is None:
            self.error = exc
        waiter, self._waiter = self._waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_exception(ConnectionError(f"connection lost: {exc!r}"))
        self._wake_drain()

    def _wake_drain(self) -> None:
        drained, self._drained = self._drained, None
        if drained is not None and not drained.done():
            drained.set_result(None)


class BrokerConnection:
    def __init__(
        self,
        host: str,
        port: int,
        client_id: str,
        security: ClientSecurity,
        clock: Clock,
        connect_timeout_ms: int = 5000,
        reuse_receive_buffer: bool = False,
    ) -> None:
        """``security``: how this broker reaches the others (TLS, its own SASL login), given by the
        composition root; each broker of a process has its own. ``clock``: the broker's, on which
        the time limits and the re-authentication moment run. ``reuse_receive_buffer``: byte fields
        of a response (records) are views that stay valid only until the next `send` (the replica
        fetcher, which writes them to its log before fetching again)."""
        self.host = host
        self._security = security
        self._reuse = reuse_receive_buffer
        self.port = port
        self._client_id = client_id
        self._clock = clock
        self._connect_timeout_ms = connect_timeout_ms
        self._transport: asyncio.Transport | None = None
        self._protocol: _ResponseProtocol | None = None
        self._correlation_id = 0
        self._lock = asyncio.Lock()
        self._reauth_at_ms: int | None = None  # clock's monotonic time to re-authenticate (KIP-368)
        # ``send(api_key, api_version, body, timeout_ms=30_000)``: one request and its response,
        # typed per API key (the request's and response's TypedDicts of strom.protocol.messages).
        self.send: RequestSender = self.request

    async def request(
        self, api_key: int, api_version: int, body: Mapping[str, Any], timeout_ms: int = 30_000
    ) -> Any:
        """`send` for an API key known only at run time (the controller's channel): any body."""
        async with self._lock:
            try:
                async with Deadline(self._clock, timeout_ms):
                    return await self._roundtrip(api_key, api_version, body)
            except (OSError, TimeoutError, ValueError, CorruptFrame, UnsupportedVersion) as exc:
                self.close()
                raise ConnectionError(f"{self.host}:{self.port}: {exc!r}") from exc
            except asyncio.CancelledError:
                self.close()  # the answer to the abandoned request must not reach the next one
                raise

    async def _roundtrip(self, api_key: int, api_version: int, body: Mapping[str, Any]) -> Any:
        transport, protocol = self._transport, self._protocol
        if transport is None or protocol is None or protocol.error is not None or transport.is_closing():
            transport, protocol = await self._connect()
        elif self._reauth_at_ms is not None and self._clock.monotonic_ms() >= self._reauth_at_ms:
            await self._login(transport, protocol)
        return await self._exchange(transport, protocol, api_key, api_version, body)

    async def _login(self, transport: asyncio.Transport, protocol: _ResponseProtocol) -> None:
        async def exchange(
            api_key: int, api_version: int, body: Mapping[str, Any], timeout_ms: int = 0
        ) -> Any:
            del timeout_ms  # within the request's own deadline
            return await self._exchange(transport, protocol, api_key, api_version, body)

        lifetime_ms = await self._security.authenticate(exchange)
        # Kafka's clients re-authenticate at 85-95 % of the session; the low end leaves time for a
        # long-poll fetch sent just before.
        self._reauth_at_ms = self._clock.monotonic_ms() + lifetime_ms * 85 // 100 if lifetime_ms > 0 else None

    async def _exchange(
        self,
        transport: asyncio.Transport,
        protocol: _ResponseProtocol,
        api_key: int,
        api_version: int,
        body: Mapping[str, Any],
    ) -> Any:
        self._correlation_id = (self._correlation_id + 1) & 0x7FFFFFFF
        answer = protocol.expect()
        transport.write(encode_request(api_key, api_version, self._correlation_id, self._client_id, body))
        await protocol.drain()
        correlation_id, response = decode_response(api_key, api_version, await answer)
        if correlation_id != self._correlation_id:
            raise ValueError(f"correlation id {correlation_id} != {self._correlation_id}")
        return response

    async def _connect(self) -> tuple[asyncio.Transport, _ResponseProtocol]:
        self.close()
        loop = asyncio.get_running_loop()
        security = self._security
        hostname = self.host if security.tls is not None else None
        async with Deadline(self._clock, self._connect_timeout_ms):
            transport, protocol = await loop.create_connection(
                lambda: _ResponseProtocol(self._reuse),
                self.host,
                self.port,
                ssl=security.tls,
                server_hostname=hostname,
            )
        if security.mechanism is not None:
            try:
                await self._login(transport, protocol)
            except BaseException:
                transport.close()
                raise
        sock = transport.get_extra_info("socket")
        if sock is not None:  # both event loops set it already; a replication round trip depends on it
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._transport, self._protocol = transport, protocol
        return transport, protocol

    def close(self) -> None:
        if self._transport is not None:
            with contextlib.suppress(Exception):
                self._transport.close()
        self._transport = self._protocol = None


class BrokerConnections:
    """One `BrokerConnection` per other broker, made on first use and made again when the broker's
    address changed (a restarted broker on another port)."""

    def __init__(self, client_id: str, security: ClientSecurity, clock: Clock) -> None:
        self._client_id = client_id
        self._security = security
        self._clock = clock
        self._connections: dict[int, BrokerConnection] = {}

    def get(self, node_id: int, host: str, port: int) -> BrokerConnection:
        connection = self._connections.get(node_id)
        if connection is None or (connection.host, connection.port) != (host, port):
            if connection is not None:
                connection.close()
            connection = self._connections[node_id] = BrokerConnection(
                host, port, self._client_id, self._security, self._clock
            )
        return connection

    def close(self) -> None:
        for connection in self._connections.values():
            connection.close()
        self._connections.clear()
