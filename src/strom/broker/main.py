"""`strom serve`: run one broker in the foreground until SIGINT/SIGTERM, then shut down cleanly.

The HTTP side (the schema registry, the console, ``/metrics``) lives in `strom.web`, a layer above; the
broker reaches it only through the `HttpSide` port: `run_broker` is handed a `StartHttpSide` (by
`strom.node`, the process's entry point), calls it once the Kafka listeners are bound and stops what it
returns on shutdown. Without one the broker serves Kafka only.

On start the broker prints `Strom broker <id> HTTP on http://<host>:<port>` when its HTTP listener
(`strom.web.side`) is up, then (unless the one listener is PLAINTEXT) per
listener `Strom broker <id> listener <NAME> (<PROTOCOL>) on <host>:<port>` (its advertised address),
and last `Strom broker <id> listening on <host>:<port>`, the inter-broker listener's (the ports the OS
chose when a listener asks for port 0): the `strom.testing` fixture and scripts read them to learn the
bootstrap address and the registry URL. A clean shutdown flushes and checkpoints every log so the next
start skips recovery.
"""

from __future__ import annotations

import asyncio
import ctypes
import errno
import gc
import logging
import signal
import sys
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Protocol

from strom._util.errors import ConfigError
from strom.broker.broker import Broker, Endpoint
from strom.broker.config import BrokerConfig
from strom.broker.network.server import KafkaServer
from strom.broker.security.connection import for_listener as security_for_listener
from strom.protocol.errors import KafkaError
from strom.storage.open_files import raise_open_files_limit

log = logging.getLogger("strom")


class HttpSide(Protocol):
    """The broker's HTTP side once started (`strom.web.side.WebSide`)."""

    async def stop(self) -> None: ...


# (config, broker, count of open Kafka connections) -> the started HTTP side.
StartHttpSide = Callable[[BrokerConfig, Broker, Callable[[], int]], Awaitable[HttpSide]]


async def serve_plaintext(broker: Broker, host: str, port: int) -> KafkaServer:
    """One PLAINTEXT listener on ``host:port`` (0: any free port), advertised as bound, and the
    broker's background work started: how the in-process cluster and the simulation run a broker."""
    server = KafkaServer(broker.handler_ports, host, port)
    bound_host, bound_port = await server.start()
    broker.advertised = Endpoint(bound_host, bound_port)
    broker.listener_endpoints = {"PLAINTEXT": broker.advertised}
    broker.listener_protocols = {"PLAINTEXT": "PLAINTEXT"}
    broker.start_background()
    return server


async def run_broker(
    config: BrokerConfig, stop: asyncio.Event, start_http: StartHttpSide | None = None
) -> None:
    broker = Broker(config)
    setup = broker.listener_setup
    servers: list[KafkaServer] = []
    endpoints: dict[str, Endpoint] = {}
    try:
        for listener in setup.listeners:
            # Read through the dynamic config: a listener's key store set for this broker at run time
            # (KIP-226) applies from the start, and is reloaded when it changes.
            security = security_for_listener(broker.dynamic_config, listener, lambda: broker.credentials)
            if security.tls is not None:
                broker.on_broker_config.append(partial(security.reload_tls, broker.dynamic_config))
                broker.handler_ports.tls_listeners[listener.name.lower()] = security
            if broker.metrics is not None and security.sasl_settings is not None:
                broker.metrics.auth[listener.name] = security.sasl_settings.counters
            server = KafkaServer(broker.handler_ports, listener.host, listener.port, security)
            bound_host, bound_port = await server.start()
            servers.append(server)
            adv_host, adv_port = setup.advertised[listener.name]
            if adv_host in ("", "0.0.0.0", "::"):
                adv_host = "localhost" if bound_host in ("0.0.0.0", "::") else bound_host
            endpoints[listener.name] = Endpoint(adv_host, adv_port or bound_port)
            broker.listener_protocols[listener.name] = listener.protocol.value
        broker.advertised = endpoints[setup.inter_broker]
        broker.listener_endpoints = endpoints
        http = None
        if start_http is not None:
            http = await start_http(
                config, broker, lambda: sum(server.connection_count for server in servers)
            )
    except BaseException:
        for server in servers:
            await server.stop()
        raise
    broker.start_background()
    _freeze_start_up_objects()
    simple = len(servers) == 1 and servers[0].listener.name == "PLAINTEXT"
    for server in [] if simple else servers:
        name = server.listener.name
        shown = endpoints[name]
        print(
            f"Strom broker {broker.node_id} listener {name} ({server.listener.protocol.value}) "
            f"on {shown.host}:{shown.port}",
            flush=True,
        )
    print(
        f"Strom broker {broker.node_id} listening on {broker.advertised.host}:{broker.advertised.port}",
        flush=True,
    )
    try:
        await stop.wait()
    finally:
        log.info("shutting down")
        for server in servers:
            await server.stop()
        if http is not None:
            await http.stop()
        await broker.stop()
        log.info("shut down cleanly")


def _freeze_start_up_objects() -> None:
    """Leave what start-up built (every partition's log, the metadata cache) out of the cyclic garbage
    collector's full collections, which would otherwise walk it again and again.

    With 100,000 partitions start-up leaves millions of long-lived objects. A full collection walks
    every tracked object, and the collector runs one whenever the objects promoted since the last
    one pass a quarter of those that survived it: the burst of a large response (a Metadata answer
    for every topic builds a dict and three lists per partition) then pays a walk over the whole heap,
    and just after a start, when the last full collection ran on a smaller heap, more than one. Frozen
    objects (``gc.freeze``) are never walked. They are still freed by reference counting; only cyclic
    garbage among them (the logs of partitions deleted later) waits for the process to exit.
    """
    gc.freeze()


def _keep_freed_memory() -> None:
    """Ask glibc to keep freed request buffers for reuse instead of handing them back to the OS.

    Every large request frame (up to ``socket.request.max.bytes``) is a fresh buffer that is freed
    once handled. By default glibc serves such blocks with mmap, or trims them off the heap when
    freed, so each next frame page-faults its memory in again: measured, that was about 11 % of the
    broker's CPU under a produce load on a VM. A 32 MiB mmap threshold and a 256 MiB trim threshold
    keep them in the heap, bounded by the peak in use. Other C libraries: nothing to do.
    """
    try:
        libc = ctypes.CDLL(None)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return
    m_trim_threshold, m_mmap_threshold = -1, -3  # glibc's <malloc.h>
    mallopt(m_mmap_threshold, 32 << 20)
    mallopt(m_trim_threshold, 256 << 20)


def serve(config_file: str | None, overrides: list[str], start_http: StartHttpSide | None = None) -> int:
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr
    )
    try:
        config = BrokerConfig.load(config_file, overrides)
    except (ConfigError, OSError) as exc:
        print(f"strom serve: {exc}", file=sys.stderr)
        return 2
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    _keep_freed_memory()
    old_soft, new_soft = raise_open_files_limit()
    if new_soft != old_soft:
        log.info("raised the open files limit (RLIMIT_NOFILE) from %d to %d", old_soft, new_soft)

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        await run_broker(config, stop, start_http)

    try:
        asyncio.run(main())
    except ConfigError as exc:
        print(f"strom serve: {exc}", file=sys.stderr)
        return 2
    except KafkaError as exc:  # a broker-level topic default that LogConfig refuses
        print(f"strom serve: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"strom serve: {exc}{_bind_hint(exc)}", file=sys.stderr)
        return 1
    return 0


def _bind_hint(exc: OSError) -> str:
    """What to do about a listener port that is taken (usually another broker, e.g. a second `make run`)."""
    if exc.errno != errno.EADDRINUSE:
        return ""
    return (
        "; is another broker running there? Stop it, or give this one free ports, e.g. "
        "--set listeners=PLAINTEXT://127.0.0.1:9093 --set http.listeners=http://127.0.0.1:8082"
    )
