"""The broker's HTTP listener (``http.listeners``): aiohttp's server on the broker's own event loop.

One `HttpServer` per broker serves every HTTP feature; each feature *mounts* its routes (a list of
aiohttp route definitions) before `start`: the schema registry's REST API today, ``/metrics`` and the
console later. Requests are handled as tasks on the broker's event loop next to the Kafka listener;
handlers must not block (the registry's are in-memory lookups and awaits on the replica manager).

Listeners (``http.listeners``, a list like ``listeners``): ``http://HOST:PORT``, or ``https://HOST:PORT``
with TLS from the same PEM settings as Kafka's listeners (``ssl.keystore.*``, ``ssl.truststore.*``,
``ssl.client.auth``; overridable as ``listener.name.http.ssl.*``); port 0 takes an
ephemeral port. With no setting the broker serves ``http://127.0.0.1:8081``, the registry port
clients expect, but when that default port is already taken (several local brokers) it logs a warning
and runs without HTTP; a listener set explicitly that cannot bind is a start-up error, and an empty
``http.listeners=`` turns HTTP off.

Errors of the HTTP exchange itself (no such route, wrong method, a body over ``MAX_BODY_BYTES``) are
answered by the middleware as JSON ``{"error_code": <status>, "message": ...}``, the shape Confluent's
registry uses; an exception a handler did not expect is logged and answered 500 (error code 50001), and
the server keeps serving.
"""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import ssl
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from aiohttp import web

from strom._util.errors import ConfigError
from strom.broker.security.connection import TLS_HANDSHAKE_TIMEOUT_S
from strom.broker.security.tls_accept import TlsAcceptor

log = logging.getLogger(__name__)

DEFAULT_HTTP_LISTENER = "http://127.0.0.1:8081"
MAX_BODY_BYTES = 4 * 1024 * 1024
JSON_CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def parse_http_listener(listener: str) -> tuple[str, int]:
    """``http://host:port`` or ``https://host:port`` → (host, port)."""
    scheme, sep, rest = listener.partition("://")
    if not sep or scheme.lower() not in ("http", "https"):
        raise ConfigError(f"http listener {listener!r} is not of the form http(s)://host:port")
    host, colon, port = rest.rstrip("/").rpartition(":")
    if not colon or not port.isdigit() or int(port) > 65535:
        raise ConfigError(f"http listener {listener!r} has no valid port")
    return host.strip("[]") or "0.0.0.0", int(port)


def json_response(status: int, body: object) -> web.Response:
    return web.Response(status=status, text=json.dumps(body), content_type=JSON_CONTENT_TYPE)


@web.middleware
async def _errors_as_json(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        return json_response(
            exc.status, {"error_code": exc.status, "message": f"HTTP {exc.status} {exc.reason}"}
        )
    except Exception:
        log.exception("HTTP %s %s failed", request.method, request.path)
        return json_response(500, {"error_code": 50001, "message": "Internal error; see the broker log"})


class HttpServer:
    def __init__(
        self,
        listeners: Iterable[str],
        default_listener: bool,
        tls: Callable[[], ssl.SSLContext] | None = None,
        middlewares: Iterable[Any] = (),
    ) -> None:
        """``default_listener``: the listeners are the unset default, so a taken port is not fatal.
        ``tls`` makes the context of ``https://`` listeners (called only if there is one);
        ``middlewares`` run inside the error middleware, before the routes (authentication)."""
        items = list(listeners)
        self.listeners = [parse_http_listener(item) for item in items]
        self.secure = [item.lower().startswith("https://") for item in items]
        self._tls = tls
        self.default_listener = default_listener
        self.app = web.Application(
            client_max_size=MAX_BODY_BYTES, middlewares=[_errors_as_json, *middlewares]
        )
        self.bound: list[tuple[str, int]] = []
        self._runner: web.AppRunner | None = None
        self._tls_servers: list[tuple[asyncio.Server, TlsAcceptor]] = []  # https:// listeners

    def mount(self, routes: Iterable[web.AbstractRouteDef]) -> None:
        """Add a feature's routes; call before `start`."""
        self.app.router.add_routes(list(routes))

    async def start(self) -> list[tuple[str, int]]:
        """Bind every listener; returns the bound (host, port) pairs (empty: HTTP is off)."""
        sockets: list[socket.socket] = []
        try:
            for host, port in self.listeners:
                sockets.append(_bind(host, port))
        except OSError as exc:
            for sock in sockets:
                sock.close()
            if self.default_listener:
                log.warning(
                    "HTTP listener %s not started (%s); running without HTTP (no schema registry, /metrics "
                    "or /ui/): set http.listeners=http://127.0.0.1:PORT to serve them on a free port",
                    DEFAULT_HTTP_LISTENER,
                    exc,
                )
                return []
            raise ConfigError(f"cannot bind http.listeners {self.listeners}: {exc}") from None
        if not sockets:
            return []
        self._runner = web.AppRunner(self.app, access_log=None, handle_signals=False)
        await self._runner.setup()
        context = self._tls() if any(self.secure) and self._tls is not None else None
        if any(self.secure) and context is None:
            raise ConfigError("an https:// listener needs the ssl.keystore.* settings")
        for sock, secure in zip(sockets, self.secure, strict=True):
            if context is not None and secure and self._runner.server is not None:
                # As the Kafka listeners: a failed handshake is logged (security/tls_accept.py).
                acceptor = TlsAcceptor(context, "HTTP", TLS_HANDSHAKE_TIMEOUT_S)
                loop = asyncio.get_running_loop()
                server = await loop.create_server(acceptor.factory(self._runner.server), sock=sock)
                self._tls_servers.append((server, acceptor))
            else:
                await web.SockSite(self._runner, sock).start()
            host, port = sock.getsockname()[:2]
            self.bound.append((host, port))
        return self.bound

    async def stop(self) -> None:
        for server, acceptor in self._tls_servers:
            server.close()
            acceptor.cancel()
        if self._runner is not None:
            await self._runner.cleanup()  # closes every connection, https:// ones too
            self._runner = None
        self._tls_servers.clear()


def _bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(128)
        sock.setblocking(False)
    except OSError:
        sock.close()
        raise
    return sock
