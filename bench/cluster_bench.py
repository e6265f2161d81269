"""Produce/consume throughput on a local 3-broker cluster (RF=3, min.insync.replicas=2), acks=1 and acks=all,
next to a single embedded broker with acks=1 in the same run, with the brokers' CPU cost. Medians of
``--runs`` rounds.

    .venv/bin/python bench/cluster_bench.py [--messages 200000] [--size 100] [--runs 3]
        [--src NAME=DIR ...] [--cases single,acks1,all,idempotent]

Each round starts a fresh single broker and a fresh cluster (ZooKeeper + 3 brokers) per variant
(``--src NAME=DIR``: the ``src`` directory holding the ``strom`` package the brokers run; several
variants run interleaved A B A B ..., the only fair comparison on a shared machine). Each case creates
a fresh topic of 3 partitions and a confluent-kafka producer (``linger.ms=5``, ``batch.size=262144``),
sends one warm-up message to each partition and waits for them, then times ``--messages`` keyed
messages until the last is acknowledged, and consumes everything back.

The warm-up keeps the producer's start-up out of the timed part. librdkafka acquires an idempotent
producer's id on a 500 ms timer: its first attempt, right after the bootstrap connection's Metadata
answer, finds no connection up (the bootstrap connection is retired for the broker's advertised one),
and nothing retries before the timer. In a 200,000-message run that was half of the idempotent case's
time. ``--no-warmup`` times from the producer's creation, as this script did before.

Besides msgs/s, each case reports the CPU time (utime + stime, /proc) that all broker processes
together spent while the timed messages were produced, per million messages and per GB (10^9 bytes of
message values): on 2 cores shared by three brokers and the client, it is much less sensitive to other
load than msgs/s. The idempotent case measures the replication round trip: librdkafka (2.16) checks
the messages it has in flight on a partition against its 5-request window, so an idempotent producer
has one Produce request in flight per partition, and each one waits for the leader's append, both
followers' fetch and append, their next fetches, the high-watermark move and the answer.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from strom.testing.broker_process import BrokerProcess
from strom.testing.cluster import LocalCluster

PARTITIONS = 3
# case name -> (label, acks, replication factor, idempotent)
CASES: dict[str, tuple[str, str, int, bool]] = {
    "single": ("single broker, acks=1", "1", 1, False),
    "acks1": ("3 brokers RF=3, acks=1", "1", 3, False),
    "all": ("3 brokers RF=3, acks=all", "all", 3, False),
    "idempotent": ("3 brokers RF=3, acks=all idempotent", "all", 3, True),
}


def brokers_cpu_s(brokers: Sequence[BrokerProcess]) -> float:
    """utime + stime of the broker processes (all their threads), from /proc."""
    return sum(sum(b.cpu_times()) for b in brokers)


def create(bootstrap: str, name: str, rf: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for fut in admin.create_topics(
        [NewTopic(name, PARTITIONS, rf, config={"min.insync.replicas": str(min(rf, 2))})]
    ).values():
        fut.result(timeout=30)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        md = admin.list_topics(name, timeout=10).topics[name]
        if md.error is None and all(p.leader >= 0 for p in md.partitions.values()):
            return
        time.sleep(0.2)


def produce(
    bootstrap: str,
    topic: str,
    acks: str,
    args: argparse.Namespace,
    idempotent: bool,
    brokers: list[BrokerProcess],
) -> tuple[float, float, float]:
    """(msgs/s, broker CPU seconds, seconds the warm-up took) for ``args.messages`` keyed messages."""
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": acks,
            "linger.ms": 5,
            "batch.size": 262144,
            "enable.idempotence": idempotent,
        }
    )
    warmup_s = 0.0
    if args.warmup:
        # One message to each partition, outside the timed part: the producer has its metadata, its
        # connections to the leaders and (idempotent) its producer id before the clock starts.
        start = time.perf_counter()
        for partition in range(PARTITIONS):
            producer.produce(topic, b"warm-up", partition=partition)
        assert producer.flush(30) == 0
        warmup_s = time.perf_counter() - start
    payload = b"x" * args.size
    cpu_before = brokers_cpu_s(brokers)
    start = time.perf_counter()
    for i in range(args.messages):
        while True:
            try:
                producer.produce(topic, payload, key=str(i % 100).encode())
                break
            except BufferError:
                producer.poll(0.01)
    assert producer.flush(120) == 0
    elapsed = time.perf_counter() - start
    return args.messages / elapsed, brokers_cpu_s(brokers) - cpu_before, warmup_s


def consume(bootstrap: str, topic: str, messages: int) -> float:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"bench-{time.time()}",
            "enable.auto.commit": False,
            "fetch.wait.max.ms": 100,
        }
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in range(3)])
    start = time.perf_counter()
    seen = 0
    deadline = time.monotonic() + 120
    while seen < messages and time.monotonic() < deadline:
        for msg in consumer.consume(10000, 0.5):
            if not msg.error():
                seen += 1
    elapsed = time.perf_counter() - start
    consumer.close()
    return seen / elapsed


def run_case(
    bootstrap: str, brokers: list[BrokerProcess], case: str, args: argparse.Namespace, rnd: int
) -> dict[str, Any]:
    label, acks, rf, idempotent = CASES[case]
    topic = f"bench-{case}-{rnd}"
    create(bootstrap, topic, rf)
    load = os.getloadavg()[0]
    produce_rate, cpu, warmup_s = produce(bootstrap, topic, acks, args, idempotent, brokers)
    consume_rate = (
        consume(bootstrap, topic, args.messages + (PARTITIONS if args.warmup else 0))
        if args.consume
        else float("nan")
    )
    return {
        "case": label,
        "produce_msgs_per_s": produce_rate,
        "warmup_s": warmup_s,
        "consume_msgs_per_s": consume_rate,
        "broker_cpu_s": cpu,
        "cpu_s_per_m_msgs": cpu / (args.messages / 1e6),
        "cpu_s_per_gb": cpu / (args.messages * args.size / 1e9),
        "load_1m": load,
    }


@contextlib.contextmanager
def pythonpath(src: str | None) -> Iterator[None]:
    """Broker children inherit PYTHONPATH: run them from ``src`` (None: leave the environment alone)."""
    before = os.environ.get("PYTHONPATH")
    if src is not None:
        os.environ["PYTHONPATH"] = src
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = before


def run_round(
    variant: str, src: str | None, cases: list[str], args: argparse.Namespace, rnd: int, tmp: Path
) -> list[dict[str, Any]]:
    rows = []
    base = tmp / f"{variant}-{rnd}"
    if "single" in cases:
        with pythonpath(src):
            single = BrokerProcess(base / "single")
            single.start()
        try:
            rows.append(run_case(single.bootstrap, [single], "single", args, rnd))
        finally:
            single.stop()
    clustered = [c for c in cases if c != "single"]
    if clustered:
        cluster = LocalCluster(base / "cluster", 3, overrides={"offsets.topic.num.partitions": "3"})
        try:
            with pythonpath(src):
                cluster.start()
            brokers = list(cluster.brokers.values())
            rows += [run_case(cluster.bootstrap, brokers, c, args, rnd) for c in clustered]
        finally:
            cluster.stop()
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument(
        "--src",
        action="append",
        default=[],
        metavar="NAME=DIR",
        help="a broker variant: NAME and the src directory its brokers run from (repeat to compare, "
        "interleaved; default: the environment's PYTHONPATH)",
    )
    parser.add_argument("--cases", default=",".join(CASES), help=f"comma-separated subset of {list(CASES)}")
    parser.add_argument(
        "--no-consume", dest="consume", action="store_false", help="skip reading the messages back"
    )
    parser.add_argument(
        "--no-warmup",
        dest="warmup",
        action="store_false",
        help="time the producer from its creation (as before: includes connecting and, idempotent, "
        "the producer id, which librdkafka acquires on a 500 ms timer)",
    )
    args = parser.parse_args()
    variants: list[tuple[str, str | None]] = [
        (name, src) for name, src in (v.split("=", 1) for v in args.src)
    ] or [("current", None)]
    cases = [c for c in args.cases.split(",") if c]
    results: dict[tuple[str, str], list[dict[str, Any]]] = {}
    with tempfile.TemporaryDirectory(prefix="strom-cluster-bench-") as tmp:
        for rnd in range(args.runs):
            for variant, src in variants:
                for row in run_round(variant, src, cases, args, rnd, Path(tmp)):
                    print(json.dumps({"round": rnd, "variant": variant, **row}), flush=True)
                    results.setdefault((variant, row["case"]), []).append(row)
    print(
        f"\n{args.messages} messages of {args.size} B, {PARTITIONS} partitions, median of {args.runs} runs, "
        f"{'after a warm-up message per partition' if args.warmup else 'timed from the producer creation'}"
    )
    print(
        "| variant | setup | produce msgs/s | % of single acks=1 | consume msgs/s "
        "| broker CPU s / M msgs | broker CPU s / GB | warm-up s |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for (variant, case), rows in results.items():
        med = {
            k: statistics.median(r[k] for r in rows)
            for k in (
                "produce_msgs_per_s",
                "consume_msgs_per_s",
                "cpu_s_per_m_msgs",
                "cpu_s_per_gb",
                "warmup_s",
            )
        }
        single = results.get((variant, CASES["single"][0]))
        share = (
            f"{med['produce_msgs_per_s'] / statistics.median(r['produce_msgs_per_s'] for r in single):.0%}"
            if single
            else "-"
        )
        print(
            f"| {variant} | {case} | {med['produce_msgs_per_s']:,.0f} | {share} "
            f"| {med['consume_msgs_per_s']:,.0f} | {med['cpu_s_per_m_msgs']:.2f} "
            f"| {med['cpu_s_per_gb']:.1f} | {med['warmup_s']:.2f} |"
        )


if __name__ == "__main__":
    main()
