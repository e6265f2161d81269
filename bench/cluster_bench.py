"""Produce/consume throughput on a local 3-broker cluster (RF=3, min.insync.replicas=2), acks=1 and acks=all,
next to a single embedded broker with acks=1 in the same run. Medians of ``--runs`` runs.

    .venv/bin/python bench/cluster_bench.py [--messages 200000] [--size 100] [--runs 3]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from strom.testing.broker_process import BrokerProcess
from strom.testing.cluster import LocalCluster


def create(bootstrap: str, name: str, rf: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for fut in admin.create_topics(
        [NewTopic(name, 3, rf, config={"min.insync.replicas": str(min(rf, 2))})]
    ).values():
        fut.result(timeout=30)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        md = admin.list_topics(name, timeout=10).topics[name]
        if md.error is None and all(p.leader >= 0 for p in md.partitions.values()):
            return
        time.sleep(0.2)


def produce(bootstrap: str, topic: str, acks: str, messages: int, size: int, idempotent: bool) -> float:
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": acks,
            "linger.ms": 5,
            "batch.size": 262144,
            "enable.idempotence": idempotent,
        }
    )
    payload = b"x" * size
    start = time.perf_counter()
    for i in range(messages):
        while True:
            try:
                producer.produce(topic, payload, key=str(i % 100).encode())
                break
            except BufferError:
                producer.poll(0.01)
    assert producer.flush(120) == 0
    return messages / (time.perf_counter() - start)


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


def run(
    bootstrap: str,
    label: str,
    acks: str,
    rf: int,
    args: argparse.Namespace,
    results: dict[str, list[float]],
    idempotent: bool = False,
) -> None:
    for r in range(args.runs):
        topic = "bench-" + "".join(c if c.isalnum() else "-" for c in label) + f"-{r}"
        create(bootstrap, topic, rf)
        results.setdefault(f"{label} produce msg/s", []).append(
            produce(bootstrap, topic, acks, args.messages, args.size, idempotent)
        )
        results.setdefault(f"{label} consume msg/s", []).append(consume(bootstrap, topic, args.messages))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    results: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        with BrokerProcess(Path(tmp) / "single") as single:
            run(single.bootstrap, "single broker, acks=1", "1", 1, args, results)
        with LocalCluster(
            Path(tmp) / "cluster", 3, overrides={"offsets.topic.num.partitions": "3"}
        ) as cluster:
            run(cluster.bootstrap, "3 brokers RF=3, acks=1", "1", 3, args, results)
            run(cluster.bootstrap, "3 brokers RF=3, acks=all", "all", 3, args, results)
            # librdkafka caps an idempotent producer at 5 requests in flight per connection, so each
            # replication round trip bounds it more tightly than the default producer.
            run(cluster.bootstrap, "3 brokers RF=3, acks=all idempotent", "all", 3, args, results, True)
    print(f"{args.messages} messages of {args.size} B, 3 partitions, median of {args.runs} runs")
    for name, values in results.items():
        print(f"| {name} | {statistics.median(values):,.0f} |")


if __name__ == "__main__":
    main()
