"""An in-memory network for simulated hosts: TCP-like streams with seeded latency, partitions and resets.

Each simulated machine has an address (`SimNetwork.host`); its view of the network is a `HostNetwork`,
which opens connections and listens the way asyncio's `create_connection` / `create_server` do, with
the same protocol objects (plain and buffered protocols alike). A connection is a pair of transports;
what one side writes arrives at the other after the link's latency plus seeded jitter, in order (a
byte stream keeps its order: each chunk arrives no earlier than the one before it), as a TCP
connection's bytes do.

Faults, as a TCP connection sees them:

* **Partition** (one-way or both ways between two hosts): bytes sent across it are held, not lost,
  and arrive when the link heals, as TCP retransmits them; a connection attempt across it waits for
  the heal (the caller's own time limit ends it, as a SYN that gets no answer does).
* **Reset**: every connection of a host (or between two hosts) ends at once on both sides with
  `ConnectionResetError`; held and in-flight bytes are gone.
* **Refused**: a connection to an address nobody listens on fails with `ConnectionRefusedError` after
  one round trip.

Latency and jitter are drawn from the simulation's seeded `random.Random`, and every delivery is a
timer on the simulated loop, so a seed replays the same deliveries at the same simulated moments.
TLS is not simulated: simulated clusters use PLAINTEXT listeners.
"""

from __future__ import annotations

import asyncio
import contextvars
import itertools
import random
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

__all__ = ["CURRENT_HOST", "HostNetwork", "LinkSettings", "SimNetwork", "SimServer"]

#: The simulated machine the running code belongs to: connections it opens come from this address, and
#: the simulation knows whose tasks to end when the machine crashes. Every protocol callback runs in the
#: context of the machine that owns the transport.
CURRENT_HOST: contextvars.ContextVar[str] = contextvars.ContextVar("strom_sim_host", default="client")

_P = TypeVar("_P", bound=asyncio.BaseProtocol)
Address = tuple[str, int]


@dataclass(slots=True)
class LinkSettings:
    """One-way delay of every link: ``latency_s`` plus a uniform draw in [0, ``jitter_s``]."""

    latency_s: float = 0.000_2
    jitter_s: float = 0.000_1


class SimServer:
    """A listening address; `close` stops accepting (established connections go on, as with asyncio)."""

    def __init__(self, network: SimNetwork, address: Address, factory: Callable[[], asyncio.BaseProtocol]):
        self._network = network
        self.address = address
        self.factory = factory
        self.context = contextvars.copy_context()
        self.sockets = [_SimSocket(address)]
        self._closed = asyncio.get_running_loop().create_future()

    def close(self) -> None:
        self._network._listeners.pop(self.address, None)
        if not self._closed.done():
            self._closed.set_result(None)

    async def wait_closed(self) -> None:
        await self._closed


class _SimSocket:
    """What `asyncio.Server.sockets` callers read: the listening address."""

    def __init__(self, address: Address) -> None:
        self._address = address

    def getsockname(self) -> Address:
        return self._address


@dataclass(eq=False)
class _Stream:
    """One direction of a connection: the transport that writes and the one that reads."""

    source: str
    target: str
    held: deque[bytes] = field(default_factory=deque)
    in_flight: deque[tuple[float, bytes]] = field(default_factory=deque)
    last_arrival: float = 0.0


class _SimTransport(asyncio.Transport):
    def __init__(
        self,
        network: SimNetwork,
        protocol: asyncio.BaseProtocol,
        local: Address,
        remote: Address,
        context: contextvars.Context,
    ):
        super().__init__()
        self.context = context
        self._network = network
        self._loop = network.loop
        self._protocol = protocol
        self.local = local
        self.remote = remote
        self.peer: _SimTransport | None = None
        self.outbound = _Stream(local[0], remote[0])
        self._inbox: deque[bytes] = deque()
        self._paused = False
        self._closing = False
        self._lost = False

    # asyncio.Transport
    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"peername": self.remote, "sockname": self.local}.get(name, default)

    def get_protocol(self) -> asyncio.BaseProtocol:
        return self._protocol

    def set_protocol(self, protocol: asyncio.BaseProtocol) -> None:
        self._protocol = protocol

    def is_closing(self) -> bool:
        return self._closing

    def is_reading(self) -> bool:
        return not self._paused and not self._closing

    def pause_reading(self) -> None:
        self._paused = True

    def resume_reading(self) -> None:
        if self._paused:
            self._paused = False
            self._loop.call_soon(self._drain_inbox, context=self.context)

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if self._closing or not data:
            return
        self._network._send(self, bytes(data))

    def can_write_eof(self) -> bool:
        return False

    def get_write_buffer_size(self) -> int:
        return 0

    def close(self) -> None:
        if self._closing:
            return
        self._closing = True
        self._network._send(self, b"")  # the FIN, ordered after the data already written
        self._loop.call_soon(self._connection_lost, None, context=self.context)

    def abort(self) -> None:
        self._reset(ConnectionResetError("connection aborted"))

    # simulation side
    def _reset(self, exc: Exception | None) -> None:
        peer, self.peer = self.peer, None
        self._closing = True
        self._inbox.clear()
        self.outbound.held.clear()
        self.outbound.in_flight.clear()
        self._loop.call_soon(self._connection_lost, exc, context=self.context)
        if peer is not None and peer.peer is self:
            peer.peer = None
            peer._closing = True
            peer._inbox.clear()
            peer.outbound.held.clear()
            peer.outbound.in_flight.clear()
            reset = ConnectionResetError("connection reset by peer")
            self._loop.call_soon(peer._connection_lost, reset, context=peer.context)

    def _arrive(self, data: bytes) -> None:
        if self._lost:
            return
        self._inbox.append(data)
        if not self._paused:
            self._drain_inbox()

    def _drain_inbox(self) -> None:
        while self._inbox and not self._paused and not self._lost:
            data = self._inbox.popleft()
            if not data:  # the peer closed
                self.peer = None
                keep_open = getattr(self._protocol, "eof_received", lambda: None)()
                if not keep_open:
                    self._closing = True
                    self._connection_lost(None)
                return
            self._deliver(data)

    def _deliver(self, data: bytes) -> None:
        protocol = self._protocol
        if isinstance(protocol, asyncio.BufferedProtocol):
            view = memoryview(data)
            while view:
                buf = memoryview(protocol.get_buffer(len(view)))
                n = min(len(buf), len(view))
                buf[:n] = view[:n]
                protocol.buffer_updated(n)
                view = view[n:]
        else:
            assert isinstance(protocol, asyncio.Protocol)
            protocol.data_received(data)

    def _connection_lost(self, exc: Exception | None) -> None:
        if self._lost:
            return
        self._lost = True
        self._network._forget(self)
        self._protocol.connection_lost(exc)


class SimNetwork:
    def __init__(self, loop: asyncio.AbstractEventLoop, rng: random.Random, link: LinkSettings | None = None):
        self.loop = loop
        if hasattr(loop, "network"):
            loop.network = self  # the simulated loop's create_connection / create_server come here
        self._rng = rng
        self.link = link or LinkSettings()
        self._listeners: dict[Address, SimServer] = {}
        self._transports: set[_SimTransport] = set()
        self._blocked: set[tuple[str, str]] = set()
        self._heal_waiters: list[asyncio.Future[None]] = []
        self._ports = itertools.count(40_000)

    def host(self, address: str) -> HostNetwork:
        return HostNetwork(self, address)

    # faults
    def partition(self, a: str, b: str, *, both_ways: bool = True) -> None:
        """Hold every byte from ``a`` to ``b`` (and back, unless one-way) until `heal`."""
        self._blocked.add((a, b))
        if both_ways:
            self._blocked.add((b, a))

    def isolate(self, a: str, others: list[str]) -> None:
        for b in others:
            if b != a:
                self.partition(a, b)

    def heal(self) -> None:
        self._blocked.clear()
        for t in sorted(self._transports, key=_order):
            while t.outbound.held and t.peer is not None:
                self._schedule(t, t.outbound.held.popleft())
        waiters, self._heal_waiters = self._heal_waiters, []
        for w in waiters:
            if not w.done():
                w.set_result(None)

    def reset(self, host: str, other: str | None = None) -> int:
        """End every connection of ``host`` (with ``other`` only, if given) with a reset; how many."""
        doomed = [
            t
            for t in sorted(self._transports, key=_order)
            if t.local[0] == host and (other is None or t.remote[0] == other)
        ]
        for t in doomed:
            t._reset(ConnectionResetError("connection reset"))
        return len(doomed)

    def crash_host(self, host: str) -> None:
        """The machine's process is gone: its listeners close and every connection of it resets."""
        for address in [a for a in self._listeners if a[0] == host]:
            self._listeners[address].close()
        self.reset(host)

    def connections(self) -> int:
        return len(self._transports)

    # the wire
    def _delay(self) -> float:
        # `uniform(0, j)` is `0 + j * random()`: the same draw, without its call.
        link = self.link
        return link.latency_s + link.jitter_s * self._rng.random()

    def _send(self, sender: _SimTransport, data: bytes) -> None:
        if sender.peer is None:
            return
        stream = sender.outbound
        if self._blocked and (stream.source, stream.target) in self._blocked:
            stream.held.append(data)
            return
        self._schedule(sender, data)

    def _schedule(self, sender: _SimTransport, data: bytes) -> None:
        stream = sender.outbound
        peer = sender.peer
        assert peer is not None
        arrival = self.loop.time() + self._delay()
        arrival = max(arrival, stream.last_arrival)
        stream.last_arrival = arrival
        in_flight = stream.in_flight
        in_flight.append((arrival, data))
        if len(in_flight) == 1:
            self.loop.call_at(arrival, self._land, sender, context=peer.context)

    def _land(self, sender: _SimTransport) -> None:
        # One timer per stream at a time: asyncio orders equal deadlines by its heap, not by scheduling,
        # so a timer per chunk could deliver a stream's chunks out of order.
        stream = sender.outbound
        now = self.loop.time()
        while stream.in_flight and stream.in_flight[0][0] <= now:
            _, data = stream.in_flight.popleft()
            peer = sender.peer
            if peer is None:
                stream.in_flight.clear()
                return
            peer._arrive(data)
        if stream.in_flight and sender.peer is not None:
            self.loop.call_at(stream.in_flight[0][0], self._land, sender, context=sender.peer.context)

    def _forget(self, transport: _SimTransport) -> None:
        self._transports.discard(transport)

    async def connect(
        self, source: str, factory: Callable[[], _P], host: str, port: int
    ) -> tuple[asyncio.Transport, _P]:
        while (source, host) in self._blocked or (host, source) in self._blocked:
            waiter = self.loop.create_future()
            self._heal_waiters.append(waiter)
            await waiter
        await asyncio.sleep(2 * self._delay())  # SYN, SYN-ACK
        server = self._listeners.get((host, port))
        if server is None:
            raise ConnectionRefusedError(f"nothing listens on {host}:{port}")
        local = (source, next(self._ports))
        client_protocol = factory()
        server_protocol = server.context.run(server.factory)
        client = _SimTransport(self, client_protocol, local, (host, port), contextvars.copy_context())
        accepted = _SimTransport(self, server_protocol, (host, port), local, server.context)
        client.peer, accepted.peer = accepted, client
        self._transports.update((client, accepted))
        server.context.run(server_protocol.connection_made, accepted)
        client_protocol.connection_made(client)
        return client, client_protocol

    async def listen(self, host: str, port: int, factory: Callable[[], asyncio.BaseProtocol]) -> SimServer:
        if port == 0:
            port = next(self._ports)
        address = (host, port)
        if address in self._listeners:
            raise OSError(98, f"address already in use: {host}:{port}")
        server = SimServer(self, address, factory)
        self._listeners[address] = server
        return server


def _order(t: _SimTransport) -> tuple[Address, Address]:
    return t.local, t.remote


class HostNetwork:
    """One simulated machine's view: connections it opens come from its address."""

    def __init__(self, network: SimNetwork, address: str) -> None:
        self.network = network
        self.address = address

    async def create_connection(
        self, protocol_factory: Callable[[], _P], host: str, port: int, **tls: Any
    ) -> tuple[asyncio.Transport, _P]:
        if tls.get("ssl") is not None:
            raise ValueError("the simulated network carries PLAINTEXT only")
        return await self.network.connect(self.address, protocol_factory, host, port)

    async def create_server(
        self, protocol_factory: Callable[[], asyncio.BaseProtocol], host: str, port: int
    ) -> SimServer:
        return await self.network.listen(
            self.address if host in ("", "0.0.0.0") else host, port, protocol_factory
        )
