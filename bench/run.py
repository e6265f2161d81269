"""Throughput and latency benchmark of a single Strom broker, driven by confluent-kafka (librdkafka).

Run by hand (`make bench`, or `python bench/run.py --help`); never part of the test suite. It starts a
real broker process on a loopback port with a fresh data directory (durable files, default flush
policy), then for each case produces and consumes through real clients in separate processes and prints
one JSON line per run plus the medians. Cases (issue "Single-node Strom"):
- produce 1,000,000 x 100 B and 100,000 x 10 KB to a 6-partition topic, acks=1 and acks=all;
- consume the same topics back from the beginning;
- end-to-end latency (produce timestamp to consumer receipt) at a fixed low rate, p50 / p99.
Throughput rows also give the broker's CPU seconds (user + system, from /proc) per GB moved while
the client ran; it includes what the broker does meanwhile in the background (about nothing).
The broker runs whatever `strom` the environment's PYTHONPATH selects (to compare versions).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from strom.testing import BrokerProcess

PARTITIONS = 6


def _create_topic(bootstrap: str, name: str) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})  # must outlive its futures
    futures = admin.create_topics([NewTopic(name, PARTITIONS, 1)])
    futures[name].result(30)


def _delete_topic(bootstrap: str, name: str) -> None:
    """Each case starts from the same state: the previous case's files (and dirty pages) are gone."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.delete_topics([name])[name].result(30)


def _produce(bootstrap: str, topic: str, count: int, size: int, acks: str, out: Any) -> None:
    from confluent_kafka import Producer

    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": acks,
            "linger.ms": 5,
            "batch.size": 1_000_000,
            "queue.buffering.max.messages": 2_000_000,
            "queue.buffering.max.kbytes": 2_000_000,
            "compression.type": "none",
        }
    )
    payload = os.urandom(size)
    errors = 0

    def on_delivery(err: Any, _msg: Any) -> None:
        nonlocal errors
        if err is not None:
            errors += 1

    start = time.perf_counter()
    for i in range(count):
        while True:
            try:
                producer.produce(topic, payload, partition=i % PARTITIONS, on_delivery=on_delivery)
                break
            except BufferError:
                producer.poll(0.001)
        if i % 10_000 == 0:
            producer.poll(0)
    producer.flush(120)
    elapsed = time.perf_counter() - start
    out.put({"elapsed_s": elapsed, "errors": errors})


def _consume(bootstrap: str, topic: str, count: int, out: Any) -> None:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "bench",
            "enable.auto.commit": False,
            "fetch.max.bytes": 52_428_800,
            "max.partition.fetch.bytes": 10_485_760,
            "queued.max.messages.kbytes": 1_048_576,
            # librdkafka pauses fetching once queued.min.messages (100k) are queued, then waits
            # fetch.queue.backoff.ms (1 s by default) before looking again: a fast reader would sit
            # idle most of the time, measuring that backoff rather than the broker.
            "queued.min.messages": 1_000_000,
            "fetch.queue.backoff.ms": 10,
        }
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    seen = 0
    nbytes = 0
    start = time.perf_counter()
    deadline = time.monotonic() + 300
    while seen < count and time.monotonic() < deadline:
        for msg in consumer.consume(num_messages=10_000, timeout=1.0):
            if msg.error() is None:
                seen += 1
                nbytes += len(msg.value())
    elapsed = time.perf_counter() - start
    consumer.close()
    out.put({"elapsed_s": elapsed, "messages": seen, "bytes": nbytes})


def _latency(bootstrap: str, topic: str, rate: int, seconds: int, out: Any) -> None:
    from confluent_kafka import Consumer, Producer, TopicPartition

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "acks": "1"})
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "lat", "fetch.wait.max.ms": 100, "fetch.min.bytes": 1}
    )
    consumer.assign([TopicPartition(topic, p, -1) for p in range(PARTITIONS)])
    consumer.poll(1.0)
    latencies: list[float] = []
    total = rate * seconds
    interval = 1.0 / rate
    next_send = time.perf_counter()
    sent = 0
    while sent < total or len(latencies) < sent:
        now = time.perf_counter()
        if sent < total and now >= next_send:
            producer.produce(topic, str(time.perf_counter()).encode(), partition=sent % PARTITIONS)
            producer.poll(0)
            sent += 1
            next_send += interval
        msg = consumer.poll(min(max(next_send - time.perf_counter(), 0), 0.001))
        if msg is not None and msg.error() is None:
            latencies.append((time.perf_counter() - float(msg.value())) * 1000)
        if sent >= total and time.perf_counter() - next_send > 10:
            break
    consumer.close()
    latencies.sort()
    out.put(
        {
            "messages": len(latencies),
            "p50_ms": latencies[len(latencies) // 2],
            "p99_ms": latencies[int(len(latencies) * 0.99)],
        }
    )


def _in_child(target: Any, *args: Any) -> dict[str, Any]:
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    proc = ctx.Process(target=target, args=(*args, queue))
    proc.start()
    result = queue.get(timeout=900)
    proc.join(60)
    return dict(result)


def _measured(broker: BrokerProcess, target: Any, *args: Any) -> tuple[dict[str, Any], float]:
    """Run a client in its own process: (its result, the broker's CPU seconds meanwhile)."""
    before = sum(broker.cpu_times())
    result = _in_child(target, *args)
    return result, sum(broker.cpu_times()) - before


def run(repeats: int, small: int, large: int) -> dict[str, Any]:
    results: dict[str, list[dict[str, Any]]] = {}
    with tempfile.TemporaryDirectory(prefix="strom-bench-") as tmp:
        broker = BrokerProcess(Path(tmp) / "broker")
        bootstrap = broker.start()
        try:
            for rep in range(repeats):
                for count, size in ((small, 100), (large, 10_240)):
                    for acks in ("1", "all"):
                        topic = f"bench-{size}-{acks}-{rep}"
                        _create_topic(bootstrap, topic)
                        produced, cpu = _measured(broker, _produce, bootstrap, topic, count, size, acks)
                        row = {
                            "case": f"produce {count}x{size}B acks={acks}",
                            "msgs_per_s": count / produced["elapsed_s"],
                            "mb_per_s": count * size / produced["elapsed_s"] / 1e6,
                            "broker_cpu_s_per_gb": cpu / (count * size / 1e9),
                            "errors": produced["errors"],
                        }
                        print(json.dumps(row), flush=True)
                        results.setdefault(row["case"], []).append(row)
                        if acks == "1":
                            consumed, cpu = _measured(broker, _consume, bootstrap, topic, count)
                            row = {
                                "case": f"consume {count}x{size}B",
                                "msgs_per_s": consumed["messages"] / consumed["elapsed_s"],
                                "mb_per_s": consumed["bytes"] / consumed["elapsed_s"] / 1e6,
                                "broker_cpu_s_per_gb": cpu / (max(consumed["bytes"], 1) / 1e9),
                                "messages": consumed["messages"],
                            }
                            print(json.dumps(row), flush=True)
                            results.setdefault(row["case"], []).append(row)
                        _delete_topic(bootstrap, topic)
                topic = f"bench-latency-{rep}"
                _create_topic(bootstrap, topic)
                lat = _in_child(_latency, bootstrap, topic, 1000, 10)
                row = {"case": "latency 1000 msg/s", **lat}
                print(json.dumps(row), flush=True)
                results.setdefault(row["case"], []).append(row)
        finally:
            broker.stop()
    medians: dict[str, Any] = {}
    for case, rows in results.items():
        keys = [k for k in rows[0] if isinstance(rows[0][k], float)]
        medians[case] = {k: round(statistics.median(r[k] for r in rows), 2) for k in keys}
    return medians


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--small", type=int, default=1_000_000, help="count of 100 B messages")
    parser.add_argument("--large", type=int, default=100_000, help="count of 10 KB messages")
    args = parser.parse_args()
    medians = run(args.repeats, args.small, args.large)
    print("\nmedians over", args.repeats, "runs")
    for case, values in medians.items():
        print(f"  {case}: {values}")


if __name__ == "__main__":
    main()
