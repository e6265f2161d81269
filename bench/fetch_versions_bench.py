"""The broker's CPU per Fetch request and per GB fetched, by Fetch version (v11 against the flexible ones).

Run by hand; never part of the test suite::

    PYTHONPATH=src python bench/fetch_versions_bench.py [--src before=DIR --src after=DIR] \\
        [--versions 11,12,13,16] [--rounds 5] [--small-requests 3000] [--large-requests 150]

librdkafka picks the newest Fetch version a broker advertises, so its tools cannot compare versions
on one broker; this client sends the same Fetch request at each version over one connection, one
request at a time, with frames encoded once (a frame's bytes are sent again and again, the response
is read and dropped: the client costs almost nothing). Per ``--src`` variant (a ``src`` tree holding
the ``strom`` package) one broker runs for the whole session, with two 6-partition topics:

- ``small``: one 100-byte record per partition; each request asks all 6 partitions from offset 0 with
  ``partition_max_bytes`` 200: six small batches per response, the fixed cost of a request;
- ``large``: ``--mb`` MB of 10 KB records; each request asks all 6 partitions from offset 0 with
  ``partition_max_bytes`` 1 MiB: about 6 MiB per response, sent from the page cache (``sendfile``).

A measurement is ``--small-requests`` (or ``--large-requests``) requests of one case at one version:
the broker process's CPU time (utime + stime from /proc) meanwhile, per request (us) and per GB of
response bytes (10^9). Rounds interleave versions and variants (the order alternates each round); the
last lines are the medians per (variant, case, version). Each result is a JSON line on stdout, with
the machine's 1-minute load average.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import struct
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from confluent_kafka import Producer
from reference_broker import start_variant

from strom.protocol import codec
from strom.testing import BrokerProcess

PARTITIONS = 6
FETCH, METADATA = 1, 3
_SIZE = struct.Struct(">i")


def emit(step: str, **values: Any) -> None:
    print(json.dumps({"step": step, "load_1m": round(os.getloadavg()[0], 2), **values}), flush=True)


class RawClient:
    """One connection; sends whole request frames and reads whole response frames."""

    def __init__(self, bootstrap: str) -> None:
        host, port = bootstrap.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = bytearray(64 << 20)

    def round_trip(self, frame: bytes) -> int:
        """Send ``frame``; the size of the response frame (its bytes are left in ``self.buf``)."""
        self.sock.sendall(frame)
        view = memoryview(self.buf)
        got = 0
        while got < 4:
            got += self.sock.recv_into(view[got:4])
        size = _SIZE.unpack_from(self.buf, 0)[0] + 4
        while got < size:
            n = self.sock.recv_into(view[got:size])
            if not n:
                raise ConnectionError("broker closed the connection")
            got += n
        return size

    def close(self) -> None:
        self.sock.close()


def topic_id(client: RawClient, topic: str) -> bytes:
    body = {"topics": [{"name": topic}], "allow_auto_topic_creation": False}
    size = client.round_trip(codec.encode_request(METADATA, 12, 1, "bench", body))
    _, answer = codec.decode_response(METADATA, 12, bytes(client.buf[4:size]))
    return bytes(answer["topics"][0]["topic_id"])


def fetch_frame(version: int, topic: str, topic_uuid: bytes, partition_max_bytes: int) -> bytes:
    partitions = [
        {
            "partition": p,
            "fetch_offset": 0,
            "partition_max_bytes": partition_max_bytes,
            "current_leader_epoch": -1,
        }
        for p in range(PARTITIONS)
    ]
    body = {
        "replica_id": -1,
        "max_wait_ms": 0,
        "min_bytes": 0,
        "max_bytes": 64 << 20,
        "isolation_level": 0,
        "session_id": 0,
        "session_epoch": -1,
        "topics": [{"topic": topic, "topic_id": topic_uuid, "partitions": partitions}],
        "forgotten_topics_data": [],
        "rack_id": "",
    }
    return codec.encode_request(FETCH, version, 2, "bench", body)


def fill(bootstrap: str, mb: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for p in range(PARTITIONS):
        producer.produce("small", value=b"s" * 100, partition=p)
    producer.flush(60)
    value = b"L" * 10_000
    for i in range(mb * 100):
        producer.produce("large", value=value, partition=i % PARTITIONS)
        producer.poll(0)
    if producer.flush(300) != 0:
        raise RuntimeError("records left unacknowledged")


def measure(broker: BrokerProcess, client: RawClient, frame: bytes, requests: int) -> tuple[float, float]:
    """(broker CPU us per request, broker CPU s per GB of responses) over ``requests`` round trips."""
    client.round_trip(frame)  # the version's codec compiled before the clock starts
    total = 0
    cpu0 = sum(broker.cpu_times())
    for _ in range(requests):
        total += client.round_trip(frame)
    cpu = sum(broker.cpu_times()) - cpu0
    return cpu / requests * 1e6, cpu / total * 1e9


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--src", action="append", default=[], metavar="NAME=DIR")
    parser.add_argument("--versions", default="11,12,13,16")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--small-requests", type=int, default=3000)
    parser.add_argument("--large-requests", type=int, default=150)
    parser.add_argument("--mb", type=int, default=60, help="MB of 10 KB records in the large topic")
    args = parser.parse_args()
    here = str(Path(__file__).resolve().parents[1] / "src")
    variants = [(v.split("=", 1)[0], v.split("=", 1)[1]) for v in args.src] or [("current", here)]
    versions = [int(v) for v in args.versions.split(",")]
    tmp = Path(tempfile.mkdtemp(prefix="strom-fetch-versions-"))
    brokers: dict[str, tuple[Any, RawClient, dict[tuple[str, int], bytes]]] = {}
    results: dict[tuple[str, str, int], list[tuple[float, float]]] = {}
    try:
        for name, src in variants:
            broker = start_variant(src, tmp / name, {"small": PARTITIONS, "large": PARTITIONS}, {}, 60)
            if not isinstance(broker, BrokerProcess):
                raise SystemExit("--src takes source trees only")
            fill(broker.bootstrap, args.mb)
            client = RawClient(broker.bootstrap)
            ids = {t: topic_id(client, t) for t in ("small", "large")}
            frames = {
                (case, v): fetch_frame(v, case, ids[case], 200 if case == "small" else 1 << 20)
                for case in ("small", "large")
                for v in versions
            }
            brokers[name] = (broker, client, frames)
        for rnd in range(args.rounds):
            order = variants if rnd % 2 == 0 else variants[::-1]
            for name, _ in order:
                broker, client, frames = brokers[name]
                for case in ("small", "large"):
                    requests = args.small_requests if case == "small" else args.large_requests
                    for v in versions if rnd % 2 == 0 else versions[::-1]:
                        us, per_gb = measure(broker, client, frames[case, v], requests)
                        results.setdefault((name, case, v), []).append((us, per_gb))
                        emit(
                            "fetch",
                            variant=name,
                            round=rnd,
                            case=case,
                            version=v,
                            broker_us_per_request=round(us, 1),
                            broker_s_per_gb=round(per_gb, 3),
                        )
    finally:
        for broker, client, _ in brokers.values():
            client.close()
            broker.stop(timeout_s=60)
        shutil.rmtree(tmp, ignore_errors=True)
    for (name, case, v), samples in sorted(results.items()):
        emit(
            "fetch-median",
            variant=name,
            case=case,
            version=v,
            broker_us_per_request=round(statistics.median(s[0] for s in samples), 1),
            broker_s_per_gb=round(statistics.median(s[1] for s in samples), 3),
        )


if __name__ == "__main__":
    main()
