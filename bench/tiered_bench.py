"""Tiered storage throughput on one broker with SeaweedFS (S3) on loopback, every figure from the same run.

Run by hand (`python bench/tiered_bench.py --mb 200 --rounds 3`); never part of the test suite.

1. **Produce, tiering on against off**: rounds alternate (off, on, on, off, ...) producing ``--mb`` MB of
   1 KB values with confluent-kafka (acks=1, lz4 off) into a fresh topic each, one with
   ``remote.storage.enable`` (its segments are copied while it is produced to) and one without. Median
   MB/s of each, and on/off.
2. **Copy**: a topic of ``--mb`` MB produced with tiering off is switched on; the time until every rolled
   segment is remote (ListOffsets -5 reaching the active segment) gives the copy throughput, and the
   broker's CPU seconds meanwhile per GB copied (all threads, the event loop's). The produce rounds
   also print the broker's CPU seconds per GB produced (tiering on: its copies included).
3. **Read, tiered against local**: the same ``--mb`` MB range read from offset 0 by a confluent-kafka
   consumer, from a tiered topic whose local log keeps only its last segment (so the range is read from
   S3 through the broker's remote reads, with a cache far smaller than the range) and from the same data
   in an untiered topic (local disk, page cache), rounds alternating. Median MB/s of each and tiered/local,
   and the CPU seconds per GB read (utime + stime from /proc) of the broker (all its threads, the part
   of it in the kernel, and its main thread, the event loop, apart from the object store's threads),
   of SeaweedFS (its S3 gateway, filer and volume server are one process) and of the consumer (this
   process: librdkafka's threads).

``--steps read`` runs only the reads (and the produce they need), to measure a change to the read path
without the produce and copy rounds.

It prints the 1-minute load average at each step, since the machine is shared.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic
from tests.integration.rawclient import RawClient
from tests.object_stores import new_bucket

from strom.testing import BrokerProcess
from strom.testing.processes import process_cpu_times, thread_cpu_seconds
from strom.testing.seaweedfs_process import SeaweedS3Process

VALUE = 1000
SEGMENT_BYTES = 8 * 1024 * 1024


def _note(step: str, **values: object) -> None:
    print(json.dumps({"step": step, "load_1m": round(os.getloadavg()[0], 2), **values}), flush=True)


def _note_medians(step: str, rates: dict[str, list[float]], cpu: dict[str, list[float]]) -> None:
    """Medians of the two variants' MB/s (the second's against the first's) and broker CPU per GB."""
    first, second = rates
    a, b = statistics.median(rates[first]), statistics.median(rates[second])
    _note(
        step,
        **{
            f"{first}_mb_s": round(a, 1),
            f"{second}_mb_s": round(b, 1),
            f"{second}_vs_{first}": round(b / a, 3),
        },
        **{f"{v}_cpu_s_per_gb": round(statistics.median(cpu[v]), 2) for v in (first, second)},
    )


def _create(admin: AdminClient, topic: str, tiered: bool) -> None:
    configs = {"segment.bytes": str(SEGMENT_BYTES)}
    if tiered:
        configs |= {"remote.storage.enable": "true", "local.retention.bytes": str(SEGMENT_BYTES)}
    for future in admin.create_topics([NewTopic(topic, 1, 1, config=configs)]).values():
        future.result(30)


def _produce(bootstrap: str, topic: str, mb: int) -> float:
    """MB/s of values produced (acks=1, until the last is acknowledged)."""
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": 1,
            "linger.ms": 5,
            "batch.size": 262144,
            "queue.buffering.max.kbytes": 262144,
        }
    )
    count = mb * 1_000_000 // VALUE
    value = b"v" * VALUE
    start = time.perf_counter()
    for _ in range(count):
        while True:
            try:
                producer.produce(topic, value, partition=0)
                break
            except BufferError:
                producer.poll(0.01)
    assert producer.flush(300) == 0
    return count * VALUE / 1e6 / (time.perf_counter() - start)


def _broker_cpu(broker: BrokerProcess) -> tuple[float, float]:
    """(all threads, main thread) CPU seconds of the broker so far."""
    assert broker.proc is not None
    threads = thread_cpu_seconds(broker.proc.pid)
    return sum(broker.cpu_times()), threads.get(broker.proc.pid, 0.0)


def _cpu_now(broker: BrokerProcess, s3_pid: int) -> dict[str, float]:
    """CPU seconds so far: the broker's (all threads; and of them, in the kernel), its event loop's,
    SeaweedFS's and this process's (the consumer)."""
    broker_all, loop = _broker_cpu(broker)
    return {
        "broker": broker_all,
        "broker_kernel": broker.cpu_times()[1],
        "event_loop": loop,
        "seaweedfs": sum(process_cpu_times(s3_pid)),
        "consumer": sum(process_cpu_times(os.getpid())),
    }


def _read(broker: BrokerProcess, s3_pid: int, topic: str, end: int) -> tuple[float, dict[str, float]]:
    """MB/s of values consumed from offset 0 up to ``end``, and the CPU seconds per GB of them of each
    process (`_cpu_now`'s)."""
    consumer = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": f"bench-{topic}-{time.monotonic_ns()}",
            "enable.auto.commit": False,
            "fetch.max.bytes": 52428800,
            "max.partition.fetch.bytes": 8388608,
        }
    )
    consumer.assign([TopicPartition(topic, 0, 0)])
    got = 0
    cpu0 = _cpu_now(broker, s3_pid)
    start = time.perf_counter()
    deadline = start + 600
    try:
        while got < end:
            assert time.perf_counter() < deadline, f"{topic}: read {got} of {end}"
            for msg in consumer.consume(10000, 1.0):
                if msg.error() is None and msg.offset() < end:
                    got += 1
        took = time.perf_counter() - start
        cpu1 = _cpu_now(broker, s3_pid)
        gb = got * VALUE / 1e9
        return got * VALUE / 1e6 / took, {name: (cpu1[name] - cpu0[name]) / gb for name in cpu0}
    finally:
        consumer.close()


def _copied_through(raw: RawClient, topic: str) -> int:
    return int(raw.list_offset(topic, 0, -5, version=9)["offset"])


def _bases(broker: BrokerProcess, topic: str) -> list[int]:
    return sorted(int(p.name.split(".")[0]) for p in (broker.data_dir / "logs" / f"{topic}-0").glob("*.log"))


def _active_base(broker: BrokerProcess, topic: str) -> int:
    return _bases(broker, topic)[-1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--mb", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", choices=("all", "read"), default="all")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="strom-tiered-bench-") as tmp:
        s3 = SeaweedS3Process(Path(tmp) / "seaweedfs")
        s3.start()
        try:
            overrides = {
                "remote.log.storage.system.enable": "true",
                "remote.log.manager.task.interval.ms": "200",
                "log.retention.check.interval.ms": "500",
                "remote.log.index.file.cache.total.size.bytes": str(16 * 1024 * 1024),
                "rlmm.config.remote.log.metadata.topic.num.partitions": "3",
                **s3.rsm_config(new_bucket(s3)),
            }
            with BrokerProcess(Path(tmp) / "data", overrides) as broker:
                assert s3.pid is not None
                _run(broker, s3.pid, args.mb, args.rounds, args.steps == "all")
        finally:
            s3.stop()


def _run(broker: BrokerProcess, s3_pid: int, mb: int, rounds: int, every_step: bool) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    raw = RawClient(broker.bootstrap, timeout_s=60)
    _note("start", mb=mb, rounds=rounds)
    if every_step:
        _produce_rounds(broker, admin, mb, rounds)
        _copy(broker, admin, raw, mb)
    _reads(broker, s3_pid, admin, raw, mb, rounds)
    raw.close()


def _produce_rounds(broker: BrokerProcess, admin: AdminClient, mb: int, rounds: int) -> None:
    """Produce rounds, tiering off and on interleaved."""
    rates: dict[str, list[float]] = {"off": [], "on": []}
    produce_cpu: dict[str, list[float]] = {"off": [], "on": []}  # broker CPU s per GB produced
    order = [v for i in range(rounds) for v in (("off", "on") if i % 2 == 0 else ("on", "off"))]
    for n, variant in enumerate(order):
        topic = f"produce-{variant}-{n}"
        _create(admin, topic, variant == "on")
        cpu0, _ = _broker_cpu(broker)
        rates[variant].append(_produce(broker.bootstrap, topic, mb))
        produce_cpu[variant].append((_broker_cpu(broker)[0] - cpu0) / (mb / 1000))
        _note(
            "produce",
            variant=variant,
            mb_s=round(rates[variant][-1], 1),
            broker_cpu_s_per_gb=round(produce_cpu[variant][-1], 2),
        )
    _note_medians("produce-median", rates, produce_cpu)


def _copy(broker: BrokerProcess, admin: AdminClient, raw: RawClient, mb: int) -> None:
    """A backlog switched to tiered: the time until it is all remote."""
    _create(admin, "backlog", False)
    _produce(broker.bootstrap, "backlog", mb)
    target = _active_base(broker, "backlog") - 1
    backlog_bytes = sum(
        p.stat().st_size
        for p in (broker.data_dir / "logs" / "backlog-0").glob("*.log")
        if int(p.name.split(".")[0]) <= target
    )
    entries = [ConfigEntry("remote.storage.enable", "true", incremental_operation=AlterConfigOpType.SET)]
    start = time.perf_counter()
    cpu0, loop0 = _broker_cpu(broker)
    for future in admin.incremental_alter_configs(
        [ConfigResource("TOPIC", "backlog", incremental_configs=entries)]
    ).values():
        future.result(30)
    while _copied_through(raw, "backlog") < target:
        time.sleep(0.1)
    took = time.perf_counter() - start
    cpu1, loop1 = _broker_cpu(broker)
    _note(
        "copy",
        bytes=backlog_bytes,
        seconds=round(took, 2),
        mb_s=round(backlog_bytes / 1e6 / took, 1),
        broker_cpu_s_per_gb=round((cpu1 - cpu0) / (backlog_bytes / 1e9), 2),
        event_loop_cpu_s_per_gb=round((loop1 - loop0) / (backlog_bytes / 1e9), 2),
    )


def _reads(
    broker: BrokerProcess, s3_pid: int, admin: AdminClient, raw: RawClient, mb: int, rounds: int
) -> None:
    """The same range read remote (tiered topic) and local (untiered topic), rounds alternating."""
    _create(admin, "read-tiered", True)
    _create(admin, "read-local", False)
    _produce(broker.bootstrap, "read-tiered", mb)
    _produce(broker.bootstrap, "read-local", mb)
    active = _active_base(broker, "read-tiered")
    deadline = time.monotonic() + 600
    while _copied_through(raw, "read-tiered") < active - 1 or len(_bases(broker, "read-tiered")) > 2:
        assert time.monotonic() < deadline, "the tiered topic's range did not leave the disk"
        time.sleep(0.2)
    end = _bases(broker, "read-tiered")[0]  # [0, end) is only in remote storage now
    reads: dict[str, list[float]] = {"local": [], "tiered": []}
    cpu: dict[str, list[float]] = {"local": [], "tiered": []}
    per_process: dict[str, list[dict[str, float]]] = {"local": [], "tiered": []}
    for i in range(rounds):
        for variant in ("local", "tiered") if i % 2 == 0 else ("tiered", "local"):
            mb_s, cpu_per_gb = _read(broker, s3_pid, f"read-{variant}", end)
            reads[variant].append(mb_s)
            cpu[variant].append(cpu_per_gb["broker"])
            per_process[variant].append(cpu_per_gb)
            _note(
                "read",
                variant=variant,
                records=end,
                mb_s=round(mb_s, 1),
                **{f"{name}_cpu_s_per_gb": round(value, 2) for name, value in cpu_per_gb.items()},
            )
    _note_medians("read-median", reads, cpu)
    _note(
        "read-cpu-median",
        **{
            f"{variant}_{name}_cpu_s_per_gb": round(statistics.median(r[name] for r in rows), 2)
            for variant, rows in per_process.items()
            for name in rows[0]
        },
    )


if __name__ == "__main__":
    main()
