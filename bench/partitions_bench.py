"""One broker with very many partitions (issue 12): creation, one record each, Metadata, idle cost, restarts.

Run by hand; never part of the test suite::

    PYTHONPATH=src python bench/partitions_bench.py --topics 5000 --partitions 20
    PYTHONPATH=src python bench/partitions_bench.py \
        --tool /work/tools/librdkafka/examples/rdkafka_performance \
        --spread 1000 --messages 1000000 --rounds 5 [--src before=DIR --src after=DIR] \
        [--reference mock=$(bench/build_mock_broker.sh /work/tools/librdkafka)]

Without ``--tool``, against one fresh broker (default settings; ``--set KEY=VALUE`` adds broker
settings):

1. create ``topics`` x ``partitions`` with confluent-kafka's AdminClient, ``--batch`` topics per
   CreateTopics request; wall time;
2. produce one keyed record to every partition (confluent-kafka, acks=1, a producer per
   ``--produce-chunk`` partitions), then find every one again: kafka-python consumers assigned
   ``--find-chunk`` partitions each, sought to offset 0, check that each partition's first record is
   at offset 0 with its own key and value; wall times and the count found;
3. Metadata for all topics (``list_topics``), the median of three;
4. the broker idle for ``--idle`` seconds: its CPU (utime + stime) per wall second, RSS, open
   descriptors (``/proc/<pid>/fd``);
5. clean shutdown (SIGTERM to exit), then restart: time from start until a Metadata answer lists every
   topic and a produce to the last partition is acknowledged; every record found again; then the same
   after ``kill -9``; finally the clean shutdown again.

With ``--metadata-restarts N`` only this instead (issue 25): create the partitions (no records; or
``--reuse`` the data directory of an earlier run, kept by hand), the
Metadata for all topics three times, then ``N`` rounds of a clean restart per ``--src`` variant (order
alternating; every variant restarts the same data directory): the time from start until listening, then
the first three Metadata requests for all topics, each with its wall time and the broker's CPU seconds
(utime + stime) while it was answered; the medians per variant and request.

With ``--tool`` (librdkafka's ``rdkafka_performance``) only this instead: ``--messages`` 100-byte
messages produced (acks=1, linger.ms=5, ``-p`` unset and sticky.partitioning.linger.ms=0 so that
librdkafka spreads them over every partition) to a 6-partition topic and to a ``--spread``-partition
topic, on a fresh broker per round and ``--src`` variant, in alternating order, ``--rounds`` times:
messages/s, the broker's and the tool's CPU seconds per million messages of each, the record batches the
messages arrived in (counted in the segment files) and the broker's CPU per batch, their medians and the
ratio. ``--reference NAME=BINARY`` adds librdkafka's in-memory mock broker (``bench/reference_broker.py``)
as one more variant in the same rounds: the ratio the client and the machine allow a broker that costs
almost nothing (its batches are not counted).

Each result is a JSON line on stdout; the machine's 1-minute load average is printed with them.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from confluent_kafka import Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaConsumer
from kafka import TopicPartition as KafkaTopicPartition
from reference_broker import MockBroker, start_variant

from strom.protocol.records.batch import iter_headers
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


def _key(tp: TopicPartition) -> bytes:
    return f"k/{tp.topic}/{tp.partition}".encode()


def _value(tp: TopicPartition) -> bytes:
    return f"v/{tp.topic}/{tp.partition}".encode()


def produce_each(bootstrap: str, tps: list[TopicPartition], chunk: int) -> None:
    """One keyed record to every partition, one confluent-kafka producer per ``chunk`` partitions.

    One librdkafka producer for all 100,000 partitions spent its time in per-partition bookkeeping
    (313 s); producers of 10,000 partitions each keep it linear.
    """
    for i in range(0, len(tps), chunk):
        producer = Producer(
            {"bootstrap.servers": bootstrap, "linger.ms": 20, "queue.buffering.max.messages": 2_000_000}
        )
        for tp in tps[i : i + chunk]:
            producer.produce(tp.topic, key=_key(tp), value=_value(tp), partition=tp.partition)
            producer.poll(0)
        if producer.flush(600) != 0:
            raise RuntimeError("records left unacknowledged")


def find_each(bootstrap: str, tps: list[TopicPartition], chunk: int) -> tuple[int, list[str]]:
    """Read offset 0 of every partition back; returns (partitions whose own record is there, misses).

    kafka-python's consumer (an independent client) assigned ``chunk`` partitions at a time, each
    sought to offset 0: it asks for all of them in one Fetch request per round trip, so 100,000
    partitions are a few dozen requests, not 100,000 (librdkafka consumers of 10,000 partitions each
    took over 20 minutes in their own per-partition bookkeeping).
    """
    found = 0
    missing: list[str] = []
    for i in range(0, len(tps), chunk):
        part = {KafkaTopicPartition(tp.topic, tp.partition): tp for tp in tps[i : i + chunk]}
        consumer = KafkaConsumer(
            bootstrap_servers=bootstrap,
            enable_auto_commit=False,
            fetch_max_bytes=64 * 1024 * 1024,
            max_partition_fetch_bytes=4096,
            max_poll_records=len(part),
            consumer_timeout_ms=1000,
        )
        consumer.assign(list(part))
        for ktp in part:
            consumer.seek(ktp, 0)
        left = set(part)
        deadline = time.monotonic() + 600
        while left and time.monotonic() < deadline:
            for ktp, records in consumer.poll(timeout_ms=1000, max_records=len(part)).items():
                tp = part[ktp]
                first = records[0]
                if first.offset == 0 and first.key == _key(tp) and first.value == _value(tp):
                    left.discard(ktp)
        consumer.close()
        found += len(part) - len(left)
        missing += [f"{k.topic}/{k.partition}" for k in sorted(left)[:10]]
    return found, missing


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


def timed_metadata(broker: BrokerProcess, topics: int) -> tuple[float, float]:
    """One Metadata request for all topics: (wall seconds, broker CPU seconds while it was answered)."""
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    cpu0 = sum(broker.cpu_times())
    start = time.perf_counter()
    meta = admin.list_topics(timeout=300)
    wall = time.perf_counter() - start
    if len(meta.topics) < topics:
        raise RuntimeError(f"Metadata listed {len(meta.topics)} topics")
    return wall, sum(broker.cpu_times()) - cpu0


_PARTITION_DIR = re.compile(r"^p\d{5}-\d+$")


def start_from(broker: BrokerProcess, src: str) -> float:
    """Start ``broker`` from the ``src`` tree (the child inherits PYTHONPATH); seconds until listening."""
    env_before = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = src
    try:
        start = time.perf_counter()
        broker.start()
        return time.perf_counter() - start
    finally:
        if env_before is None:
            del os.environ["PYTHONPATH"]
        else:
            os.environ["PYTHONPATH"] = env_before


def metadata_after_restarts(workdir: Path, variants: list[tuple[str, str]], args: argparse.Namespace) -> None:
    """Create the partitions once, then restart the same data directory from each variant, in turn."""
    data = Path(args.reuse) if args.reuse else workdir / "data"
    broker = BrokerProcess(data, dict(s.split("=", 1) for s in args.set), start_timeout_s=900)
    names = [f"p{i:05d}" for i in range(args.topics)]
    if args.reuse:  # the topics a previous run made there (one directory per partition)
        names = sorted({d.rsplit("-", 1)[0] for d in os.listdir(data / "logs") if _PARTITION_DIR.match(d)})
    results: dict[tuple[str, int], list[tuple[float, float]]] = {}
    try:
        start_from(broker, variants[0][1])
        start = time.perf_counter()
        if not args.reuse:
            create_topics(broker.bootstrap, names, args.partitions, args.batch)
        emit("create", partitions=len(names) * args.partitions, seconds=round(time.perf_counter() - start, 1))
        for number in range(3):
            wall, cpu = timed_metadata(broker, len(names))
            emit(
                "metadata-before-restart",
                request=number + 1,
                seconds=round(wall, 3),
                broker_cpu_s=round(cpu, 3),
            )
        for rnd in range(args.metadata_restarts):
            for name, src in variants if rnd % 2 == 0 else variants[::-1]:
                broker.stop(timeout_s=600)
                listening = start_from(broker, src)
                for number in range(3):
                    wall, cpu = timed_metadata(broker, len(names))
                    results.setdefault((name, number), []).append((wall, cpu))
                    emit(
                        "metadata-after-restart",
                        variant=name,
                        round=rnd,
                        request=number + 1,
                        start_to_listening_s=round(listening, 1),
                        seconds=round(wall, 3),
                        broker_cpu_s=round(cpu, 3),
                    )
    finally:
        broker.stop(timeout_s=600)
    for (name, number), samples in sorted(results.items()):
        emit(
            "metadata-after-restart-median",
            variant=name,
            request=number + 1,
            seconds=round(statistics.median(s[0] for s in samples), 3),
            broker_cpu_s=round(statistics.median(s[1] for s in samples), 3),
        )


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


def _spread_once(
    tool: str, broker: BrokerProcess | MockBroker, topic: str, messages: int
) -> tuple[float, float, float]:
    """One rdkafka_performance produce run: messages/s, broker and tool CPU seconds per million messages."""
    # -p unset: librdkafka's partitioner picks a partition for each unkeyed record; at random only
    # without its sticky partitioning (KIP-480), which otherwise fills one partition per 10 ms: with
    # it, 200,000 records reached 43 of 1,000 partitions.
    cmd = [tool, "-P", "-t", topic, "-b", broker.bootstrap, "-s", "100", "-a", "1", "-c", str(messages)]
    cmd += ["-u", "-X", "linger.ms=5", "-X", "sticky.partitioning.linger.ms=0"]
    cpu0, tool0 = sum(broker.cpu_times()), _children_cpu()
    start = time.perf_counter()
    subprocess.run(cmd, capture_output=True, check=True, timeout=900)
    rate = messages / (time.perf_counter() - start)
    per_m = 1_000_000 / messages
    return rate, (sum(broker.cpu_times()) - cpu0) * per_m, (_children_cpu() - tool0) * per_m


def count_batches(log_dir: Path, topic: str) -> int:
    """Record batches stored for ``topic`` (a header walk of its segment files): how many batches the
    client's messages arrived in, which sets the broker's per-batch share of its CPU."""
    return sum(sum(1 for _ in iter_headers(path.read_bytes())) for path in log_dir.glob(f"{topic}-*/*.log"))


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)  # waited-for children: the tool runs
    return usage.ru_utime + usage.ru_stime


def spread_throughput(
    tool: str, workdir: Path, variants: list[tuple[str, str]], args: argparse.Namespace
) -> None:
    """``--messages`` 100-byte records to a 6- and a ``--spread``-partition topic, interleaved rounds.

    Each round and broker variant (a ``src`` directory, so before/after run in the same session)
    gets a fresh broker holding both topics; the order of variants and of the two topics alternates.
    """
    counts = (6, args.spread)
    rates: dict[tuple[str, int], list[float]] = {(v, c): [] for v, _ in variants for c in counts}
    cpu: dict[tuple[str, int], list[float]] = {key: [] for key in rates}
    tool_cpu: dict[tuple[str, int], list[float]] = {key: [] for key in rates}
    batch_cpu: dict[tuple[str, int], list[float]] = {key: [] for key in rates}
    overrides = dict(s.split("=", 1) for s in args.set)
    for rnd in range(args.rounds):
        for name, src in variants if rnd % 2 == 0 else variants[::-1]:
            topics = {f"spread-{count}": count for count in counts}
            broker = start_variant(src, workdir / f"{name}-{rnd}", topics, overrides, start_timeout_s=120)
            try:
                for count in counts if rnd % 2 == 0 else counts[::-1]:
                    rate, cpu_per_m, tool_per_m = _spread_once(tool, broker, f"spread-{count}", args.messages)
                    rates[name, count].append(rate)
                    cpu[name, count].append(cpu_per_m)
                    tool_cpu[name, count].append(tool_per_m)
                    batches, per_batch_us = 0, None  # the mock's batches are in its memory only
                    if isinstance(broker, BrokerProcess):
                        batches = count_batches(broker.data_dir / "logs", f"spread-{count}")
                        per_batch_us = round(cpu_per_m * args.messages / 1e6 / batches * 1e6, 1)
                        batch_cpu[name, count].append(per_batch_us)
                    emit(
                        "produce-spread",
                        variant=name,
                        partitions=count,
                        round=rnd,
                        msgs_per_s=round(rate),
                        broker_cpu_s_per_m=round(cpu_per_m, 3),
                        tool_cpu_s_per_m=round(tool_per_m, 2),
                        batches=batches,
                        broker_cpu_us_per_batch=per_batch_us,
                    )
            finally:
                broker.stop(timeout_s=120)
    for name, _ in variants:
        few, many = statistics.median(rates[name, 6]), statistics.median(rates[name, args.spread])
        emit(
            "produce-spread-median",
            variant=name,
            six=round(few),
            spread=round(many),
            ratio=round(many / few, 3),
            six_cpu_s_per_m=round(statistics.median(cpu[name, 6]), 3),
            spread_cpu_s_per_m=round(statistics.median(cpu[name, args.spread]), 3),
            six_cpu_us_per_batch=_median(batch_cpu[name, 6]),
            spread_cpu_us_per_batch=_median(batch_cpu[name, args.spread]),
            six_tool_cpu_s_per_m=round(statistics.median(tool_cpu[name, 6]), 2),
            spread_tool_cpu_s_per_m=round(statistics.median(tool_cpu[name, args.spread]), 2),
        )


def _median(values: list[float]) -> float | None:
    return round(statistics.median(values), 1) if values else None


def check_found(bootstrap: str, tps: list[TopicPartition], chunk: int, when: str) -> None:
    start = time.perf_counter()
    found, missing = find_each(bootstrap, tps, chunk)
    seconds = round(time.perf_counter() - start, 1)
    emit("find-each", when=when, found=found, of=len(tps), seconds=seconds, first_missing=missing)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--topics", type=int, default=5000)
    parser.add_argument("--partitions", type=int, default=20)
    parser.add_argument("--batch", type=int, default=50, help="topics per CreateTopics request")
    parser.add_argument("--produce-chunk", type=int, default=10_000, help="partitions per producer")
    parser.add_argument("--find-chunk", type=int, default=5_000, help="partitions per consumer")
    parser.add_argument("--idle", type=float, default=30.0)
    parser.add_argument("--tool", help="rdkafka_performance: run the 1,000 vs 6 partitions produce instead")
    parser.add_argument(
        "--src",
        action="append",
        default=[],
        metavar="NAME=DIR",
        help="broker variant (--tool, --metadata-restarts)",
    )
    parser.add_argument(
        "--reference",
        action="append",
        default=[],
        metavar="NAME=BINARY",
        help="reference broker variant (--tool): bench/build_mock_broker.sh's mock broker",
    )
    parser.add_argument("--spread", type=int, default=1000)
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--metadata-restarts", type=int, default=0, help="rounds of restarts timing the first Metadata"
    )
    parser.add_argument(
        "--reuse", metavar="DATA_DIR", help="--metadata-restarts: a data directory of an earlier run, kept"
    )
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--dir", help="data directory (default: a temporary one, removed after)")
    args = parser.parse_args()
    tmp = tempfile.mkdtemp(prefix="strom-partitions-", dir=args.dir)
    here = str(Path(__file__).resolve().parents[1] / "src")
    variants = [(v.split("=", 1)[0], v.split("=", 1)[1]) for v in args.src] or [("current", here)]
    try:
        if args.metadata_restarts:
            metadata_after_restarts(Path(tmp), variants, args)
        elif args.tool:
            variants += [(v.split("=", 1)[0], v.split("=", 1)[1]) for v in args.reference]
            spread_throughput(args.tool, Path(tmp), variants, args)
        else:
            many_partitions(Path(tmp), args)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def many_partitions(workdir: Path, args: argparse.Namespace) -> None:
    broker = BrokerProcess(workdir / "data", dict(s.split("=", 1) for s in args.set), start_timeout_s=900)
    try:
        broker.start()
        _many_partitions(broker, args)
    finally:
        broker.stop(timeout_s=600)


def _many_partitions(broker: BrokerProcess, args: argparse.Namespace) -> None:
    bootstrap = broker.bootstrap
    names = [f"p{i:05d}" for i in range(args.topics)]
    tps = [TopicPartition(n, p) for n in names for p in range(args.partitions)]
    start = time.perf_counter()
    create_topics(bootstrap, names, args.partitions, args.batch)
    emit("create", partitions=len(tps), seconds=round(time.perf_counter() - start, 1))
    start = time.perf_counter()
    produce_each(bootstrap, tps, args.produce_chunk)
    emit("produce-one-each", seconds=round(time.perf_counter() - start, 1))
    check_found(bootstrap, tps, args.find_chunk, "after produce")
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
    start = time.perf_counter()
    broker.stop(timeout_s=600)
    emit("clean-shutdown", seconds=round(time.perf_counter() - start, 1))
    emit("clean-restart-to-serving", seconds=round(serving_after_start(broker, len(names), tps[-1]), 1))
    check_found(broker.bootstrap, tps, args.find_chunk, "after clean restart")
    broker.kill()
    emit("kill9-restart-to-serving", seconds=round(serving_after_start(broker, len(names), tps[-1]), 1))
    check_found(broker.bootstrap, tps, args.find_chunk, "after kill -9 restart")
    pid = broker.pid
    assert pid is not None
    emit("after-restart", rss_mib=round(_rss_mib(pid)), open_descriptors=len(os.listdir(f"/proc/{pid}/fd")))
    start = time.perf_counter()
    broker.stop(timeout_s=600)
    emit("clean-shutdown-after-kill9-restart", seconds=round(time.perf_counter() - start, 1))


if __name__ == "__main__":
    main()
