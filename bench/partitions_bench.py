"""One broker with very many partitions (issue 12): creation, one record each, Metadata, idle cost, restarts.

Run by hand; never part of the test suite::

    PYTHONPATH=src python bench/partitions_bench.py --topics 5000 --partitions 20 \
        --tool /work/tools/librdkafka/examples/rdkafka_performance

Steps, against one fresh broker (default settings; ``--set KEY=VALUE`` adds broker settings):

1. create ``topics`` x ``partitions`` with confluent-kafka's AdminClient, ``--batch`` topics per
   CreateTopics request; wall time;
2. produce one record to every partition (confluent-kafka, acks=1) and read every one back (a
   consumer assigned ``--assign-chunk`` partitions at a time from offset 0); wall times;
3. Metadata for all topics (``list_topics``), the median of three;
4. the broker idle for ``--idle`` seconds: its CPU (utime + stime) per wall second, RSS, open
   descriptors (``/proc/<pid>/fd``);
5. clean restart (SIGTERM, start): time from start until a Metadata answer lists every topic and a
   produce to the last partition is acknowledged; then the same after ``kill -9``;
6. with ``--tool`` (librdkafka's ``rdkafka_performance``): ``--messages`` 100-byte messages produced
   (acks=1, linger.ms=5, random partitions) to a 6-partition topic and to a ``--spread``-partition
   topic, interleaved ``--rounds`` times; messages/s of each and their ratio.

Each result is a JSON line on stdout; the machine's 1-minute load average is printed with them.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from strom.testing import BrokerProcess


def emit(step: str, **values: Any) -> None:
    print(json.dumps({"step": step, "load_1m": round(os.getloadavg()[0], 2), **values}), flush=True)


def _rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return -1.0


def create_topics(bootstrap: str, names: list[str], partitions: int, batch: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap, "socket.timeout.ms": 300_000})
    for i in range(0, len(names), batch):
        futures = admin.create_topics(
            [NewTopic(n, partitions, 1) for n in names[i : i + batch]], request_timeout=300
        )
        for future in futures.values():
            future.result(timeout=600)


def produce_each(bootstrap: str, tps: list[TopicPartition]) -> None:
    producer = Producer(
        {"bootstrap.servers": bootstrap, "linger.ms": 20, "queue.buffering.max.messages": 2_000_000}
    )
    for tp in tps:
        producer.produce(tp.topic, value=f"{tp.topic}/{tp.partition}".encode(), partition=tp.partition)
        producer.poll(0)
    if producer.flush(600) != 0:
        raise RuntimeError("records left unacknowledged")


def find_each(bootstrap: str, tps: list[TopicPartition], chunk: int) -> int:
    """Read every partition from offset 0; returns how many partitions gave back their own record."""
    found = 0
    for i in range(0, len(tps), chunk):
        part = tps[i : i + chunk]
        consumer = Consumer(
            {"bootstrap.servers": bootstrap, "group.id": "partitions-bench", "enable.auto.commit": False}
        )
        consumer.assign([TopicPartition(tp.topic, tp.partition, 0) for tp in part])
        seen: set[tuple[str, int]] = set()
        deadline = time.monotonic() + 300
        while len(seen) < len(part) and time.monotonic() < deadline:
            for msg in consumer.consume(10_000, timeout=1.0):
                if msg.error() is None and msg.value() == f"{msg.topic()}/{msg.partition()}".encode():
                    seen.add((msg.topic(), msg.partition()))
        consumer.close()
        found += len(seen)
    return found


def metadata_seconds(bootstrap: str, topics: int) -> float:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    times = []
    for _ in range(3):
        start = time.perf_counter()
        meta = admin.list_topics(timeout=120)
        times.append(time.perf_counter() - start)
        if len(meta.topics) < topics:
            raise RuntimeError(f"Metadata listed {len(meta.topics)} topics")
    return statistics.median(times)


def serving_after_start(broker: BrokerProcess, topics: int, last: TopicPartition) -> float:
    start = time.perf_counter()
    bootstrap = broker.start()
    admin = AdminClient({"bootstrap.servers": bootstrap})
    while len(admin.list_topics(timeout=120).topics) < topics:
        time.sleep(0.2)
    producer = Producer({"bootstrap.servers": bootstrap})
    producer.produce(last.topic, value=b"after restart", partition=last.partition)
    if producer.flush(120) != 0:
        raise RuntimeError("produce after restart not acknowledged")
    return time.perf_counter() - start


def spread_throughput(tool: str, bootstrap: str, spread: int, messages: int, rounds: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for name, count in (("spread-6", 6), (f"spread-{spread}", spread)):
        admin.create_topics([NewTopic(name, count, 1)])[name].result(timeout=120)
    rates: dict[int, list[float]] = {6: [], spread: []}
    for rnd in range(rounds):
        for count in (6, spread) if rnd % 2 == 0 else (spread, 6):
            cmd = [tool, "-P", "-t", f"spread-{count}", "-b", bootstrap, "-s", "100", "-a", "1"]
            cmd += ["-c", str(messages), "-u", "-X", "linger.ms=5"]
            start = time.perf_counter()
            subprocess.run(cmd, capture_output=True, check=True, timeout=900)
            rate = messages / (time.perf_counter() - start)
            rates[count].append(rate)
            emit("produce-spread", partitions=count, round=rnd, msgs_per_s=round(rate))
    few, many = statistics.median(rates[6]), statistics.median(rates[spread])
    emit("produce-spread-median", six=round(few), spread=round(many), ratio=round(many / few, 3))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--topics", type=int, default=5000)
    parser.add_argument("--partitions", type=int, default=20)
    parser.add_argument("--batch", type=int, default=50, help="topics per CreateTopics request")
    parser.add_argument("--assign-chunk", type=int, default=10_000)
    parser.add_argument("--idle", type=float, default=30.0)
    parser.add_argument("--tool", help="rdkafka_performance, for the 1,000 vs 6 partitions produce")
    parser.add_argument("--spread", type=int, default=1000)
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--dir", help="data directory (default: a temporary one, removed after)")
    args = parser.parse_args()
    overrides = dict(s.split("=", 1) for s in args.set)
    tmp = tempfile.mkdtemp(prefix="strom-partitions-", dir=args.dir)
    broker = BrokerProcess(Path(tmp) / "data", overrides, start_timeout_s=900)
    names = [f"p{i:05d}" for i in range(args.topics)]
    tps = [TopicPartition(n, p) for n in names for p in range(args.partitions)]
    try:
        bootstrap = broker.start()
        start = time.perf_counter()
        create_topics(bootstrap, names, args.partitions, args.batch)
        emit("create", partitions=len(tps), seconds=round(time.perf_counter() - start, 1))
        start = time.perf_counter()
        produce_each(bootstrap, tps)
        emit("produce-one-each", seconds=round(time.perf_counter() - start, 1))
        start = time.perf_counter()
        found = find_each(bootstrap, tps, args.assign_chunk)
        emit("find-each", found=found, of=len(tps), seconds=round(time.perf_counter() - start, 1))
        emit("metadata-all-topics", seconds=round(metadata_seconds(bootstrap, len(names)), 3))
        pid = broker.pid
        assert pid is not None
        user0, sys0 = broker.cpu_times()
        time.sleep(args.idle)
        user1, sys1 = broker.cpu_times()
        emit(
            "idle",
            cpu_percent_of_a_core=round(100 * (user1 - user0 + sys1 - sys0) / args.idle, 2),
            rss_mib=round(_rss_mib(pid)),
            open_descriptors=len(os.listdir(f"/proc/{pid}/fd")),
        )
        broker.stop(timeout_s=600)
        emit("clean-restart-to-serving", seconds=round(serving_after_start(broker, len(names), tps[-1]), 1))
        broker.kill()
        emit("kill9-restart-to-serving", seconds=round(serving_after_start(broker, len(names), tps[-1]), 1))
        pid = broker.pid
        assert pid is not None
        emit(
            "after-restart", rss_mib=round(_rss_mib(pid)), open_descriptors=len(os.listdir(f"/proc/{pid}/fd"))
        )
        if args.tool:
            spread_throughput(args.tool, broker.bootstrap, args.spread, args.messages, args.rounds)
    finally:
        broker.stop(timeout_s=600)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
