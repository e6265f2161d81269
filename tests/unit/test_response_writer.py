"""ResponseWriter over real loopback connections: sendfile on plain TCP, one pread copy under TLS.

Each test runs a real asyncio server in-process, on the standard event loop and on uvloop (which
the broker uses), writes responses made of bytes, `FileRecords` from a real `PartitionLog` and
`BufferRecords` (records in memory), and reads them back with a real client connection.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
import uvloop
from test_storage_support import make_batch

from strom.broker.network.response_writer import ResponseWriter
from strom.protocol.buffer_records import EMPTY_BUFFER_RECORDS, BufferRecords
from strom.protocol.codec import Chunk
from strom.storage.config import LogConfig
from strom.storage.file_records import TruncatedFileError
from strom.storage.log import PartitionLog

LOOPS: dict[str, Callable[[], asyncio.AbstractEventLoop]] = {
    "asyncio": asyncio.new_event_loop,
    "uvloop": uvloop.new_event_loop,
}


@pytest.fixture(params=sorted(LOOPS))
def run(request: pytest.FixtureRequest) -> Callable[..., object]:
    def runner(coro: object) -> object:
        with asyncio.Runner(loop_factory=LOOPS[request.param]) as r:
            return r.run(coro)  # type: ignore[arg-type]

    return runner


@pytest.fixture
def log(tmp_path: Path) -> PartitionLog:
    plog = PartitionLog(str(tmp_path / "t-0"), LogConfig(segment_bytes=300_000), lambda: 1_000_000)
    for i in range(60):
        plog.append_as_leader(make_batch(count=5, value_size=4000 + i), leader_epoch=0)
    plog.high_watermark = plog.log_end_offset
    return plog


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> tuple[ssl.SSLContext, ssl.SSLContext]:
    """A self-signed certificate made with the openssl command: (server context, client context)."""
    d = tmp_path_factory.mktemp("tls")
    key, cert = d / "key.pem", d / "cert.pem"
    subprocess.run(
        [
            *("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1"),
            *("-subj", "/CN=localhost", "-keyout", str(key), "-out", str(cert)),
        ],
        check=True,
        capture_output=True,
    )
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server.load_cert_chain(cert, key)
    client = ssl.create_default_context(cafile=str(cert))
    client.check_hostname = False
    return server, client


def _responses(log: PartitionLog) -> tuple[list[list[Chunk]], bytes]:
    """Responses mixing bytes and records, and the bytes they stand for.

    Records: large ones over several segments (sendfile), a small one (copied and sent with the bytes
    around it) and empty ones; some responses end with their records, as a Fetch response may; and
    records held in memory as several buffers, sent as they are.
    """
    responses: list[list[Chunk]] = []
    expected = b""
    reads = [
        (0, 2_000_000),
        (50, 2_000_000),
        (log.log_end_offset, 100),
        (120, 5000),
        (0, 2_000_000),
        (log.log_end_offset, 100),
        (290, 1),
        (log.log_end_offset, 100),
    ]
    for i, (offset, max_bytes) in enumerate(reads):
        records = log.read_records(offset, max_bytes)
        head = f"head-{i}".encode()
        tail = memoryview(bytearray(f"tail-{i}".encode())) if i % 2 and records.size else b""
        responses.append([head, records, tail] if tail else [head, records])
        expected += head + records.read_bytes() + bytes(tail)
    # Records held in memory as several buffers (a remote read's cached chunks; an empty view too).
    held = log.read_records(0, 700_000).read_bytes()
    views = [memoryview(bytearray(held[i : i + 256_000])).toreadonly() for i in range(0, len(held), 256_000)]
    for i, records in enumerate((BufferRecords([*views, memoryview(b"")]), EMPTY_BUFFER_RECORDS)):
        head = f"head-buffers-{i}".encode()
        responses.append([head, records, b"tail"])
        expected += head + records.tobytes() + b"tail"
    return responses, expected


async def _send_and_receive(
    responses: list[list[Chunk]],
    expected_size: int,
    server_tls: ssl.SSLContext | None = None,
    client_tls: ssl.SSLContext | None = None,
) -> tuple[bytes, list[BaseException], bool]:
    """Serve one connection writing ``responses`` to a slow reader: (received, errors, zero copy)."""
    loop = asyncio.get_running_loop()
    errors: list[BaseException] = []
    zero_copy: list[bool] = []

    class Server(asyncio.Protocol):
        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            sock = transport.get_extra_info("socket")
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 128 * 1024)  # force partial sends

            def fatal(exc: BaseException) -> None:
                errors.append(exc)
                transport.abort()  # what the broker does: the client sees the connection end

            writer = ResponseWriter(transport, fatal, lambda: None)  # type: ignore[arg-type]
            zero_copy.append(writer.zero_copy)
            for chunks in responses:
                writer.write(chunks)
            self.writer = writer

        def connection_lost(self, exc: Exception | None) -> None:
            self.writer.close()

        def pause_writing(self) -> None:  # the transport's flow control, as the broker forwards it
            self.writer.pause_writing()

        def resume_writing(self) -> None:
            self.writer.resume_writing()

    server = await loop.create_server(Server, "127.0.0.1", 0, ssl=server_tls)
    port = server.sockets[0].getsockname()[1]
    reader, writer = await asyncio.open_connection(
        "127.0.0.1", port, ssl=client_tls, server_hostname="localhost" if client_tls else None
    )
    try:
        await asyncio.sleep(0.2)  # the server's socket is full by now; it waits for writability
        received = bytearray()
        while len(received) < expected_size:
            try:
                chunk = await asyncio.wait_for(reader.read(1 << 20), 2.0)
            except TimeoutError:
                break
            if not chunk:
                break
            received += chunk
    finally:
        writer.close()
        server.close()
        await server.wait_closed()
    return bytes(received), errors, zero_copy[0]


def test_plain_tcp_sends_file_slices_with_sendfile_in_order(
    run: Callable[..., object], log: PartitionLog
) -> None:
    responses, expected = _responses(log)
    assert len(expected) > 1_000_000  # far more than the socket buffers hold
    received, errors, zero_copy = run(_send_and_receive(responses, len(expected)))  # type: ignore[misc]
    assert zero_copy and not errors
    assert received == expected


def test_tls_reads_each_slice_once_and_sends_through_the_transport(
    run: Callable[..., object], log: PartitionLog, tls: tuple[ssl.SSLContext, ssl.SSLContext]
) -> None:
    responses, expected = _responses(log)
    received, errors, zero_copy = run(_send_and_receive(responses, len(expected), *tls))  # type: ignore[misc]
    assert not zero_copy and not errors
    assert received == expected


@pytest.mark.parametrize("use_tls", [False, True])
def test_a_slice_truncated_before_it_is_sent_is_fatal(
    run: Callable[..., object],
    log: PartitionLog,
    tls: tuple[ssl.SSLContext, ssl.SSLContext],
    use_tls: bool,
) -> None:
    records = log.read_records(0, 10_000_000)
    log.truncate_to(5)
    contexts = tls if use_tls else (None, None)
    received, errors, _ = run(_send_and_receive([[b"head", records]], records.size + 4, *contexts))  # type: ignore[misc]
    assert len(errors) == 1 and isinstance(errors[0], TruncatedFileError)
    assert len(received) < records.size + 4
