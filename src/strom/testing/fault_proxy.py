"""A TCP proxy that injects faults between a client and a server, for tests of an unreliable peer.

Theory of operation. `FaultProxy` listens on 127.0.0.1 (an ephemeral port) and relays every accepted
connection to ``target``, two threads per connection pumping bytes each way. Its faults, switched at
any time from the test's thread:

- ``stall()``: bytes are no longer relayed (either way) until ``resume()``; connections stay open, so
  the client sees a server that stopped answering (its timeouts decide).
- ``reset_all()``: every open connection is closed at once with a TCP reset (SO_LINGER 0).
- ``fail_fraction(p)``: each chunk of bytes the client sends (for an HTTP client: a request, or a
  64 KiB part of a large one) resets the connection, before reaching the server, with probability
  ``p``; a fraction of requests fail and the client's retries decide.

The proxy holds no process: it is threads of the test's own process, stopped by `close()`. It knows
nothing of the protocol it carries; its randomness is seeded, so a run can be repeated.
"""

from __future__ import annotations

import contextlib
import random
import socket
import struct
import threading
from collections.abc import Iterator

_CHUNK = 65536
_POLL_S = 0.05


def _reset(sock: socket.socket) -> None:
    """Close with a TCP reset rather than an orderly shutdown."""
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    with contextlib.suppress(OSError):
        sock.close()


class FaultProxy:
    def __init__(self, target: tuple[str, int], seed: int = 0) -> None:
        self.target = target
        self._random = random.Random(seed)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(_POLL_S)
        self.port: int = self._listener.getsockname()[1]
        self._flowing = threading.Event()
        self._flowing.set()
        self._fail_fraction = 0.0
        self._lock = threading.Lock()
        self._open: set[socket.socket] = set()
        self._closed = threading.Event()
        self.connections = 0  # accepted so far
        self.failed = 0  # reset by fail_fraction
        self._threads: list[threading.Thread] = []
        self._accepter = threading.Thread(target=self._accept_loop, name="fault-proxy", daemon=True)
        self._accepter.start()

    @property
    def address(self) -> tuple[str, int]:
        return ("127.0.0.1", self.port)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    # faults -----------------------------------------------------------------------------------------
    def stall(self) -> None:
        self._flowing.clear()

    def resume(self) -> None:
        self._flowing.set()

    def fail_fraction(self, fraction: float) -> None:
        self._fail_fraction = fraction

    def reset_all(self) -> None:
        with self._lock:
            doomed, self._open = list(self._open), set()
        for sock in doomed:
            _reset(sock)

    @contextlib.contextmanager
    def stalled(self) -> Iterator[None]:
        self.stall()
        try:
            yield
        finally:
            self.resume()

    def close(self) -> None:
        self._closed.set()
        self._flowing.set()
        self.reset_all()
        self._accepter.join(5)
        with contextlib.suppress(OSError):
            self._listener.close()
        for thread in self._threads:
            thread.join(5)

    def __enter__(self) -> FaultProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # relaying ---------------------------------------------------------------------------------------
    def _accept_loop(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            self.connections += 1
            thread = threading.Thread(
                target=self._serve, args=(client,), name="fault-proxy-conn", daemon=True
            )
            self._threads = [t for t in self._threads if t.is_alive()]
            self._threads.append(thread)
            thread.start()

    def _serve(self, client: socket.socket) -> None:
        try:
            server = socket.create_connection(self.target, timeout=10)
        except OSError:
            _reset(client)
            return
        with self._lock:
            self._open.update((client, server))
        back = threading.Thread(
            target=self._pump, args=(server, client, False), name="fault-proxy-pump", daemon=True
        )
        back.start()
        self._pump(client, server, True)
        back.join()
        for sock in (client, server):
            with contextlib.suppress(OSError):
                sock.close()

    def _pump(self, source: socket.socket, sink: socket.socket, from_client: bool) -> None:
        try:
            source.settimeout(_POLL_S)
            while not self._closed.is_set():
                if not self._flowing.is_set():
                    self._flowing.wait(_POLL_S)
                    continue
                try:
                    data = source.recv(_CHUNK)
                except TimeoutError:
                    continue
                if not data:
                    with contextlib.suppress(OSError):
                        sink.shutdown(socket.SHUT_WR)
                    return
                if from_client and self._random.random() < self._fail_fraction:
                    self.failed += 1
                    _reset(source)
                    _reset(sink)
                    return
                while not self._flowing.is_set() and not self._closed.is_set():
                    self._flowing.wait(_POLL_S)  # stalled mid-transfer: hold what was read
                sink.sendall(data)
        except OSError:
            _reset(source)
            _reset(sink)
        finally:
            with self._lock:
                self._open.discard(source)
                self._open.discard(sink)


__all__ = ["FaultProxy"]
