"""Cost of a ``/metrics`` scrape on a broker hosting many partitions.

Run by hand (`python bench/metrics_bench.py --partitions 1000`); never part of the test suite. Starts a
real single broker, creates one topic with ``--partitions`` partitions (RF 1), produces a record to each
partition, commits a consumer group's offsets for all of them (so every lag series exists), then scrapes
``/metrics`` ``--scrapes`` times over HTTP and prints the wall time per scrape (client-side: request,
collection on the broker's event loop, transfer) and the size of the exposition.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from strom.testing import BrokerProcess
from strom.testing.metrics import parse, scrape_text


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--partitions", type=int, default=1000)
    parser.add_argument("--scrapes", type=int, default=30)
    args = parser.parse_args()
    from confluent_kafka import Consumer, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    with (
        tempfile.TemporaryDirectory(prefix="strom-metrics-bench-") as tmp,
        BrokerProcess(Path(tmp) / "data", {"group.initial.rebalance.delay.ms": "0"}) as broker,
    ):
        assert broker.http_url is not None
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.create_topics([NewTopic("wide", args.partitions, 1)])["wide"].result(120)
        producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 20})
        for p in range(args.partitions):
            producer.produce("wide", b"x" * 100, partition=p)
        assert producer.flush(120) == 0
        consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "wide-group"})
        consumer.commit(
            offsets=[TopicPartition("wide", p, 1) for p in range(args.partitions)], asynchronous=False
        )
        consumer.close()
        times = []
        text = ""
        for _ in range(args.scrapes):
            start = time.perf_counter()
            text = scrape_text(broker.http_url)
            times.append((time.perf_counter() - start) * 1000)
        samples = parse(text)
        series = sum(len(v) for v in samples.values())
    print(
        f"partitions={args.partitions} scrapes={args.scrapes} series={series} bytes={len(text)} "
        f"median_ms={statistics.median(times):.1f} p90_ms={sorted(times)[int(0.9 * len(times))]:.1f} "
        f"max_ms={max(times):.1f}"
    )


if __name__ == "__main__":
    main()
