"""CPU cost of one replicated batch: a leader, its followers and an acks=all producer in one process.

    PYTHONPATH=src .venv/bin/python bench/replication_bench.py [--replicas 3] [--records 2340] [--rounds 5]

Every broker (`Broker` + `KafkaServer`, the real code, on loopback ports) and the producer run in one
event loop, so the figure is the work the code does per batch, free of the scheduling delays that
dominate a multi-process run on a shared machine. Broker ``0`` leads one partition whose other
replicas follow it (LeaderAndIsr handed to each replica manager as a controller would send it); the
producer sends a ready-made Produce request of ``--records`` x 100 B records (2340 fill librdkafka's
``batch.size=262144``) with acks=all and waits for the answer before sending the next, as librdkafka's
idempotent producer does per partition. Reported: process CPU time and wall time per batch, medians
over ``--rounds`` rounds of ``--batches``. With ``--replicas 1`` the same loop measures the leader
alone; the difference is what replication costs. Compare code versions by running this twice with
different ``PYTHONPATH``s, alternating, on a machine as quiet as possible.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import shutil
import statistics
import struct
import tempfile
import time
from pathlib import Path
from typing import Any

from strom.broker.broker import Broker, Endpoint
from strom.broker.config import BrokerConfig
from strom.broker.server import KafkaServer
from strom.protocol.api import ApiKey
from strom.protocol.codec import decode_response, encode_request
from strom.protocol.records.builder import build_batch

_SIZE = struct.Struct(">i")
_CORRELATION_ID_POS = 8  # size prefix, api key, api version, then the correlation id
PRODUCE_V = 8
TOPIC = "replicated"


def leader_and_isr(replicas: list[int], leader_port: int) -> dict[str, Any]:
    return {
        "controller_id": 0,
        "controller_epoch": 1,
        "partition_states": [
            {
                "topic_name": TOPIC,
                "partition_index": 0,
                "controller_epoch": 1,
                "leader": 0,
                "leader_epoch": 1,
                "isr": replicas,
                "zk_version": 0,
                "replicas": replicas,
                "adding_replicas": [],
                "removing_replicas": [],
                "is_new": True,
            }
        ],
        "live_leaders": [{"broker_id": 0, "host_name": "127.0.0.1", "port": leader_port}],
    }


async def measure(args: argparse.Namespace, base: Path) -> tuple[list[float], list[float]]:
    brokers, servers = [], []
    for i in range(args.replicas):
        broker = Broker(BrokerConfig({"broker.id": str(i), "log.dirs": str(base / f"broker-{i}")}))
        server = KafkaServer(broker, "127.0.0.1", 0)
        host, port = await server.start()
        broker.advertised = Endpoint(host, port)
        broker.start_background()
        brokers.append(broker)
        servers.append(server)
    replicas = list(range(args.replicas))
    for broker in brokers:
        broker.replica_manager.become_leader_or_follower(leader_and_isr(replicas, brokers[0].advertised.port))
    reader, writer = await asyncio.open_connection("127.0.0.1", brokers[0].advertised.port)
    records = [(str(i % 100).encode(), b"x" * 100, (), 0) for i in range(args.records)]
    body = {
        "transactional_id": None,
        "acks": -1,
        "timeout_ms": 30_000,
        "topic_data": [{"name": TOPIC, "partition_data": [{"index": 0, "records": build_batch(records)}]}],
    }
    frame = bytearray(encode_request(ApiKey.PRODUCE, PRODUCE_V, 0, "bench", body))
    ids = itertools.count(1)

    async def produce_one() -> None:
        correlation_id = next(ids)
        struct.pack_into(">i", frame, _CORRELATION_ID_POS, correlation_id)
        writer.write(bytes(frame))
        (size,) = _SIZE.unpack(await reader.readexactly(4))
        got, response = decode_response(ApiKey.PRODUCE, PRODUCE_V, await reader.readexactly(size))
        result = response["responses"][0]["partition_responses"][0]
        if got != correlation_id or result["error_code"]:
            raise RuntimeError(f"produce failed: {result}")

    try:
        for _ in range(20):  # connections made, codecs compiled, followers parked in their long poll
            await produce_one()
        cpu_ms, wall_ms = [], []
        for _ in range(args.rounds):
            cpu0, wall0 = time.process_time(), time.perf_counter()
            for _ in range(args.batches):
                await produce_one()
            cpu_ms.append((time.process_time() - cpu0) / args.batches * 1e3)
            wall_ms.append((time.perf_counter() - wall0) / args.batches * 1e3)
    finally:
        writer.close()
        for server in servers:
            await server.stop()
        for broker in brokers:
            await broker.stop()
    return cpu_ms, wall_ms


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--replicas", type=int, default=3)
    parser.add_argument("--records", type=int, default=2340, help="100 B records per batch")
    parser.add_argument("--batches", type=int, default=300, help="batches per round")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    try:
        import uvloop  # the broker's own event loop (strom.broker.main)

        uvloop.install()
    except ImportError:
        pass
    base = Path(tempfile.mkdtemp(prefix="strom-replication-bench-"))
    try:
        cpu_ms, wall_ms = asyncio.run(measure(args, base))
    finally:
        shutil.rmtree(base, ignore_errors=True)
    print(
        f"{args.replicas} replica(s), acks=all, {args.records} x 100 B per batch: "
        f"CPU {statistics.median(cpu_ms):.3f} ms/batch (rounds: {', '.join(f'{c:.3f}' for c in cpu_ms)}), "
        f"wall {statistics.median(wall_ms):.3f} ms/batch"
    )


if __name__ == "__main__":
    main()
