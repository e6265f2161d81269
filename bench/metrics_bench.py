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
    with (
        tempfile.TemporaryDirectory(prefix="strom-metrics-bench-") as tmp,
        BrokerProcess(Path(tmp) / "data", {"group.initial.rebalance.delay.ms": "0"}) as broker,
    ):
        assert broker.http_url is not None
        _load(broker.bootstrap, args.partitions)
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


def _load(bootstrap: str, partitions: int) -> None:
    """A record in every partition and a group's commit for each; every client is closed on return.

    The clients are closed here, while the broker still runs: a librdkafka client left open until
    after the broker stops keeps reconnecting and floods standard error with connection-refused lines.
    """
    from confluent_kafka import Consumer, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic("wide", partitions, 1)])["wide"].result(120)
    del admin  # an AdminClient has no close(): dropping the last reference destroys it
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20})
    try:
        for p in range(partitions):
            producer.produce("wide", b"x" * 100, partition=p)
        assert producer.flush(120) == 0
    finally:
        producer.close()
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "wide-group"})
    try:
        consumer.commit(offsets=[TopicPartition("wide", p, 1) for p in range(partitions)], asynchronous=False)
    finally:
        consumer.close()


if __name__ == "__main__":
    main()
