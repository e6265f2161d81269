"""Time to render each console page on a broker with many topics and groups.

Run by hand (`python bench/console_bench.py --topics 1000 --groups 100`); never part of the test suite.
Starts a real single broker (history buckets of one second, so the charts are full of points after the
load), creates ``--topics`` topics of one partition, produces a record to each, commits ``--groups``
groups' offsets on ten topics each, registers a schema, fills topic ``big`` with ``--records`` keyed
records (for the message browser: a key that is nowhere scans a whole budget of 10,000 records, a key
every 1,000 records fills a page), waits for the metric history to fill, then
fetches every page ``--rounds`` times over HTTP and prints, per page, the median and the slowest
client-side time (request, rendering on the broker's event loop, transfer) and the page's size.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from strom.testing import BrokerProcess


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--topics", type=int, default=1000)
    parser.add_argument("--groups", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--records", type=int, default=200_000, help="records of topic big (key searches)")
    args = parser.parse_args()
    overrides = {"group.initial.rebalance.delay.ms": "0", "http.console.history.interval.ms": "1000"}
    with (
        tempfile.TemporaryDirectory(prefix="strom-console-bench-") as tmp,
        BrokerProcess(Path(tmp) / "data", overrides) as broker,
    ):
        assert broker.http_url is not None
        _load(broker.bootstrap, broker.http_url, args.topics, args.groups)
        _big(broker.bootstrap, args.records)
        time.sleep(5)  # a few history buckets
        pages = [
            "/ui/", "/ui/topics", "/ui/topics/t-0", "/ui/topics/t-0/0", "/ui/topics/t-0/0?mode=key&key=k",
            "/ui/groups", "/ui/groups/g-0", "/ui/schemas", "/ui/schemas/t-0-value", "/ui/transactions",
            "/ui/users", "/ui/acls", "/ui/topics/big/0?n=100",
            "/ui/topics/big/0?mode=key&key=absent", "/ui/topics/big/0?mode=key&key=k7&n=20",
            "/ui/topics/big/0?mode=offset&offset=100000&n=500",
        ]  # fmt: skip
        print(f"topics={args.topics} groups={args.groups} rounds={args.rounds} big={args.records} records")
        print("| page | median ms | max ms | KiB |")
        print("|---|---|---|---|")
        for page in pages:
            times, size = [], 0
            for _ in range(args.rounds):
                start = time.perf_counter()
                with urllib.request.urlopen(broker.http_url + page, timeout=60) as answer:
                    size = len(answer.read())
                times.append((time.perf_counter() - start) * 1000)
            print(f"| `{page}` | {statistics.median(times):.0f} | {max(times):.0f} | {size / 1024:.0f} |")


def _big(bootstrap: str, records: int) -> None:
    """Topic big: one partition of ``records`` 100-byte values with keys k0..k999 (key k7 every 1,000)."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})  # kept: a dropped client cancels its futures
    admin.create_topics([NewTopic("big", 1, 1)])["big"].result(60)
    producer = Producer(
        {"bootstrap.servers": bootstrap, "linger.ms": 20, "queue.buffering.max.messages": 1_000_000}
    )
    for i in range(records):
        producer.produce("big", b"v" * 100, key=f"k{i % 1000}".encode())
        if i % 100_000 == 0:
            producer.poll(0)
    assert producer.flush(300) == 0


def _load(bootstrap: str, http_url: str, topics: int, groups: int) -> None:
    """Topics with a record each, groups with commits, a schema; every client closed on return."""
    from confluent_kafka import Consumer, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    names = [f"t-{i}" for i in range(topics)]
    for start in range(0, topics, 200):
        futures = admin.create_topics(
            [NewTopic(n, 1, 1) for n in names[start : start + 200]], request_timeout=120
        )
        for future in futures.values():
            future.result(120)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 50})
    for name in names:
        producer.produce(name, b"value", key=b"k")
    assert producer.flush(120) == 0
    for g in range(groups):
        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{g}"})
        offsets = [TopicPartition(names[(g * 10 + k) % topics], 0, 0) for k in range(10)]
        consumer.commit(offsets=offsets, asynchronous=False)
        consumer.close()
    schema = json.dumps({"type": "record", "name": "V", "fields": [{"name": "n", "type": "int"}]})
    request = urllib.request.Request(
        f"{http_url}/subjects/t-0-value/versions",
        data=json.dumps({"schema": schema}).encode(),
        headers={"Content-Type": "application/vnd.schemaregistry.v1+json"},
    )
    with urllib.request.urlopen(request, timeout=60) as answer:
        answer.read()


if __name__ == "__main__":
    main()
