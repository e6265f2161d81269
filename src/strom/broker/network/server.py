"""The network layer: accepts connections, frames requests, runs handlers, writes responses in order.

Theory of operation. Each connection is a `_Connection` (an ``asyncio.BufferedProtocol``): the event
loop receives straight into its buffers. Small frames (``int32 size`` + payload) are cut out of a
shared receive buffer with one copy; a frame larger than ``_DIRECT_FRAME`` gets a buffer of its own
as soon as its size is known and the rest of it is received into place (after one large frame, the
next read takes only the next size prefix), so a produce request's records are never copied in
Python: storage patches them in that buffer and writes them from it. Complete frames queue in
an inbox that one worker task per connection drains.

Kafka processes one request per connection at a time and answers in request order (its muted
channel); so does the worker, running each handler inline, with one exception: an ``acks=all``
Produce (which may wait in the purgatory for the ISR) runs as a task of its own once it has
appended, so that the produce behind it is not held back. Consecutive produces thus append in
arrival order (on which idempotent sequence checks depend) and then wait concurrently; any other
request starts only once everything before it has finished. Responses leave in request order through
the connection's `ResponseWriter`, which sends stored batches with ``sendfile``
(response_writer.py). Read-ahead is bounded: reading pauses while ``_MAX_IN_FLIGHT`` requests are
queued or unanswered, or while more than ``_WRITE_HIGH_WATER`` bytes of responses wait for the socket.

Client quotas (KIP-219): a response that earned a throttle time (request_dispatch.py) goes out at once,
then the connection is THROTTLED for that time (Kafka's muted channel): reading is paused and the worker
takes no next request until it has passed.

Bad input never reaches a handler: a size outside 8..`socket.request.max.bytes` (8..512 KiB on a SASL
listener before authentication), a frame that does not parse, or an API/version we do not serve closes
that connection with a log line (Kafka's behaviour), except an unsupported ApiVersions version, which
gets UNSUPPORTED_VERSION with a v0 body so the client can retry at a version we speak (KIP-511). Every
other connection keeps being served. Each frame's header prefix is read once (request_header.py) and
routes it: to the SASL exchange, or to request_dispatch.py, which decodes it and runs its handler. TLS,
principals and SASL are set up per connection: security/.

A connection's life is the states of connection_state.py (authenticating, serving, re-authenticating,
draining, closed), moved only along that module's table: the SASL exchange's own state
(security/sasl_state.py) says when a login or re-authentication begins and ends, the end of input
starts the draining, and the transport's end is closed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import struct
from collections import deque
from time import perf_counter_ns
from typing import NamedTuple, cast

from strom._util.buffers import receive_buffer
from strom._util.clock import sleep_ms, yield_to_loop
from strom.broker.client_telemetry import ClientInformation
from strom.broker.handlers.base import HandlerPorts
from strom.broker.network.connection_state import (
    READING,
    ConnectionState,
    after_sasl_step,
    next_connection_state,
)
from strom.broker.network.request_dispatch import Answer, CloseRequested, HandlerCall, RequestDispatcher
from strom.broker.network.response_writer import ResponseWriter
from strom.broker.security.connection import ListenerSecurity, size_hint
from strom.broker.security.listeners import ANONYMOUS
from strom.broker.security.sasl import MAX_UNAUTHENTICATED_BYTES
from strom.protocol.api import ApiKey
from strom.protocol.codec import Chunk
from strom.protocol.request_header import RequestPrefix, peek_request_header

log = logging.getLogger(__name__)

_SIZE = struct.Struct(">i")
_RECV_BUFFER = 256 * 1024
_DIRECT_FRAME = 64 * 1024
_MIN_READ = 16 * 1024  # less free space than this at the end of the receive buffer: compact it first
_WRITE_HIGH_WATER = 4 * 1024 * 1024
# Requests read ahead of their responses on one connection (clients pipeline up to ~5 produces).
_MAX_IN_FLIGHT = 32
_ACKS_ALL = -1
_CLOSED = ConnectionState.CLOSED  # a module global: an enum class's attribute lookup is a Python call


class _Close(NamedTuple):
    """A place in the response order at which the connection is aborted."""

    reason: str


_Slot = asyncio.Task[Answer] | list[Chunk] | _Close


class KafkaServer:
    """One listener; ``security`` names it and says how its connections authenticate (default PLAINTEXT)."""

    def __init__(
        self, ports: HandlerPorts, host: str, port: int, security: ListenerSecurity | None = None
    ) -> None:
        self.ports = ports
        self._host = host
        self._port = port
        self.security = security or ListenerSecurity.plaintext(host, port)
        self.listener = self.security.listener
        self.max_request_bytes = int(ports.config.get("socket.request.max.bytes"))
        self._server: asyncio.Server | None = None
        self._connections: set[_Connection] = set()
        self.dispatcher = RequestDispatcher(ports, self.listener.name)  # request_dispatch.py

    async def start(self) -> tuple[str, int]:
        loop = asyncio.get_running_loop()
        factory = self.security.protocol_factory(lambda: _Connection(self))  # TLS: handshake first
        self._server = await loop.create_server(factory, self._host, self._port, reuse_address=True)
        sock = self._server.sockets[0]
        host, port = sock.getsockname()[:2]
        return str(host), int(port)

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        self.security.stop_handshakes()
        workers = [c.abort() for c in list(self._connections)]
        for worker in workers:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await worker
        if self._server is not None:
            await self._server.wait_closed()

    @property
    def connection_count(self) -> int:
        return len(self._connections)


class _Connection(asyncio.BufferedProtocol):
    """One client connection: framing, the in-order worker, and the response order; see the docstring."""

    def __init__(self, server: KafkaServer) -> None:
        self._server = server
        self._loop = asyncio.get_running_loop()
        self._buf = bytearray(_RECV_BUFFER)
        self._view = memoryview(self._buf)
        self._start = 0  # first byte not yet framed
        self._end = 0  # end of the received bytes
        self._frame: bytearray | None = None  # a large frame being received into place
        self._frame_got = 0
        # After a large frame, the next is likely large too (a producer streaming batches): read just
        # its size prefix first, so that none of it lands in the shared buffer and has to be copied.
        self._expect_large = False
        self._inbox: deque[bytearray] = deque()
        self._arrived: deque[int] = deque()  # when each inbox frame was complete (request queue time)
        self._wakeup: asyncio.Future[None] | None = None
        self._paused = False
        self._muted = False  # THROTTLED: reading paused for a client quota
        # Client quotas: the connection is muted until then (monotonic ms of the broker's clock; 0: not).
        self._muted_until_ms = 0
        self._close_on_drain = False
        self._slots: deque[_Slot] = deque()  # responses not yet written, in request order
        self._concurrent: set[asyncio.Task[Answer]] = set()  # acks=all produces still running
        self.client_host, self.peer = "?", ClientInformation()  # peer: port, software (telemetry)
        self.principal = ANONYMOUS  # set once the connection is authenticated (TLS certificate, SASL)
        self._auth = server.security.authenticator(server.ports.clock)  # SASL listeners
        self.state = ConnectionState.SERVING if self._auth is None else ConnectionState.AUTHENTICATING
        self._reading = True  # state in READING, kept by _move for the per-frame checks (no enum hashing)
        self._transport: asyncio.Transport | None = None
        self._writer: ResponseWriter | None = None
        self._worker: asyncio.Task[None] | None = None

    # -- transport callbacks ----------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's TCPTransport does not subclass asyncio.Transport, but has its interface.
        transport = cast(asyncio.Transport, transport)
        self._transport = transport
        self.client_host = self.peer.learn_peer(transport.get_extra_info("peername"))
        self._writer = ResponseWriter(transport, self._on_write_failed, self._on_drained)
        self._server._connections.add(self)
        self._worker = self._loop.create_task(self._work())
        principal = self._server.security.tls_principal(transport, self.client_host)
        if principal is None:
            self._abort_transport()
        else:
            self.principal = principal

    def connection_lost(self, exc: Exception | None) -> None:
        self._closed()
        self._server._connections.discard(self)
        if self._worker is not None and not self._worker.done():
            self._worker.cancel()
        self._cancel_pending()
        if self._writer is not None:
            self._writer.close()

    def eof_received(self) -> bool:
        partial = 4 + self._frame_got if self._frame is not None else self._end - self._start
        if partial and self._reading:
            log.info("connection from %s closed mid-request (%d bytes of a frame)", self.client_host, partial)
        self._end_of_input()
        # Plain TCP: stay open to finish answering (the worker closes). TLS closes on EOF whatever we say.
        return self._transport is None or self._transport.get_extra_info("ssl_object") is None

    def pause_writing(self) -> None:  # transport-buffered writes only (TLS): see ResponseWriter
        if self._writer is not None:
            self._writer.pause_writing()

    def resume_writing(self) -> None:
        if self._writer is not None:
            self._writer.resume_writing()

    # -- framing ----------------------------------------------------------------------------------
    def get_buffer(self, sizehint: int) -> memoryview:
        if self._frame is not None:
            return memoryview(self._frame)[self._frame_got :]
        if self._expect_large and self._end == 0:
            return self._view[:4]
        if len(self._buf) - self._end < _MIN_READ:  # move the partial frame at the end to the front
            pending = self._end - self._start
            self._buf[:pending] = self._view[self._start : self._end]
            self._start, self._end = 0, pending
        return self._view[self._end :]

    def buffer_updated(self, nbytes: int) -> None:
        frame = self._frame
        if frame is not None:
            self._frame_got += nbytes
            if self._frame_got == len(frame):
                self._frame = None
                self._expect_large = True
                self._deliver(frame)
            return
        self._end += nbytes
        buf, start, end = self._buf, self._start, self._end
        while end - start >= 4:
            (size,) = _SIZE.unpack_from(buf, start)
            limit = self._server.max_request_bytes
            if (auth := self._auth) is not None and not auth.authenticated:
                limit = min(limit, MAX_UNAUTHENTICATED_BYTES)  # no 100 MB frames before SASL completes
            if size < 8 or size > limit:
                log.warning(
                    "closing connection from %s: request size %d outside 8..%d%s",
                    self.client_host,
                    size,
                    limit,
                    size_hint(buf[start], limit < self._server.max_request_bytes),
                )
                start = end
                self._end_of_input()
                break
            if end - start - 4 >= size:
                self._expect_large = False
                frame = buf[start + 4 : start + 4 + size]  # the one copy of a small frame
                start += 4 + size
                self._deliver(frame)
            elif size > _DIRECT_FRAME:
                # Receive the rest straight into the frame's own buffer.
                self._frame = receive_buffer(size)  # not zeroed: the socket fills all of it
                self._frame_got = end - start - 4
                self._frame[: self._frame_got] = self._view[start + 4 : end]
                start = end
                break
            else:
                break
        self._start, self._end = (0, 0) if start == end else (start, end)

    def _deliver(self, frame: bytearray) -> None:
        if not self._reading:
            return
        self._inbox.append(frame)
        self._arrived.append(perf_counter_ns())
        wakeup = self._wakeup
        if wakeup is not None and not wakeup.done():
            wakeup.set_result(None)
        self._throttle()

    def _end_of_input(self) -> None:
        if self._reading:
            self._move(ConnectionState.DRAINING)
        self._frame = None
        if self._transport is not None and not self._transport.is_closing():
            with contextlib.suppress(RuntimeError, NotImplementedError):
                self._transport.pause_reading()
        wakeup = self._wakeup
        if wakeup is not None and not wakeup.done():
            wakeup.set_result(None)

    # -- flow control -----------------------------------------------------------------------------
    def _throttle(self) -> None:
        """Pause reading while throttled or while too much is queued or unanswered; resume after."""
        assert self._transport is not None and self._writer is not None
        busy = (
            self._muted
            or len(self._inbox) + len(self._slots) >= _MAX_IN_FLIGHT
            or self._writer.buffered > _WRITE_HIGH_WATER
        )
        if busy and not self._paused and self._reading:
            self._paused = True
            self._transport.pause_reading()
        elif not busy and self._paused and self._reading:
            self._paused = False
            self._transport.resume_reading()

    def _on_drained(self) -> None:
        if self._close_on_drain:
            self._close_when_answered()
        elif self._paused:
            self._throttle()

    def _on_write_failed(self, exc: BaseException) -> None:
        if not isinstance(exc, ConnectionError):
            log.info("closing connection from %s: %s", self.client_host, exc)
        self._abort_transport()

    # -- the worker -------------------------------------------------------------------------------
    async def _work(self) -> None:
        try:
            last_was_produce = False
            while True:
                if self._muted_until_ms:
                    await self._throttled()
                    continue  # the inbox and the state may have changed meanwhile
                if not self._inbox:
                    if not self._reading:
                        break
                    self._wakeup = self._loop.create_future()
                    await self._wakeup
                    self._wakeup = None
                    continue
                payload = self._inbox.popleft()
                received_ns = self._arrived.popleft()
                if self._paused:
                    self._throttle()
                prefix = peek_request_header(payload)  # framing let no frame under 8 bytes through
                is_produce = prefix[0] == ApiKey.PRODUCE
                if not (is_produce and last_was_produce):
                    await self._quiesce()
                last_was_produce = is_produce
                if not await self._process(payload, prefix, received_ns):
                    return
            await self._quiesce()
            self._close_when_answered()
        except asyncio.CancelledError:
            pass  # connection lost, or broker shutdown
        except Exception:
            log.exception("connection from %s failed; closing it", self.client_host)
            self._abort_transport()

    async def _process(self, payload: bytearray, prefix: RequestPrefix, received_ns: int) -> bool:
        """Handle one request, queueing its response in order; False once the connection must close."""
        if (auth := self._auth) is not None and auth.gates(prefix):
            step = await auth.receive(payload, prefix, self.client_host)  # security/sasl.py
            self._answer(step.answer)
            self.principal = auth.principal
            if step.close:  # closed once the answer has gone out
                self._inbox.clear()
                self._end_of_input()
            elif (target := after_sasl_step(self.state, auth.state)) is not self.state:
                self._move(target)  # logged in, or a re-authentication started or completed
            return True
        try:
            decoded = self._server.dispatcher.decode(payload, prefix, self.peer, self.principal)
            if not isinstance(decoded, HandlerCall):
                self._answer(decoded)
                return True
            body = decoded.request.body
            if decoded.ctx.api_key == ApiKey.PRODUCE and body.get("acks") == _ACKS_ALL:
                task = self._loop.create_task(self._server.dispatcher.call(decoded, received_ns))
                self._concurrent.add(task)
                task.add_done_callback(self._on_concurrent_done)
                ctx = decoded.ctx
                task.add_done_callback(lambda _task: self._owe_throttle(ctx.throttle_ms))
                self._slots.append(task)
                await yield_to_loop()  # the task appends now, before the next request starts
                return True
            self._answer(await self._server.dispatcher.call(decoded, received_ns))
            if decoded.ctx.throttle_ms:
                self._owe_throttle(decoded.ctx.throttle_ms)
            return True
        except CloseRequested:
            self._queue_slot(_Close("close requested"))
            return False
        except Exception:
            # A handler bug: this client's connection ends, every other client is unaffected.
            log.exception("request handling from %s failed; closing the connection", self.client_host)
            self._queue_slot(_Close("handler failed"))
            return False

    def _owe_throttle(self, throttle_ms: int) -> None:
        """Mute for ``throttle_ms`` from now (the response's time): concurrent produces' mutes overlap."""
        until = self._server.ports.clock.monotonic_ms() + throttle_ms
        if until > self._muted_until_ms:
            self._muted_until_ms = until
            wakeup = self._wakeup  # an idle worker throttles now, not once the next frame is in
            if wakeup is not None and not wakeup.done():
                wakeup.set_result(None)

    async def _throttled(self) -> None:
        """THROTTLED until the mute ends: no reading, no next request; then serve again."""
        if self.state is not ConnectionState.SERVING:
            self._muted_until_ms = 0
            return  # draining or closing: nothing more will be read anyway
        self._move(ConnectionState.THROTTLED)
        self._muted = True
        self._throttle()
        clock = self._server.ports.clock
        try:
            while (left_ms := self._muted_until_ms - clock.monotonic_ms()) > 0:
                await sleep_ms(clock, left_ms)  # a response finishing meanwhile may extend it
        finally:
            self._muted_until_ms = 0
            self._muted = False
            now: ConnectionState = self.state  # the sleep may have ended it (end of input, close)
            if now is ConnectionState.THROTTLED:
                self._move(ConnectionState.SERVING)
                self._throttle()

    async def _quiesce(self) -> None:
        """Wait until every concurrently running produce has finished."""
        while self._concurrent:
            await asyncio.wait(set(self._concurrent))

    def _on_concurrent_done(self, task: asyncio.Task[Answer]) -> None:
        self._concurrent.discard(task)
        self._flush_slots()

    # -- response order ---------------------------------------------------------------------------
    def _answer(self, answer: Answer) -> None:
        if answer is not None:
            self._queue_slot(answer)

    def _queue_slot(self, slot: _Slot) -> None:
        if self._slots or not isinstance(slot, list):
            self._slots.append(slot)
            self._flush_slots()
        else:
            assert self._writer is not None
            self._writer.write(slot)

    def _flush_slots(self) -> None:
        """Write the responses at the head of the order that are ready."""
        writer = self._writer
        slots = self._slots
        assert writer is not None
        while slots and self.state is not _CLOSED:
            head = slots[0]
            if isinstance(head, asyncio.Task):
                if not head.done():
                    return
                slots.popleft()
                if head.cancelled():
                    continue
                exc = head.exception()
                if exc is None:
                    answer = head.result()
                    if answer is not None:
                        writer.write(answer)
                    continue
                if not isinstance(exc, CloseRequested):
                    log.error("request handling from %s failed; closing the connection", self.client_host)
                    log.error("the handler raised", exc_info=exc)
                self._abort_transport()
                return
            slots.popleft()
            if isinstance(head, _Close):
                self._abort_transport()
                return
            writer.write(head)
        if self._paused:
            self._throttle()

    def _close_when_answered(self) -> None:
        """After the last request has been answered: close once every response has gone out."""
        assert self._writer is not None and self._transport is not None
        self._close_on_drain = True
        if self.state is _CLOSED or self._writer.buffered:
            return  # the writer calls _on_drained when it is done
        self._closed()
        self._transport.close()

    def _move(self, target: ConnectionState) -> None:
        self.state = next_connection_state(self.state, target)  # connection_state.py: the rule book
        self._reading = target in READING

    def _closed(self) -> None:
        if self.state is not _CLOSED:
            self._move(_CLOSED)

    def _abort_transport(self) -> None:
        self._closed()
        self._cancel_pending()
        if self._transport is not None:
            self._transport.abort()

    def _cancel_pending(self) -> None:
        for slot in self._slots:
            if isinstance(slot, asyncio.Task):
                if slot.done() and not slot.cancelled():
                    slot.exception()  # retrieved: the connection is going, nobody will answer
                slot.cancel()
        self._slots.clear()

    def abort(self) -> asyncio.Task[None]:
        """Broker shutdown: drop the connection; returns the worker to await."""
        assert self._worker is not None
        self._abort_transport()
        self._worker.cancel()
        return self._worker
