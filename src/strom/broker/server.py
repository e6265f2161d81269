"""The network layer: accepts connections, frames requests, runs handlers, writes responses in order.

Per connection, one task reads `int32 size` + payload frames. Kafka processes one request per connection at
a time and answers in request order; so does this loop (a long-polling Fetch holds back the requests
behind it on the same connection, exactly as Kafka's muted channel does). Clients pipeline, so the next
frames are already in the socket buffer when a response is written.

Bad input never reaches a handler: a size outside 0..`socket.request.max.bytes`, a frame that does not
parse, or an API/version we do not serve closes that connection with a log line (Kafka's behaviour),
except an unsupported ApiVersions version, which gets UNSUPPORTED_VERSION with a v0 body so the client
can retry at a version we speak (KIP-511). Every other connection keeps being served.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import struct

from strom.broker.broker import Broker
from strom.broker.handlers import HANDLERS, RequestContext, advertised_api_keys
from strom.broker.handlers.base import CloseConnection
from strom.protocol.api import INTERNAL, SUPPORTED, ApiKey
from strom.protocol.codec import CorruptFrame, UnsupportedVersion, decode_request, encode_response
from strom.protocol.errors import ErrorCode

log = logging.getLogger(__name__)

_SIZE = struct.Struct(">i")
_HEADER_PREFIX = struct.Struct(">hhi")
_API_KEY = struct.Struct(">h")
_WRITE_HIGH_WATER = 4 * 1024 * 1024
# Requests read ahead of their responses on one connection (clients pipeline up to ~5 produces).
_MAX_IN_FLIGHT = 32


class _CloseConnection(Exception):
    """The client sent something Kafka answers by closing the connection; the reason is logged."""


class KafkaServer:
    def __init__(self, broker: Broker, host: str, port: int) -> None:
        self.broker = broker
        self._host = host
        self._port = port
        self._max_request_bytes = int(broker.config.get("socket.request.max.bytes"))
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.Task[None]] = set()

    async def start(self) -> tuple[str, int]:
        self._server = await asyncio.start_server(
            self._on_connect, self._host, self._port, reuse_address=True, limit=1 << 20
        )
        sock = self._server.sockets[0]
        host, port = sock.getsockname()[:2]
        return str(host), int(port)

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._connections):
            task.cancel()
        for task in list(self._connections):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        if self._server is not None:
            await self._server.wait_closed()

    async def _on_connect(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        peer = writer.get_extra_info("peername")
        client_host = str(peer[0]) if peer else "?"
        try:
            await self._serve(reader, writer, client_host)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        except asyncio.CancelledError:
            pass  # broker shutdown; the server stops right after
        except Exception:
            log.exception("connection from %s failed; closing it", client_host)
        finally:
            self._connections.discard(task)
            writer.close()

    async def _serve(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, client_host: str
    ) -> None:
        # Kafka handles one request per connection at a time. Strom keeps that for every API but
        # Produce: consecutive produces start in arrival order (so appends keep the client's order, on
        # which idempotent sequence checks depend) and then wait concurrently, so an acks=all produce
        # parked in the purgatory does not hold back the one behind it. Any other request starts only
        # once everything before it has finished, and nothing starts while it runs. Responses always
        # leave in request order.
        in_flight: asyncio.Queue[asyncio.Task[bytes | None] | None] = asyncio.Queue(_MAX_IN_FLIGHT)
        responder = asyncio.create_task(self._respond_in_order(in_flight, writer))
        running: set[asyncio.Task[bytes | None]] = set()
        last_was_produce = True
        try:
            while not responder.done():
                payload = await self._read_frame(reader, client_host)
                if payload is None:
                    break
                is_produce = _API_KEY.unpack_from(payload)[0] == ApiKey.PRODUCE
                if not (is_produce and last_was_produce):
                    while running and not responder.done():
                        await asyncio.wait({*running, responder}, return_when=asyncio.FIRST_COMPLETED)
                    if responder.done():
                        break
                last_was_produce = is_produce
                task = asyncio.create_task(self._handle_frame(payload, client_host))
                running.add(task)
                task.add_done_callback(running.discard)
                if not in_flight.full():
                    in_flight.put_nowait(task)
                    continue
                # Back-pressure: wait for room, unless the responder has ended the connection meanwhile.
                put = asyncio.ensure_future(in_flight.put(task))
                await asyncio.wait({put, responder}, return_when=asyncio.FIRST_COMPLETED)
                if not put.done():
                    put.cancel()
                    task.cancel()
                    break
            if not responder.done():
                await in_flight.put(None)
            await responder
        finally:
            if not responder.done():
                responder.cancel()
            while not in_flight.empty():
                pending = in_flight.get_nowait()
                if pending is not None:
                    pending.cancel()

    async def _read_frame(self, reader: asyncio.StreamReader, client_host: str) -> bytes | None:
        """The next request payload, or None when the connection ends (or must end: bad size)."""
        try:
            (size,) = _SIZE.unpack(await reader.readexactly(4))
        except asyncio.IncompleteReadError as exc:
            if exc.partial:  # an EOF between frames is an ordinary close
                log.info("connection from %s closed mid-request (size prefix cut short)", client_host)
            return None
        if size < 8 or size > self._max_request_bytes:
            log.warning(
                "closing connection from %s: request size %d outside 8..%d (socket.request.max.bytes)",
                client_host,
                size,
                self._max_request_bytes,
            )
            return None
        try:
            return await reader.readexactly(size)
        except asyncio.IncompleteReadError as exc:
            got = len(exc.partial)
            log.info("connection from %s closed mid-request (%d of %d bytes)", client_host, got, size)
            return None

    async def _respond_in_order(
        self, in_flight: asyncio.Queue[asyncio.Task[bytes | None] | None], writer: asyncio.StreamWriter
    ) -> None:
        """Write each response when its request completes, in request order; stop at a close."""
        while True:
            task = await in_flight.get()
            if task is None:
                return
            try:
                response = await task
            except _CloseConnection:
                writer.transport.abort()
                return
            except Exception:
                # A handler bug: this client's connection ends, every other client is unaffected.
                log.exception("request handling failed; closing the connection")
                writer.transport.abort()
                return
            if response is not None:
                writer.write(response)
                if writer.transport.get_write_buffer_size() > _WRITE_HIGH_WATER:
                    await writer.drain()

    async def _handle_frame(self, payload: bytes, client_host: str) -> bytes | None:
        """The encoded response, or None when none is due (acks=0); raises _CloseConnection."""
        # API and version are judged from the fixed header prefix before the body is decoded (as Kafka
        # does), so a version we do not serve is reported as such whatever its body holds.
        key, version, correlation_id = _HEADER_PREFIX.unpack_from(payload)
        if not self._served(key, version):
            if key == ApiKey.API_VERSIONS:
                return self._api_versions_fallback(correlation_id)
            log.warning("closing connection from %s: API key %d v%d is not served", client_host, key, version)
            raise _CloseConnection
        try:
            request = decode_request(payload)
        except UnsupportedVersion as exc:
            if exc.api_key == ApiKey.API_VERSIONS:
                return self._api_versions_fallback(exc.correlation_id)
            log.warning(
                "closing connection from %s: unsupported API %s v%s",
                client_host,
                exc.api_key,
                exc.api_version,
            )
            raise _CloseConnection from None
        except CorruptFrame as exc:
            log.warning("closing connection from %s: malformed request (%s)", client_host, exc)
            raise _CloseConnection from None
        handler = HANDLERS[key]
        ctx = RequestContext(
            self.broker, key, version, request.correlation_id, request.client_id, client_host
        )
        try:
            body = await handler(ctx, request.body)
        except CloseConnection as exc:
            log.info("closing connection from %s: %s", client_host, exc)
            raise _CloseConnection from None
        if body is None:
            return None
        return encode_response(key, version, request.correlation_id, body)

    @staticmethod
    def _served(key: int, version: int) -> bool:
        """Whether a handler exists and the version is inside the advertised range."""
        low_high = (
            SUPPORTED.get(ApiKey(key)) or INTERNAL.get(ApiKey(key))
            if key in ApiKey._value2member_map_
            else None
        )
        return key in HANDLERS and low_high is not None and low_high[0] <= version <= low_high[1]

    def _api_versions_fallback(self, correlation_id: int) -> bytes:
        # Always a v0 body: the only layout a client can parse before versions are agreed.
        body = {"error_code": int(ErrorCode.UNSUPPORTED_VERSION), "api_keys": advertised_api_keys()}
        return encode_response(ApiKey.API_VERSIONS, 0, correlation_id, body)
