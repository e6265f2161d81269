"""The replication round trip of one batch, and what it costs: acks=all, one request in flight.

    PYTHONPATH=src .venv/bin/python bench/replication_bench.py [--replicas 3] [--rounds 5]
    .venv/bin/python bench/replication_bench.py --processes [--src NAME=DIR ...] [--rounds 4]
    ... [--set KEY=VALUE ...]   (broker configs, e.g. replica.selector.class)

A producer sends a ready-made Produce request of ``--records`` x 100 B records (2340 fill librdkafka's
``batch.size=262144``) with acks=all to the leader of a partition replicated on ``--replicas`` brokers
and waits for the answer before sending the next, as librdkafka's idempotent producer does per
partition. Each answer needs the leader's append, every follower's fetch and append, their next
fetches and the high-watermark move.

Default: every broker (`Broker` + `KafkaServer`, the real code, on loopback ports) and the producer
run in one event loop (LeaderAndIsr handed to each replica manager as a controller would send it), so
the process CPU time per batch is the work the code does, free of the scheduling delays that dominate
a multi-process run on a shared machine; ``--replicas 1`` gives the leader alone, and the difference
is what replication costs. Compare code versions by running it with different ``PYTHONPATH``s,
alternating.

``--processes``: a real cluster (ZooKeeper and broker processes, `LocalCluster`), the producer in this
process; reports the round trip per batch (p50, p90, mean) and the brokers' CPU per batch (utime +
stime from /proc). ``--src NAME=DIR`` runs the brokers from other source trees, interleaved per round.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import os
import shutil
import statistics
import struct
import tempfile
import time
from pathlib import Path
from typing import Any

from confluent_kafka.admin import AdminClient, NewTopic

from strom.broker.broker import Broker, Endpoint
from strom.broker.config import BrokerConfig
from strom.broker.network.server import KafkaServer
from strom.protocol.api import ApiKey
from strom.protocol.codec import decode_response, encode_request
from strom.protocol.records.builder import build_batch
from strom.testing.cluster import LocalCluster

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


class AcksAllProducer:
    """Sends the same acks=all batch again and again, one request in flight."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, records: int) -> None:
        self._reader, self._writer = reader, writer
        batch = build_batch([(str(i % 100).encode(), b"x" * 100, (), 0) for i in range(records)])
        body = {
            "transactional_id": None,
            "acks": -1,
            "timeout_ms": 30_000,
            "topic_data": [{"name": TOPIC, "partition_data": [{"index": 0, "records": batch}]}],
        }
        self._frame = bytearray(encode_request(ApiKey.PRODUCE, PRODUCE_V, 0, "bench", body))
        self._ids = itertools.count(1)

    @classmethod
    async def connect(cls, host: str, port: int, records: int) -> AcksAllProducer:
        reader, writer = await asyncio.open_connection(host, port)
        return cls(reader, writer, records)

    async def produce(self) -> float:
        """One batch; returns its round trip in seconds."""
        correlation_id = next(self._ids)
        struct.pack_into(">i", self._frame, _CORRELATION_ID_POS, correlation_id)
        start = time.perf_counter()
        self._writer.write(bytes(self._frame))
        (size,) = _SIZE.unpack(await self._reader.readexactly(4))
        payload = await self._reader.readexactly(size)
        elapsed = time.perf_counter() - start
        got, response = decode_response(ApiKey.PRODUCE, PRODUCE_V, payload)
        result = response["responses"][0]["partition_responses"][0]
        if got != correlation_id or result["error_code"]:
            raise RuntimeError(f"produce failed: {result}")
        return elapsed

    def close(self) -> None:
        self._writer.close()


def _settings(args: argparse.Namespace) -> dict[str, str]:
    """Broker configs from ``--set KEY=VALUE``."""
    return dict(item.split("=", 1) for item in args.set)


async def in_one_process(args: argparse.Namespace, base: Path) -> tuple[list[float], list[float]]:
    brokers, servers = [], []
    for i in range(args.replicas):
        props = {"broker.id": str(i), "log.dirs": str(base / f"broker-{i}"), **_settings(args)}
        broker = Broker(BrokerConfig(props))
        server = KafkaServer(broker.handler_ports, "127.0.0.1", 0)
        host, port = await server.start()
        broker.advertised = Endpoint(host, port)
        broker.start_background()
        brokers.append(broker)
        servers.append(server)
    replicas = list(range(args.replicas))
    for broker in brokers:
        broker.replica_manager.become_leader_or_follower(leader_and_isr(replicas, brokers[0].advertised.port))
    producer = await AcksAllProducer.connect("127.0.0.1", brokers[0].advertised.port, args.records)
    try:
        for _ in range(20):  # connections made, codecs compiled, followers parked in their long poll
            await producer.produce()
        cpu_ms, wall_ms = [], []
        for _ in range(args.rounds):
            cpu0, wall0 = time.process_time(), time.perf_counter()
            for _ in range(args.batches):
                await producer.produce()
            cpu_ms.append((time.process_time() - cpu0) / args.batches * 1e3)
            wall_ms.append((time.perf_counter() - wall0) / args.batches * 1e3)
    finally:
        producer.close()
        for server in servers:
            await server.stop()
        for broker in brokers:
            await broker.stop()
    return cpu_ms, wall_ms


def in_processes(args: argparse.Namespace, src: str | None, base: Path) -> dict[str, float]:
    """One round against a fresh `LocalCluster` whose brokers run from ``src``."""
    before = os.environ.get("PYTHONPATH")
    if src is not None:
        os.environ["PYTHONPATH"] = src  # broker children inherit it
    try:
        overrides = {"offsets.topic.num.partitions": "1", **_settings(args)}
        cluster = LocalCluster(base, args.replicas, overrides=overrides)
        cluster.start()
    finally:
        if before is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = before
    try:
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        admin.create_topics([NewTopic(TOPIC, 1, args.replicas)])[TOPIC].result(30)
        leader = -1
        deadline = time.monotonic() + 30
        while leader < 0 and time.monotonic() < deadline:
            time.sleep(0.2)
            leader = admin.list_topics(TOPIC, timeout=10).topics[TOPIC].partitions[0].leader
        target = cluster.brokers[leader]

        async def drive() -> tuple[list[float], float]:
            producer = await AcksAllProducer.connect(target.host, target.port, args.records)
            try:
                for _ in range(20):
                    await producer.produce()
                cpu0 = sum(sum(b.cpu_times()) for b in cluster.brokers.values())
                trips = [await producer.produce() for _ in range(args.batches)]
                return trips, sum(sum(b.cpu_times()) for b in cluster.brokers.values()) - cpu0
            finally:
                producer.close()

        trips, cpu_s = asyncio.run(drive())
    finally:
        cluster.stop()
    trips.sort()
    return {
        "p50_ms": trips[len(trips) // 2] * 1e3,
        "p90_ms": trips[int(len(trips) * 0.9)] * 1e3,
        "mean_ms": statistics.mean(trips) * 1e3,
        "broker_cpu_ms_per_batch": cpu_s / len(trips) * 1e3,
        "load_1m": os.getloadavg()[0],
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--replicas", type=int, default=3)
    parser.add_argument("--records", type=int, default=2340, help="100 B records per batch")
    parser.add_argument("--batches", type=int, default=300, help="batches per round")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--processes", action="store_true", help="a real cluster of broker processes")
    parser.add_argument(
        "--src",
        action="append",
        default=[],
        metavar="NAME=DIR",
        help="with --processes: a broker variant and the src directory it runs from (repeat to compare)",
    )
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a broker config for every broker, e.g. replica.selector.class=... (KIP-392's extra fetches)",
    )
    args = parser.parse_args()
    base = Path(tempfile.mkdtemp(prefix="strom-replication-bench-"))
    try:
        if args.processes:
            variants: list[tuple[str, str | None]] = [
                (name, src) for name, src in (v.split("=", 1) for v in args.src)
            ] or [("current", None)]
            results: dict[str, list[dict[str, float]]] = {name: [] for name, _ in variants}
            for rnd in range(args.rounds):
                for name, src in variants:
                    row = in_processes(args, src, base / f"{name}-{rnd}")
                    results[name].append(row)
                    print(rnd, name, {k: round(v, 3) for k, v in row.items()}, flush=True)
            print(f"{args.replicas} broker processes, acks=all, {args.records} x 100 B per batch, medians:")
            for name, rows in results.items():
                med = {k: statistics.median(r[k] for r in rows) for k in rows[0]}
                print(
                    f"{name}: round trip p50 {med['p50_ms']:.2f} ms, p90 {med['p90_ms']:.2f} ms, "
                    f"mean {med['mean_ms']:.2f} ms; broker CPU {med['broker_cpu_ms_per_batch']:.2f} ms/batch"
                )
            return
        try:
            import uvloop  # the broker's own event loop (strom.broker.main)

            uvloop.install()
        except ImportError:
            pass
        cpu_ms, wall_ms = asyncio.run(in_one_process(args, base))
    finally:
        shutil.rmtree(base, ignore_errors=True)
    print(
        f"{args.replicas} replica(s), acks=all, {args.records} x 100 B per batch: "
        f"CPU {statistics.median(cpu_ms):.3f} ms/batch (rounds: {', '.join(f'{c:.3f}' for c in cpu_ms)}), "
        f"wall {statistics.median(wall_ms):.3f} ms/batch"
    )


if __name__ == "__main__":
    main()
