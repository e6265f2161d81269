"""Per-message latency of a transactional producer with ``linger.ms=35``: one message per transaction.

    PYTHONPATH=src .venv/bin/python bench/txn_latency_bench.py [--messages 40] [--runs 3]
        [--setups single,cluster] [--rf 3] [--txn-partitions 50] [--debug]

(``PYTHONPATH`` picks the source tree the brokers run: another checkout's ``src`` measures that one.)

The scenario of librdkafka's producer-latency test (its "transactions (35ms)" case, which expects an
average of 35-85 ms plus the broker round trip): a confluent-kafka producer with ``linger.ms=35`` and a
``transactional.id`` runs ``init_transactions``, a priming transaction, then per message
``begin_transaction``, one ``produce`` to partition 0, polls until its delivery report arrives and
``commit_transaction``. The latency is from ``produce`` to the delivery report. Each ``begin`` follows
the previous commit at once, so the new transaction's AddPartitionsToTxn meets the previous one still
completing (its markers and its CompleteCommit record): how long the coordinator takes there, and how
the producer backs off from CONCURRENT_TRANSACTIONS, is what this measures.

Per round a fresh single broker and/or a fresh 3-broker ZooKeeper cluster (``__transaction_state`` with
RF 3 on the cluster), the topic with one partition and ``--rf`` replicas (capped at the brokers). With
``--debug`` librdkafka's ``eos`` debug log is scanned for AddPartitionsToTxn answers: the number of
CONCURRENT_TRANSACTIONS answers per transaction is reported too. Printed: per setup and round the
average, median and maximum latency and the commit duration, then a Markdown table of the medians
over the rounds and the load average seen.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import statistics
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

# PYTHONPATH, when set, picks the source tree measured (the brokers inherit it): main's for a baseline.
if "PYTHONPATH" not in os.environ:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from strom.testing.broker_process import BrokerProcess
from strom.testing.cluster import LocalCluster

TXN_SETTINGS = {"offsets.topic.num.partitions": "3"}


def create_topic(bootstrap: str, name: str, rf: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, 1, rf)])[name].result(30)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        md = admin.list_topics(name, timeout=10).topics[name]
        if md.error is None and all(p.leader >= 0 for p in md.partitions.values()):
            return
        time.sleep(0.2)
    raise RuntimeError(f"{name} has no leader")


class ConcurrentCounter:
    """Counts CONCURRENT_TRANSACTIONS answers to AddPartitionsToTxn in librdkafka's eos debug log."""

    def __init__(self) -> None:
        self.count = 0
        self.lock = threading.Lock()

    def __call__(self, level: int, fac: str, message: str) -> None:  # librdkafka's logger interface
        # librdkafka prints the error's description ("...another concurrent operation...")
        if "AddPartitionsToTxn response" in message and "concurrent" in message.lower():
            with self.lock:
                self.count += 1


class _Logger:
    def __init__(self, counter: ConcurrentCounter) -> None:
        self._counter = counter

    def log(self, level: int, message: str, *args: object) -> None:
        self._counter(level, "", message % args if args else message)


def _delivered(done: list[float], err: object, _msg: object) -> None:
    done.append(time.perf_counter())


def run_producer(bootstrap: str, topic: str, messages: int, debug: bool) -> dict[str, Any]:
    counter = ConcurrentCounter()
    conf: dict[str, Any] = {
        "bootstrap.servers": bootstrap,
        "transactional.id": f"latency-{uuid.uuid4().hex[:8]}",
        "linger.ms": 35,
    }
    if debug:
        conf["debug"] = "eos"
        conf["logger"] = _Logger(counter)
    producer = Producer(conf)
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(topic, b"priming", partition=0)
    producer.commit_transaction(30)
    latencies: list[float] = []
    commits: list[float] = []
    for _ in range(messages):
        producer.begin_transaction()
        done: list[float] = []
        sent = time.perf_counter()
        producer.produce(topic, b"hi", partition=0, on_delivery=functools.partial(_delivered, done))
        while not done:
            producer.poll(0.005)
        latencies.append((done[0] - sent) * 1000)
        before = time.perf_counter()
        producer.commit_transaction(30)
        commits.append((time.perf_counter() - before) * 1000)
    producer.flush(10)
    return {
        "avg_ms": statistics.fmean(latencies),
        "median_ms": statistics.median(latencies),
        "max_ms": max(latencies),
        "commit_median_ms": statistics.median(commits),
        "concurrent_per_txn": counter.count / messages if debug else None,
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--messages", type=int, default=40)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--setups", default="single,cluster")
    parser.add_argument("--rf", type=int, default=3, help="the topic's replication factor on the cluster")
    parser.add_argument("--debug", action="store_true", help="count CONCURRENT_TRANSACTIONS answers")
    parser.add_argument("--txn-partitions", type=int, default=50, help="transaction.state.log.num.partitions")
    args = parser.parse_args()
    setups = args.setups.split(",")
    settings = {**TXN_SETTINGS, "transaction.state.log.num.partitions": str(args.txn_partitions)}
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="strom-txn-latency-") as tmp:
        for rnd in range(args.runs):
            for setup in setups:
                load = os.getloadavg()[0]
                if setup == "single":
                    node = BrokerProcess(Path(tmp) / f"single-{rnd}", dict(settings))
                    node.start()
                    stop, bootstrap, rf = node.stop, node.bootstrap, 1
                else:
                    cluster = LocalCluster(Path(tmp) / f"cluster-{rnd}", 3, overrides=dict(settings))
                    cluster.start()
                    stop, bootstrap, rf = cluster.stop, cluster.bootstrap, min(args.rf, 3)
                try:
                    topic = f"latency-{rnd}"
                    create_topic(bootstrap, topic, rf)
                    result = run_producer(bootstrap, topic, args.messages, args.debug)
                finally:
                    stop()
                row = {"round": rnd, "setup": setup, "rf": rf, "load_1m": round(load, 1), **result}
                rows.append(row)
                print(json.dumps(row), flush=True)
    print(f"\n{args.messages} messages per round, one per transaction, linger.ms=35; medians of {args.runs}")
    print("| setup | topic RF | average ms | median ms | max ms | commit median ms | CONCURRENT per txn |")
    print("|---|---|---|---|---|---|---|")
    for setup in setups:
        group = [r for r in rows if r["setup"] == setup]
        conc = [r["concurrent_per_txn"] for r in group if r["concurrent_per_txn"] is not None]
        print(
            f"| {setup} | {group[0]['rf']} | {statistics.median(r['avg_ms'] for r in group):.1f} "
            f"| {statistics.median(r['median_ms'] for r in group):.1f} "
            f"| {statistics.median(r['max_ms'] for r in group):.1f} "
            f"| {statistics.median(r['commit_median_ms'] for r in group):.1f} "
            f"| {statistics.median(conc):.2f} |"
            if conc
            else f"| {setup} | {group[0]['rf']} | {statistics.median(r['avg_ms'] for r in group):.1f} "
            f"| {statistics.median(r['median_ms'] for r in group):.1f} "
            f"| {statistics.median(r['max_ms'] for r in group):.1f} "
            f"| {statistics.median(r['commit_median_ms'] for r in group):.1f} | - |"
        )
    loads = sorted(r["load_1m"] for r in rows)
    print(f"1-minute load average at the rounds' starts: {loads[0]}-{loads[-1]}")


if __name__ == "__main__":
    main()
