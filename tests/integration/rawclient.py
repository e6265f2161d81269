"""A tiny synchronous raw-protocol Kafka client for conformance and bad-input tests.

One blocking socket, Strom's own codec (`encode_request` / `decode_response`, cross-checked against
kafka-python in the unit tests), and a bounded timeout on every read, so a broker that never answers
fails a test instead of hanging the suite. Requests may be pipelined (`send` several, then `recv` each)
and raw bytes can be written as they are (`send_bytes`) to feed the broker garbage.
"""

from __future__ import annotations

import itertools
import socket
import struct
import time
from typing import Any

from strom.protocol.api import ApiKey
from strom.protocol.codec import decode_response, encode_request
from strom.protocol.records.batch import patch_base_offset, patch_leader_epoch
from strom.protocol.records.builder import build_batch

_SIZE = struct.Struct(">i")
_correlation = itertools.count(1)
DEFAULT_TIMEOUT_S = 15.0


class BrokerClosed(ConnectionError):
    """The broker closed the connection."""


class RawClient:
    """One blocking connection to a broker; see the module docstring."""

    def __init__(
        self, bootstrap: str, timeout_s: float = DEFAULT_TIMEOUT_S, client_id: str | None = "strom-raw"
    ) -> None:
        host, port = bootstrap.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=timeout_s)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.timeout_s = timeout_s
        self.client_id = client_id

    # -- framing ------------------------------------------------------------------------------------
    def send(
        self, api_key: int, version: int, body: dict[str, Any], correlation_id: int | None = None
    ) -> int:
        """Write one request; returns its correlation id."""
        cid = next(_correlation) if correlation_id is None else correlation_id
        self.sock.sendall(encode_request(api_key, version, cid, self.client_id, body))
        return cid

    def send_bytes(self, data: bytes) -> None:
        self.sock.sendall(data)

    def recv_frame(self, timeout_s: float | None = None) -> bytes:
        """One response payload (without its size prefix)."""
        (size,) = _SIZE.unpack(self._read(4, timeout_s))
        return self._read(size, timeout_s)

    def recv(self, api_key: int, version: int, correlation_id: int, timeout_s: float | None = None) -> Any:
        got, body = decode_response(api_key, version, self.recv_frame(timeout_s))
        assert got == correlation_id, f"response to {got}, expected {correlation_id}"
        return body

    def call(self, api_key: int, version: int, body: dict[str, Any], timeout_s: float | None = None) -> Any:
        return self.recv(api_key, version, self.send(api_key, version, body), timeout_s)

    def _read(self, n: int, timeout_s: float | None) -> bytes:
        deadline = time.monotonic() + (self.timeout_s if timeout_s is None else timeout_s)
        buf = bytearray()
        while len(buf) < n:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"no complete response within the timeout ({len(buf)}/{n} bytes)")
            self.sock.settimeout(left)
            try:
                chunk = self.sock.recv(n - len(buf))
            except TimeoutError:
                continue
            except ConnectionResetError as exc:
                raise BrokerClosed("connection reset by the broker") from exc
            if not chunk:
                raise BrokerClosed("the broker closed the connection")
            buf += chunk
        return bytes(buf)

    def closed_by_peer(self, timeout_s: float = 5.0) -> bool:
        """Whether the broker closes this connection within ``timeout_s`` (any bytes sent are drained)."""
        deadline = time.monotonic() + timeout_s
        while (left := deadline - time.monotonic()) > 0:
            self.sock.settimeout(left)
            try:
                chunk = self.sock.recv(65536)
            except TimeoutError:
                return False
            except OSError:
                return True
            if not chunk:
                return True
        return False

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> RawClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- common requests ----------------------------------------------------------------------------
    def create_topic(
        self, name: str, partitions: int = 1, configs: dict[str, str] | None = None, version: int = 4
    ) -> int:
        """CreateTopics for one topic; returns its error code."""
        body = {
            "topics": [
                {
                    "name": name,
                    "num_partitions": partitions,
                    "replication_factor": 1,
                    "assignments": [],
                    "configs": [{"name": k, "value": v} for k, v in (configs or {}).items()],
                }
            ],
            "timeout_ms": 10_000,
        }
        resp = self.call(ApiKey.CREATE_TOPICS, version, body)
        return int(resp["topics"][0]["error_code"])

    def produce(
        self,
        topic: str,
        partition: int,
        records: bytes | None,
        acks: int = -1,
        version: int = 8,
    ) -> dict[str, Any]:
        """Produce one partition payload; returns that partition's response entry."""
        resp = self.call(ApiKey.PRODUCE, version, produce_body(topic, partition, records, acks))
        return dict(resp["responses"][0]["partition_responses"][0])

    def fetch(
        self,
        topic: str,
        partition: int,
        offset: int,
        *,
        version: int = 11,
        max_wait_ms: int = 0,
        min_bytes: int = 0,
        max_bytes: int = 50 * 1024 * 1024,
        partition_max_bytes: int = 1024 * 1024,
        isolation_level: int = 0,
        rack_id: str = "",
        timeout_s: float | None = None,
    ) -> dict[str, Any]:
        """Fetch one partition (as a consumer in ``rack_id``); returns that partition's response entry."""
        resp = self.call(
            ApiKey.FETCH,
            version,
            fetch_body(
                [(topic, partition, offset, partition_max_bytes)],
                max_wait_ms=max_wait_ms,
                min_bytes=min_bytes,
                max_bytes=max_bytes,
                isolation_level=isolation_level,
                rack_id=rack_id,
            ),
            timeout_s,
        )
        return dict(resp["responses"][0]["partitions"][0])

    def list_offset(
        self, topic: str, partition: int, timestamp: int, version: int = 5, isolation_level: int = 0
    ) -> dict[str, Any]:
        body = {
            "replica_id": -1,
            "isolation_level": isolation_level,
            "topics": [
                {
                    "name": topic,
                    "partitions": [
                        {"partition_index": partition, "current_leader_epoch": -1, "timestamp": timestamp}
                    ],
                }
            ],
        }
        resp = self.call(ApiKey.LIST_OFFSETS, version, body)
        return dict(resp["topics"][0]["partitions"][0])

    def init_producer_id(self, version: int = 1) -> tuple[int, int]:
        resp = self.call(
            ApiKey.INIT_PRODUCER_ID, version, {"transactional_id": None, "transaction_timeout_ms": 60_000}
        )
        assert resp["error_code"] == 0, resp
        return int(resp["producer_id"]), int(resp["producer_epoch"])


def produce_body(topic: str, partition: int, records: bytes | None, acks: int = -1) -> dict[str, Any]:
    return {
        "transactional_id": None,
        "acks": acks,
        "timeout_ms": 10_000,
        "topic_data": [{"name": topic, "partition_data": [{"index": partition, "records": records}]}],
    }


def fetch_body(
    partitions: list[tuple[str, int, int, int]],
    *,
    max_wait_ms: int = 0,
    min_bytes: int = 0,
    max_bytes: int = 50 * 1024 * 1024,
    isolation_level: int = 0,
    rack_id: str = "",
) -> dict[str, Any]:
    """A sessionless Fetch body for ``(topic, partition, fetch_offset, partition_max_bytes)`` entries."""
    topics: dict[str, list[dict[str, Any]]] = {}
    for topic, partition, offset, pmax in partitions:
        topics.setdefault(topic, []).append(
            {
                "partition": partition,
                "current_leader_epoch": -1,
                "fetch_offset": offset,
                "log_start_offset": -1,
                "partition_max_bytes": pmax,
            }
        )
    return {
        "replica_id": -1,
        "max_wait_ms": max_wait_ms,
        "min_bytes": min_bytes,
        "max_bytes": max_bytes,
        "isolation_level": isolation_level,
        "session_id": 0,
        "session_epoch": -1,
        "topics": [{"topic": t, "partitions": ps} for t, ps in topics.items()],
        "forgotten_topics_data": [],
        "rack_id": rack_id,
    }


def batch(
    values: list[bytes],
    *,
    timestamp_ms: int | None = None,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    key: bytes | None = None,
) -> bytes:
    """A v2 record batch of ``values`` (uncompressed), as a producer would send it."""
    ts = int(time.time() * 1000) if timestamp_ms is None else timestamp_ms
    return build_batch(
        [(key, v, (), ts + i) for i, v in enumerate(values)],
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
    )


def as_retry(stored: bytes) -> bytes:
    """A stored batch as its producer would resend it: same producer id, epoch and sequence, with the
    offsets and leader epoch a client sends (0 and -1)."""
    retry = bytearray(stored)
    patch_base_offset(retry, 0, 0)
    patch_leader_epoch(retry, 0, -1)
    return bytes(retry)
