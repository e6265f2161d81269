"""Share groups (KIP-932) against a classic consumer group: consume throughput on the same topic.

    PYTHONPATH=src .venv/bin/python bench/share_group_bench.py [--records 100000] [--partitions 4]
        [--consumers 1,2,4] [--size 100]

One fresh broker; a topic of ``--partitions`` partitions is filled with ``--records`` records of
``--size`` bytes before any consumer starts. Then, per run, a new group reads all of them:

- **classic** with 1 confluent-kafka ``Consumer`` (``auto.offset.reset=earliest``, auto commit), the
  reference;
- **share** with 1, 2 and 4 ``ShareConsumer``s (implicit acknowledgement: each poll's records are
  accepted with the next poll), each consumer in its own thread (librdkafka does the work in its own
  threads; the Python side only counts).

Timed from the consumers' start to the moment every record has been handed out once (share groups
also count redeliveries, which there should be none of: every lock is 30 s); both include joining the
group. The broker runs with ``share.auto.offset.reset=earliest`` and
``group.initial.rebalance.delay.ms=0`` (the classic group's first rebalance is not delayed). The
last lines are a Markdown table: records/s, and MB/s of values.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from confluent_kafka import Consumer, Producer, ShareConsumer
from confluent_kafka.admin import AdminClient, NewTopic

from strom.testing.broker_process import BrokerProcess

TIMEOUT_S = 300.0


def fill(bootstrap: str, topic: str, partitions: int, records: int, size: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(30)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.num.messages": 1000})
    payload = b"x" * size
    for i in range(records):
        while True:
            try:
                producer.produce(topic, value=payload, partition=i % partitions)
                break
            except BufferError:
                producer.poll(0.05)
    assert producer.flush(120) == 0


def run_classic(bootstrap: str, topic: str, records: int) -> float:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"classic-{uuid.uuid4()}",
            "auto.offset.reset": "earliest",
        }
    )
    consumer.subscribe([topic])
    start = time.monotonic()
    seen = 0
    while seen < records and time.monotonic() - start < TIMEOUT_S:
        for message in consumer.consume(1000, 0.5):
            if message.error() is None:
                seen += 1
    elapsed = time.monotonic() - start
    consumer.close()
    return elapsed if seen >= records else float("nan")


def run_share(bootstrap: str, topic: str, records: int, consumers: int) -> tuple[float, int]:
    group = f"share-{uuid.uuid4()}"
    counts = [0] * consumers
    stop = threading.Event()

    def work(index: int) -> None:
        consumer = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group})
        consumer.subscribe([topic])
        while not stop.is_set():
            for message in consumer.poll(0.5):
                if message.error() is None:
                    counts[index] += 1
        consumer.close()

    threads = [threading.Thread(target=work, args=(i,), daemon=True) for i in range(consumers)]
    start = time.monotonic()
    for thread in threads:
        thread.start()
    while sum(counts) < records and time.monotonic() - start < TIMEOUT_S:
        time.sleep(0.01)
    elapsed = time.monotonic() - start
    stop.set()
    for thread in threads:
        thread.join(60)
    return (elapsed if sum(counts) >= records else float("nan")), sum(counts) - records


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--consumers", default="1,2,4")
    parser.add_argument("--size", type=int, default=100)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        broker = BrokerProcess(
            Path(tmp) / "data",
            {"share.auto.offset.reset": "earliest", "group.initial.rebalance.delay.ms": "0"},
        )
        broker.start()
        try:
            topic = "bench-share"
            fill(broker.bootstrap, topic, args.partitions, args.records, args.size)
            rows: list[tuple[str, float, int]] = []
            elapsed = run_classic(broker.bootstrap, topic, args.records)
            rows.append(("classic group, 1 consumer", elapsed, 0))
            print(f"classic: {elapsed:.2f} s", flush=True)
            for n in (int(x) for x in args.consumers.split(",")):
                elapsed, extra = run_share(broker.bootstrap, topic, args.records, n)
                rows.append((f"share group, {n} consumer(s)", elapsed, extra))
                print(f"share x{n}: {elapsed:.2f} s ({extra} redelivered)", flush=True)
        finally:
            broker.stop()
    mb = args.records * args.size / 1e6
    print(f"\n{args.records} records of {args.size} B on {args.partitions} partitions\n")
    print("| group | seconds | records/s | MB/s | redelivered |")
    print("|---|---|---|---|---|")
    for name, seconds, extra in rows:
        print(f"| {name} | {seconds:.2f} | {args.records / seconds:,.0f} | {mb / seconds:.1f} | {extra} |")


if __name__ == "__main__":
    main()
