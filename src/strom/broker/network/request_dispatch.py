"""From a request frame to its encoded response: the network layer's one way into the handlers.

`RequestDispatcher.decode` judges a frame by its header prefix (`strom.protocol.request_header`) before
its body is decoded, as Kafka does, so a version the listener does not serve is reported as such
whatever its body holds: an API or version without a handler closes the connection, except an
unsupported ApiVersions version, which gets UNSUPPORTED_VERSION with a v0 body so the client can retry
at a version we speak (KIP-511); a frame that does not parse closes it too. Otherwise the result is
the handler call with its `RequestContext`. `RequestDispatcher.call` runs the handler, encodes its
response (None when Kafka sends none, acks=0) and records the request's metrics. While some client quota
is configured, it also records the request on its quotas (request_quotas.py) and writes the throttle
time earned into the response and into the context (``ctx.throttle_ms``), where the connection reads how
long to stop reading; with none configured that costs one attribute test. Where Kafka closes
the connection both raise `CloseRequested`, after a log line; the connection (server.py) then closes
at that place in its response order.
"""

from __future__ import annotations

import logging
from time import perf_counter_ns
from typing import NamedTuple

from strom.broker.client_telemetry import ClientInformation
from strom.broker.handlers import HANDLERS, RequestContext
from strom.broker.handlers.api_versions import api_versions_fallback
from strom.broker.handlers.base import CloseConnection, Handler, HandlerPorts
from strom.broker.network.request_quotas import QuotaRecorder
from strom.broker.security.listeners import ANONYMOUS
from strom.protocol.api import INTERNAL, SUPPORTED, ApiKey
from strom.protocol.codec import Chunk, Request, decode_request, encode_response_chunks
from strom.protocol.errors import CorruptFrame, UnsupportedVersion
from strom.protocol.request_header import RequestPrefix

log = logging.getLogger(__name__)

__all__ = ["Answer", "CloseRequested", "HandlerCall", "RequestDispatcher"]

Answer = list[Chunk] | None  # a handler's encoded response; None when Kafka sends none (acks=0)


class CloseRequested(Exception):
    """The client sent something Kafka answers by closing the connection; the reason is logged."""


class HandlerCall(NamedTuple):
    handler: Handler
    ctx: RequestContext
    request: Request
    size: int = 0  # the request frame's size in bytes (the produce quota counts it)


class RequestDispatcher:
    """One listener's requests (``listener``: its name, for the handlers' context)."""

    def __init__(self, ports: HandlerPorts, listener: str) -> None:
        self.ports = ports
        self._listener = listener
        # API key -> served version range, for the keys that have a handler.
        self._versions = {int(k): r for k, r in (INTERNAL | SUPPORTED).items() if int(k) in HANDLERS}
        self._quotas = ports.quotas
        self._recorder = QuotaRecorder(ports.quotas, ports.clock)

    def decode(
        self, payload: bytearray, prefix: RequestPrefix, peer: ClientInformation, principal: str = ANONYMOUS
    ) -> HandlerCall | list[Chunk]:
        """The handler call for a request frame, or an immediate answer; raises CloseRequested.
        ``peer``: the connection's client (its address; its software and port for telemetry)."""
        client_host = peer.host
        # API and version are judged from the fixed header prefix before the body is decoded (as Kafka
        # does), so a version we do not serve is reported as such whatever its body holds.
        key, version, correlation_id = prefix
        if not self._served(key, version):
            if key == ApiKey.API_VERSIONS:
                return api_versions_fallback(correlation_id)
            log.warning("closing connection from %s: API key %d v%d is not served", client_host, key, version)
            raise CloseRequested
        try:
            request = decode_request(payload, lean=True)  # Produce: produce_codec.py
        except UnsupportedVersion as exc:
            if exc.api_key == ApiKey.API_VERSIONS:
                return api_versions_fallback(exc.correlation_id)
            log.warning("closing connection from %s: unsupported API (%s)", client_host, exc)
            raise CloseRequested from None
        except CorruptFrame as exc:
            log.warning("closing connection from %s: malformed request (%s)", client_host, exc)
            raise CloseRequested from None
        ctx = RequestContext(self.ports, key, version, request.correlation_id, request.client_id, client_host)
        ctx.principal, ctx.listener, ctx.client_info = principal, self._listener, peer
        return HandlerCall(HANDLERS[key], ctx, request, len(payload))

    async def call(self, call: HandlerCall, received_ns: int) -> Answer:
        """Run a handler and encode its response; raises CloseRequested where Kafka closes."""
        handler, ctx, request, size = call
        quotas_active = self._quotas.active  # the fast path: nothing more without a quota
        if quotas_active:
            self._recorder.before(ctx)
        started_ns = perf_counter_ns()
        try:
            body = await handler(ctx, request.body)
        except CloseConnection as exc:
            log.info("closing connection from %s: %s", ctx.client_host, exc)
            raise CloseRequested from None
        if quotas_active:
            handler_ns = perf_counter_ns() - started_ns - ctx.remote_ns
            throttle = self._recorder.after(ctx, request.body, size, body, handler_ns)
            if throttle and body is not None and "throttle_time_ms" in body:
                body["throttle_time_ms"] = throttle  # type: ignore[index]  # every such body has it
            ctx.throttle_ms = throttle
        answer = (
            None
            if body is None
            else encode_response_chunks(ctx.api_key, ctx.api_version, request.correlation_id, body, lean=True)
        )
        if quotas_active and ctx.api_key == ApiKey.FETCH and answer is not None and body is not None:
            fetch_throttle = self._recorder.fetched(ctx, request.body, sum(len(c) for c in answer))
            if fetch_throttle > ctx.throttle_ms:
                # The response already encoded carries the smaller throttle: encode it again (throttled only).
                ctx.throttle_ms = fetch_throttle
                body["throttle_time_ms"] = fetch_throttle  # type: ignore[index]
                answer = encode_response_chunks(
                    ctx.api_key, ctx.api_version, request.correlation_id, body, lean=True
                )
        if (metrics := self.ports.metrics) is not None:
            stats = metrics.requests.get(ctx.api_key) or metrics.request(ctx.api_key)
            stats.observe(ctx.api_version, received_ns, started_ns, perf_counter_ns(), ctx.remote_ns)
        return answer

    def _served(self, key: int, version: int) -> bool:
        """Whether a handler exists and the version is inside the advertised range."""
        low_high = self._versions.get(key)
        return low_high is not None and low_high[0] <= version <= low_high[1]
