"""Transactional produce against idempotent produce, and the latency of `commit_transaction()`.

    PYTHONPATH=src .venv/bin/python bench/txn_bench.py [--messages 100000] [--sizes 100,1000]
        [--txn-sizes 100,10000] [--runs 3] [--cluster]

Per round, a fresh single broker (durable files, default flush policy; ``--cluster`` adds a fresh
3-broker ZooKeeper cluster with RF 3 and ``min.insync.replicas=2``, where the producer uses acks=all as
a transactional producer must) and per record size, on a fresh topic of 3 partitions each:

- ``idempotent``: a confluent-kafka producer with ``enable.idempotence`` sends ``--messages`` records
  (round-robin over the partitions, ``linger.ms=5``) and flushes;
- ``txn N``: a transactional producer (``transactional.id`` fresh per case, ``linger.ms=5``) sends the
  same records in transactions of N records each: ``begin_transaction``, N x ``produce``,
  ``commit_transaction``. `commit_transaction()` flushes what the producer still holds, then runs
  EndTxn; its duration is what an application waits at each commit, sampled per transaction.

The timed part starts after ``init_transactions()`` (and, for every case, after a warm-up record per
partition, acknowledged, so connections and the producer id are in place) and ends when the last
record is acknowledged (idempotent) or the last commit returns. Reported per case: records/s, MB/s of
record values, and for transactions the p50 and p99 of the commit latency in ms (over all commits of
all rounds: with 10,000 records per transaction there are only a few per round). The last lines are a
Markdown table of medians over the rounds (the percentiles over the pooled samples) and the 1-minute
load average seen at each round's start.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from strom.testing.broker_process import BrokerProcess
from strom.testing.cluster import LocalCluster

PARTITIONS = 3
TXN_SETTINGS = {"transaction.state.log.num.partitions": "5", "offsets.topic.num.partitions": "3"}


def create_topic(bootstrap: str, name: str, rf: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})  # must outlive its futures
    config = {"min.insync.replicas": str(min(rf, 2))}
    admin.create_topics([NewTopic(name, PARTITIONS, rf, config=config)])[name].result(30)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        md = admin.list_topics(name, timeout=10).topics[name]
        if md.error is None and all(p.leader >= 0 for p in md.partitions.values()):
            return
        time.sleep(0.2)


def produce_one(producer: Producer, topic: str, payload: bytes, partition: int) -> None:
    while True:
        try:
            producer.produce(topic, payload, partition=partition)
            return
        except BufferError:
            producer.poll(0.01)


def warm_up(producer: Producer, topic: str) -> None:
    for partition in range(PARTITIONS):
        produce_one(producer, topic, b"warm-up", partition)


def idempotent_case(bootstrap: str, topic: str, messages: int, size: int) -> dict[str, Any]:
    producer = Producer(
        {"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5, "batch.size": 262144}
    )
    warm_up(producer, topic)
    assert producer.flush(60) == 0
    payload = b"x" * size
    start = time.perf_counter()
    for i in range(messages):
        produce_one(producer, topic, payload, i % PARTITIONS)
    assert producer.flush(120) == 0
    return {"elapsed_s": time.perf_counter() - start, "commit_ms": []}


def txn_case(bootstrap: str, topic: str, messages: int, size: int, per_txn: int) -> dict[str, Any]:
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "transactional.id": f"bench-{uuid.uuid4().hex[:8]}",
            "linger.ms": 5,
            "batch.size": 262144,
            "queue.buffering.max.messages": max(100_000, per_txn * 2),
        }
    )
    producer.init_transactions(60)
    producer.begin_transaction()
    warm_up(producer, topic)
    producer.commit_transaction(60)
    payload = b"x" * size
    commits: list[float] = []
    start = time.perf_counter()
    sent = 0
    while sent < messages:
        producer.begin_transaction()
        for _ in range(min(per_txn, messages - sent)):
            produce_one(producer, topic, payload, sent % PARTITIONS)
            sent += 1
        before = time.perf_counter()
        producer.commit_transaction(120)
        commits.append((time.perf_counter() - before) * 1000)
    return {"elapsed_s": time.perf_counter() - start, "commit_ms": commits}


def run_cases(
    bootstrap: str, setup: str, rf: int, args: argparse.Namespace, rnd: int
) -> list[dict[str, Any]]:
    rows = []
    for size in args.sizes:
        for case in ["idempotent", *(f"txn {n}" for n in args.txn_sizes)]:
            topic = f"bench-{rnd}-{size}-{case.replace(' ', '')}"
            create_topic(bootstrap, topic, rf)
            if case == "idempotent":
                result = idempotent_case(bootstrap, topic, args.messages, size)
            else:
                result = txn_case(bootstrap, topic, args.messages, size, int(case.split()[1]))
            rate = args.messages / result["elapsed_s"]
            rows.append(
                {
                    "round": rnd,
                    "setup": setup,
                    "size": size,
                    "case": case,
                    "msgs_per_s": rate,
                    "mb_per_s": rate * size / 1e6,
                    "commits": len(result["commit_ms"]),
                    "commit_ms": result["commit_ms"],
                    "load_1m": os.getloadavg()[0],
                }
            )
            short = {k: v for k, v in rows[-1].items() if k != "commit_ms"}
            print(json.dumps(short), flush=True)
    return rows


def percentile(samples: Sequence[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def summarize(rows: list[dict[str, Any]], args: argparse.Namespace) -> None:
    groups: dict[tuple[str, int, str], list[dict[str, Any]]] = {}
    for row in rows:
        groups.setdefault((row["setup"], row["size"], row["case"]), []).append(row)
    print(f"\n{args.messages} records per case, {PARTITIONS} partitions, median of {args.runs} rounds")
    print(
        "| setup | record | case | records/s | MB/s | % of idempotent "
        "| commits | commit p50 ms | commit p99 ms |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for (setup, size, case), group in groups.items():
        rate = statistics.median(r["msgs_per_s"] for r in group)
        base = statistics.median(r["msgs_per_s"] for r in groups[(setup, size, "idempotent")])
        commits = [ms for r in group for ms in r["commit_ms"]]
        p50 = f"{percentile(commits, 0.5):.1f}" if commits else "-"
        p99 = f"{percentile(commits, 0.99):.1f}" if commits else "-"
        print(
            f"| {setup} | {size} B | {case} | {rate:,.0f} | {rate * size / 1e6:.2f} | {rate / base:.0%} "
            f"| {len(commits)} | {p50} | {p99} |"
        )
    loads = sorted({round(r["load_1m"], 1) for r in rows})
    print(f"1-minute load average during the runs: {loads[0]}-{loads[-1]}")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--sizes", default="100,1000", help="record value sizes in bytes, comma-separated")
    parser.add_argument("--txn-sizes", default="100,10000", help="records per transaction, comma-separated")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--cluster", action="store_true", help="also a 3-broker cluster with RF 3")
    args = parser.parse_args()
    args.sizes = [int(s) for s in args.sizes.split(",")]
    args.txn_sizes = [int(s) for s in args.txn_sizes.split(",")]
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="strom-txn-bench-") as tmp:
        for rnd in range(args.runs):
            single = BrokerProcess(Path(tmp) / f"single-{rnd}", dict(TXN_SETTINGS))
            single.start()
            try:
                rows += run_cases(single.bootstrap, "single broker", 1, args, rnd)
            finally:
                single.stop()
            if args.cluster:
                cluster = LocalCluster(Path(tmp) / f"cluster-{rnd}", 3, overrides=dict(TXN_SETTINGS))
                try:
                    cluster.start()
                    rows += run_cases(cluster.bootstrap, "3 brokers RF 3", 3, args, rnd)
                finally:
                    cluster.stop()
    summarize(rows, args)


if __name__ == "__main__":
    main()
