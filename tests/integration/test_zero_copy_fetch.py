"""Zero-copy fetch (issue 8 item 7): stored batches reach real clients byte for byte through sendfile.

The broker answers a fetch with file ranges of its segments, which its network layer sends with
``os.sendfile`` (storage/file_records.py, broker/network/response_writer.py). Here every client library reads
through that path from a topic with small segments (so one partition's data spans several files and a
response several slices); raw fetches are compared with the segment files on disk; fetches are
pipelined on one connection whose reader is slow, so responses far larger than the socket buffers
stop on EAGAIN and resume; and a topic is deleted while a response naming its files is still queued.
"""

from __future__ import annotations

import os
import random
import socket
import struct
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from strom.protocol.api import ApiKey
from strom.protocol.codec import decode_response, encode_request
from strom.protocol.records.batch import iter_headers
from strom.testing import BrokerProcess
from tests.integration.clients import CLIENTS, ConfluentClient, Rec, make_client
from tests.integration.rawclient import RawClient, fetch_body

SEGMENT_BYTES = 1 << 20
FETCH_VERSION = 11


def _records(seed: int, count: int) -> list[Rec]:
    """Values of 0..64 KiB (random bytes), some keys and headers, all on partition 0."""
    rng = random.Random(seed)
    out = []
    for i in range(count):
        value = rng.randbytes(rng.choice((0, 10, 1000, 20_000, 65_536)))
        key = None if i % 3 == 0 else f"k{i}".encode()
        headers = (("h", f"{i}".encode()),) if i % 5 == 0 else ()
        out.append(Rec(key, value, headers, 0))
    return out


def _produce(broker: BrokerProcess, topic: str, records: list[Rec]) -> None:
    client = ConfluentClient(broker.bootstrap)
    client.create_topic(topic, 1, {"segment.bytes": str(SEGMENT_BYTES)})
    produced = client.produce(topic, records)
    assert [p.offset for p in produced] == list(range(len(records)))


def _log_files_bytes(broker: BrokerProcess, topic: str) -> bytes:
    """The partition's segment files, concatenated in offset order: what a whole-log fetch must return."""
    files = sorted((broker.data_dir / "logs" / f"{topic}-0").glob("*.log"))
    assert len(files) > 3, "the topic should span several segments"
    return b"".join(f.read_bytes() for f in files)


def _fetch_request(topic: str, correlation_id: int, max_bytes: int) -> bytes:
    body = fetch_body([(topic, 0, 0, max_bytes)], max_bytes=max_bytes)
    return encode_request(ApiKey.FETCH, FETCH_VERSION, correlation_id, "zc", body)


def _read_exactly(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(min(n - len(buf), 1 << 20))
        assert chunk, f"the broker closed the connection after {len(buf)} of {n} bytes"
        buf += chunk
    return bytes(buf)


def _read_response(sock: socket.socket, api_key: int, version: int) -> tuple[int, dict[str, Any]]:
    size = int.from_bytes(_read_exactly(sock, 4), "big")
    return decode_response(api_key, version, _read_exactly(sock, size))


def _slow_reader(broker: BrokerProcess) -> socket.socket:
    """A connection with a small receive buffer, so that large responses back up in the broker."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 32 * 1024)
    sock.settimeout(30)
    sock.connect(("127.0.0.1", broker.port))
    return sock


@pytest.fixture(scope="module")
def spanning_topic(broker: BrokerProcess) -> Iterator[tuple[str, list[Rec]]]:
    """A one-partition topic of about 12 MB over more than ten 1 MiB segments."""
    topic = "zero-copy-spanning"
    records = _records(seed=8, count=600)
    _produce(broker, topic, records)
    yield topic, records


@pytest.mark.parametrize("client_name", sorted(CLIENTS))
def test_every_client_reads_the_stored_records(
    broker: BrokerProcess, spanning_topic: tuple[str, list[Rec]], client_name: str
) -> None:
    topic, records = spanning_topic
    client = make_client(client_name, broker.bootstrap)
    try:
        got = client.consume(topic, 0, 0, len(records), timeout_s=60)
    finally:
        client.close()
    assert [r.offset for r in got] == list(range(len(records)))
    assert [(r.key, r.value or b"", r.headers) for r in got] == [(r.key, r.value, r.headers) for r in records]


def test_a_whole_log_fetch_is_the_segment_files_byte_for_byte(
    broker: BrokerProcess, spanning_topic: tuple[str, list[Rec]]
) -> None:
    topic, _ = spanning_topic
    with RawClient(broker.bootstrap) as raw:
        entry = raw.fetch(topic, 0, 0, max_bytes=64 << 20, partition_max_bytes=64 << 20)
    assert entry["error_code"] == 0
    assert bytes(entry["records"]) == _log_files_bytes(broker, topic)


def test_pipelined_fetches_larger_than_the_socket_buffers_arrive_whole_and_in_order(
    broker: BrokerProcess, spanning_topic: tuple[str, list[Rec]]
) -> None:
    topic, _ = spanning_topic
    expected = _log_files_bytes(broker, topic)
    limits = [64 << 20, 3 << 20, 64 << 20, 100_000, 64 << 20]
    with _slow_reader(broker) as sock:
        # Fetches of ~12 MB, a few smaller ones and bytes-only responses in between, all sent at once.
        requests = []
        for i, limit in enumerate(limits):
            requests.append(_fetch_request(topic, 100 + i, limit))
            requests.append(encode_request(ApiKey.API_VERSIONS, 0, 200 + i, "zc", {}))
        sock.sendall(b"".join(requests))
        time.sleep(1.0)  # the broker fills the socket and waits for writability
        for i, limit in enumerate(limits):
            correlation_id, body = _read_response(sock, ApiKey.FETCH, FETCH_VERSION)
            assert correlation_id == 100 + i
            data = bytes(body["responses"][0]["partitions"][0]["records"])
            if limit >= len(expected):
                assert data == expected
            else:  # whole batches from the start: within the limit, or the first batch alone (KIP-74)
                sizes = [h.size for _, h in iter_headers(data)]
                assert expected.startswith(data) and sum(sizes) == len(data) > 0
                assert len(data) <= limit or len(sizes) == 1
            correlation_id, versions = _read_response(sock, ApiKey.API_VERSIONS, 0)
            assert correlation_id == 200 + i and versions["error_code"] == 0


def _broker_fds_to(broker: BrokerProcess, fragment: str) -> list[str]:
    assert broker.proc is not None
    fd_dir = Path(f"/proc/{broker.proc.pid}/fd")
    links = []
    for fd in fd_dir.iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if fragment in target:
            links.append(target)
    return links


def test_a_queued_response_survives_the_deletion_of_its_segments(broker: BrokerProcess) -> None:
    topic = "zero-copy-deleted"
    _produce(broker, topic, _records(seed=9, count=500))
    expected = _log_files_bytes(broker, topic)
    with _slow_reader(broker) as sock:
        sock.sendall(_fetch_request(topic, 7, 64 << 20))
        time.sleep(0.5)  # most of the response is still queued in the broker
        admin = ConfluentClient(broker.bootstrap)._admin()  # must outlive its futures
        admin.delete_topics([topic])[topic].result(30)
        deadline = time.monotonic() + 30
        while list((broker.data_dir / "logs").glob(f"{topic}-*/*.log")):
            assert time.monotonic() < deadline, "the topic's segments were not deleted"
            time.sleep(0.1)
        # The files are gone from the directory, but the queued response still holds them open.
        assert any("(deleted)" in link for link in _broker_fds_to(broker, f"/{topic}-0"))
        correlation_id, body = _read_response(sock, ApiKey.FETCH, FETCH_VERSION)
    assert correlation_id == 7
    assert bytes(body["responses"][0]["partitions"][0]["records"]) == expected
    deadline = time.monotonic() + 10
    while _broker_fds_to(broker, f"/{topic}-0"):  # sent: the descriptors close
        assert time.monotonic() < deadline, _broker_fds_to(broker, f"/{topic}-0")
        time.sleep(0.1)


def test_a_client_gone_mid_response_costs_nothing(
    broker: BrokerProcess, spanning_topic: tuple[str, list[Rec]]
) -> None:
    """Queued slices are dropped with the connection: no error, no descriptor left open, still serving."""
    topic, _ = spanning_topic
    held_before = len(_broker_fds_to(broker, f"/{topic}-0"))  # the segments' own descriptors
    log_size = broker.log_path.stat().st_size
    for _ in range(3):
        with _slow_reader(broker) as sock:
            sock.sendall(_fetch_request(topic, 1, 64 << 20) + _fetch_request(topic, 2, 64 << 20))
            time.sleep(0.3)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # reset
    deadline = time.monotonic() + 10
    while len(_broker_fds_to(broker, f"/{topic}-0")) > held_before:
        assert time.monotonic() < deadline, _broker_fds_to(broker, f"/{topic}-0")
        time.sleep(0.1)
    with open(broker.log_path) as log:
        log.seek(log_size)
        assert "Traceback" not in log.read()
    with RawClient(broker.bootstrap) as raw:
        entry = raw.fetch(topic, 0, 0, max_bytes=64 << 20, partition_max_bytes=64 << 20)
    assert bytes(entry["records"]) == _log_files_bytes(broker, topic)
