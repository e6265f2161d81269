"""Iceberg topics: translation throughput per broker core, and what translation costs produce.

    PYTHONPATH=src .venv/bin/python bench/iceberg_bench.py [--records 100000] [--sizes 100,1000]

Starts one broker (`BrokerProcess`, the default SQL catalog in its data dir). For each value size
(Avro records of one string field padded to about that many bytes, Confluent wire format through
confluent-kafka's AvroSerializer, serialized once and produced as bytes):

* ``translation``: ``--records`` records produced to a 1-partition topic without translation, then
  ``strom.iceberg.mode=value_schema_id_prefix`` turned on (target lag 100 ms); measured from then
  until the table's snapshot summary records every offset:
  records/s of wall time and records per broker CPU second (utime + stime from /proc; the broker is
  otherwise idle, so this is translation's cost: reads, Avro decoding, Arrow, Parquet and the commits);
* ``produce``: the same records produced to a topic without translation and to one with it
  (``strom.iceberg.target.lag.ms=1000``, the translation running meanwhile), alternately, three rounds
  each; reports records/s of each and the ratio (same run, same machine).

With ``--sustained SECONDS`` it measures instead produce and translation together under a sustained load:
per value size, ``--rounds`` rounds, each producing for SECONDS at full speed from ``--producers``
producer processes (confluent-kafka, acks=1) into a fresh ``--partitions``-partition topic without
translation, then into one with ``value_schema_id_prefix`` (target lag ``--target-lag-ms``, the topic
default unless given). Per topic: records/s produced and broker CPU seconds during the produce; for the
translated one the translation lag (records and seconds, from the broker's ``/metrics``) when the
produce ends, with the rounds that had ended in the idle share and in the raised one (the backlog
controller raises a partition's share once its lag passes ``strom.iceberg.translation.backlog.ms``,
``--backlog-ms``, by default 10 times the target lag: strom.broker.lake.backlog), then ``--drain``
seconds of the broker translating alone: rows translated per broker CPU second (translation's cost
per core), after which the topic's mode is turned off and the rounds already
under way are waited for, so that no translation runs into the next measurement. The broker's CPU
(its translation worker processes included) is also split between its event loop thread, its other
threads and its worker processes; and a `LoopProbe` times ApiVersions round trips every 20 ms during
each produce: how long a request waits for the broker's event loop.

With ``--pin`` the broker (its worker processes inherit it) runs on the last CPU and the bench with its
producer processes on the others: the clients then stand for machines of their own, as in a deployment,
and the ratio says what translation costs the broker, not what it takes from clients sharing its
cores. Without it every process shares every core.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import re
import socket
import statistics
import struct
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from pyiceberg.catalog import load_catalog
from pyiceberg.exceptions import NoSuchTableError

from strom.lake.tables import recorded_offsets
from strom.testing import BrokerProcess
from strom.testing.processes import child_pids, process_cpu_times, thread_cpu_seconds

SET = AlterConfigOpType.SET
SCHEMA = {
    "type": "record",
    "name": "Event",
    "namespace": "bench",
    "fields": [{"name": "body", "type": "string"}],
}


def values(broker: BrokerProcess, topic: str, size: int, count: int) -> list[bytes]:
    assert broker.http_url is not None
    serializer = AvroSerializer(SchemaRegistryClient({"url": broker.http_url}), json.dumps(SCHEMA))
    context = SerializationContext(topic, MessageField.VALUE)
    one = serializer({"body": "x" * max(size - 7, 1)}, context)
    assert one is not None
    return [one] * count


def create(admin: AdminClient, topic: str, configs: dict[str, str], partitions: int = 1) -> None:
    for future in admin.create_topics([NewTopic(topic, partitions, 1, config=configs)]).values():
        future.result(30)


def alter(admin: AdminClient, topic: str, configs: dict[str, str]) -> None:
    entries = [ConfigEntry(k, v, incremental_operation=SET) for k, v in configs.items()]
    resource = ConfigResource("TOPIC", topic, incremental_configs=entries)
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(30)


def produce(bootstrap: str, topic: str, payloads: list[bytes]) -> float:
    """Seconds to produce and flush ``payloads``."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "batch.size": 1 << 20, "acks": "1"})
    began = time.perf_counter()
    for value in payloads:
        while True:
            try:
                producer.produce(topic, value)
                break
            except BufferError:
                producer.poll(0.01)
    assert producer.flush(120) == 0
    return time.perf_counter() - began


def produce_for(bootstrap: str, topic: str, value: bytes, seconds: float, done: Any) -> None:
    """One producer process: ``value`` to ``topic`` as fast as it goes for ``seconds``; puts its count."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "batch.size": 1 << 20, "acks": "1"})
    count, stop = 0, time.perf_counter() + seconds
    while time.perf_counter() < stop:
        for _ in range(1000):
            try:
                producer.produce(topic, value)
                count += 1
            except BufferError:
                producer.poll(0.005)
        producer.poll(0)
    assert producer.flush(120) == 0
    done.put(count)


def produce_sustained(
    bootstrap: str, topic: str, value: bytes, seconds: float, producers: int
) -> tuple[int, float]:
    """Records produced by ``producers`` processes in about ``seconds``; wall time to the last flush."""
    context = multiprocessing.get_context("spawn")
    done = context.Queue()
    procs = [
        context.Process(target=produce_for, args=(bootstrap, topic, value, seconds, done))
        for _ in range(producers)
    ]
    began = time.perf_counter()
    for proc in procs:
        proc.start()
    counts = [done.get(timeout=seconds + 180) for _ in procs]
    wall = time.perf_counter() - began
    for proc in procs:
        proc.join(30)
    return sum(counts), wall


def lag_metrics(broker: BrokerProcess, topic: str) -> dict[str, float]:
    """The topic's translation from ``/metrics``: ``records`` of lag (summed over partitions),
    ``seconds`` of lag (the most), and the rounds that ended ``idle`` and ``raised`` (summed; the
    backlog controller's shares, strom.broker.lake.backlog)."""
    assert broker.http_url is not None
    with urllib.request.urlopen(f"{broker.http_url}/metrics", timeout=30) as response:
        text = response.read().decode()
    found = {"records": 0.0, "seconds": 0.0, "idle": 0.0, "raised": 0.0}
    for name, value in re.findall(
        r"^strom_iceberg_translation_(lag_records|lag_seconds|idle_rounds_total|raised_rounds_total)"
        rf'\{{[^}}]*topic="{re.escape(topic)}"[^}}]*\}} (\S+)$',
        text,
        re.M,
    ):
        key = name.removeprefix("lag_").removesuffix("_rounds_total")
        if key == "seconds":
            found[key] = max(found[key], float(value))
        else:
            found[key] += float(value)
    return found


def next_offset(log_dir: Path, topic: str) -> int:
    return recorded(log_dir, topic).get(0, 0)


def recorded(log_dir: Path, topic: str) -> dict[int, int]:
    """Each partition's next offset as the topic's table records it."""
    base = log_dir / "iceberg"
    if not (base / "catalog.db").exists():
        return {}
    catalog = load_catalog(
        "strom", type="sql", uri=f"sqlite:///{base}/catalog.db", warehouse=f"file://{base}/warehouse"
    )
    try:
        return recorded_offsets(catalog.load_table(("strom", topic)))
    except NoSuchTableError:
        return {}


def threads_used(broker: BrokerProcess, before: dict[int, float]) -> tuple[float, float]:
    """CPU seconds since ``before`` (a `thread_cpu_seconds`) of the broker's main thread (its event loop)
    and of its other threads (translation's worker threads among them)."""
    assert broker.proc is not None
    now = thread_cpu_seconds(broker.proc.pid)
    used = {tid: seconds - before.get(tid, 0.0) for tid, seconds in now.items()}
    main = used.pop(broker.proc.pid, 0.0)
    return main, sum(used.values())


def wait_translation_idle(broker: BrokerProcess, log_dir: Path, topic: str) -> None:
    """After the topic's mode is turned off: until its rounds already handed to worker threads have
    committed (the table's offsets still for a second and the broker's other threads nearly idle), so
    that none of them runs into the next measurement."""
    assert broker.proc is not None
    last = recorded(log_dir, topic)
    while True:
        cpu0, threads0 = cpu(broker), thread_cpu_seconds(broker.proc.pid)
        time.sleep(1.0)
        now = recorded(log_dir, topic)
        if now == last and cpu(broker) - cpu0 - threads_used(broker, threads0)[0] < 0.1:
            return
        last = now


def cpu(broker: BrokerProcess) -> float:
    """The broker's CPU seconds, its child processes' (translation's worker process) included."""
    assert broker.proc is not None
    user, system = broker.cpu_times()
    return user + system + sum(sum(process_cpu_times(pid)) for pid in child_pids(broker.proc.pid))


class LoopProbe:
    """Round trips of ApiVersions v0 on one connection every 20 ms, in a thread of the bench: how long a
    request waits for the broker's event loop (and its GIL) while produce and translation run."""

    INTERVAL_S = 0.02

    def __init__(self, bootstrap: str) -> None:
        host, port = bootstrap.rsplit(":", 1)
        self._sock = socket.create_connection((host, int(port)), timeout=30)
        self._samples: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> LoopProbe:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(60)
        self._sock.close()

    def _run(self) -> None:
        correlation = 0
        while not self._stop.wait(self.INTERVAL_S):
            correlation += 1
            body = struct.pack(">hhih", 18, 0, correlation, 5) + b"probe"
            began = time.perf_counter()
            self._sock.sendall(struct.pack(">i", len(body)) + body)
            (size,) = struct.unpack(">i", self._recv(4))
            self._recv(size)
            self._samples.append(time.perf_counter() - began)

    def _recv(self, n: int) -> bytes:
        data = b""
        while len(data) < n:
            chunk = self._sock.recv(n - len(data))
            if not chunk:
                raise ConnectionError("the broker closed the probe's connection")
            data += chunk
        return data

    def summary(self) -> str:
        """Median, 99th percentile and most of the round trips, in milliseconds."""
        ms = sorted(1000 * s for s in self._samples)
        if not ms:
            return "no probe"
        p99 = ms[min(len(ms) - 1, int(len(ms) * 0.99))]
        return f"loop probe {statistics.median(ms):.1f}/{p99:.0f}/{ms[-1]:.0f} ms (median/p99/max)"


def run(records: int, sizes: list[int]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        broker = BrokerProcess(Path(tmp) / "data", {"strom.iceberg.translation.interval.ms": "100"})
        broker.start()
        try:
            admin = AdminClient({"bootstrap.servers": broker.bootstrap})
            log_dir = broker.data_dir / "logs"
            # A first Iceberg topic, so that the translator is built (pyiceberg imported) before measuring.
            create(
                admin, "warm-up", {"strom.iceberg.mode": "key_value", "strom.iceberg.target.lag.ms": "100"}
            )
            produce(broker.bootstrap, "warm-up", [b"x"])
            while next_offset(log_dir, "warm-up") < 1:
                time.sleep(0.1)
            for size in sizes:
                topic = f"translate-{size}"
                create(
                    admin,
                    topic,
                    {
                        "strom.iceberg.mode": "value_schema_id_prefix",
                        "strom.iceberg.target.lag.ms": "3600000",
                    },
                )
                payloads = values(broker, topic, size, records)
                produce(broker.bootstrap, topic, payloads)
                turn_on = [
                    ConfigEntry("strom.iceberg.mode", "value_schema_id_prefix", incremental_operation=SET),
                    ConfigEntry("strom.iceberg.target.lag.ms", "100", incremental_operation=SET),
                ]
                resource = ConfigResource("TOPIC", topic, incremental_configs=turn_on)
                cpu0, t0 = cpu(broker), time.perf_counter()
                for future in admin.incremental_alter_configs([resource]).values():
                    future.result(30)
                while next_offset(log_dir, topic) < records:
                    time.sleep(0.05)
                wall, used = time.perf_counter() - t0, cpu(broker) - cpu0
                n = records
                print(
                    f"translation {size} B: {n} records in {wall:.2f} s = {n / wall:,.0f} records/s; "
                    f"broker CPU {used:.2f} s = {n / used:,.0f} records per CPU second",
                    flush=True,
                )

                plain, lake = f"plain-{size}", f"lake-{size}"
                create(admin, plain, {})
                create(
                    admin,
                    lake,
                    {"strom.iceberg.mode": "value_schema_id_prefix", "strom.iceberg.target.lag.ms": "1000"},
                )
                rates: dict[str, list[float]] = {plain: [], lake: []}
                for _ in range(3):
                    for name in (plain, lake):
                        rates[name].append(records / produce(broker.bootstrap, name, payloads))
                best = {name: max(r) for name, r in rates.items()}
                print(
                    f"produce {size} B: without translation {best[plain]:,.0f} records/s, "
                    f"with {best[lake]:,.0f} records/s ({100 * best[lake] / best[plain]:.0f}%); "
                    f"rounds {[round(r) for r in rates[plain]]} vs {[round(r) for r in rates[lake]]}",
                    flush=True,
                )
        finally:
            broker.stop()


def start_broker(data_dir: Path, configs: dict[str, str] | None, pin: bool) -> BrokerProcess:
    """A started broker; with ``pin`` on the last CPU, this process (and the producers it starts later)
    on the others. A child inherits its parent's CPU affinity when it starts."""
    broker = BrokerProcess(data_dir, configs)
    if not pin:
        broker.start()
        return broker
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        raise SystemExit("--pin needs at least two CPUs")
    os.sched_setaffinity(0, {cpus[-1]})
    try:
        broker.start()
    finally:
        os.sched_setaffinity(0, set(cpus[:-1]))
    print(f"broker on CPU {cpus[-1]}, the bench and its producers on CPUs {cpus[:-1]}", flush=True)
    return broker


def run_sustained(
    seconds: float,
    sizes: list[int],
    partitions: int,
    producers: int,
    rounds: int,
    lag_ms: str,
    drain: float,
    pin: bool = False,
    backlog_ms: str = "",
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        configs = {"strom.iceberg.translation.backlog.ms": backlog_ms} if backlog_ms else None
        broker = start_broker(Path(tmp) / "data", configs, pin)
        try:
            admin = AdminClient({"bootstrap.servers": broker.bootstrap})
            log_dir = broker.data_dir / "logs"
            lake_configs = {"strom.iceberg.mode": "value_schema_id_prefix"}
            if lag_ms:
                lake_configs["strom.iceberg.target.lag.ms"] = lag_ms
            for size in sizes:
                [value] = values(broker, f"s-{size}", size, 1)
                rates: dict[str, list[float]] = {"plain": [], "lake": []}
                for round_ in range(rounds):
                    for kind in ("plain", "lake"):
                        topic = f"s-{kind}-{size}-{round_}"
                        create(admin, topic, lake_configs if kind == "lake" else {}, partitions)
                        values(broker, topic, size, 1)  # the subject registered before the clock starts
                        assert broker.proc is not None
                        cpu0, threads0 = cpu(broker), thread_cpu_seconds(broker.proc.pid)
                        with LoopProbe(broker.bootstrap) as probe:
                            count, wall = produce_sustained(
                                broker.bootstrap, topic, value, seconds, producers
                            )
                        used = cpu(broker) - cpu0
                        loop, others = threads_used(broker, threads0)
                        rates[kind].append(count / wall)
                        line = (
                            f"{size} B {kind}: {count:,} records in {wall:.1f} s = "
                            f"{count / wall:,.0f} records/s, broker CPU {used:.1f} s "
                            f"(event loop thread {loop:.1f} s, other threads {others:.1f} s, "
                            f"worker processes {used - loop - others:.1f} s); {probe.summary()}"
                        )
                        if kind == "lake":
                            at_end = lag_metrics(broker, topic)
                            in_table = sum(recorded(log_dir, topic).values())
                            cpu1, t1 = cpu(broker), time.perf_counter()
                            time.sleep(drain)
                            drained = sum(recorded(log_dir, topic).values()) - in_table
                            after_drain = lag_metrics(broker, topic)
                            drain_cpu, drain_wall = cpu(broker) - cpu1, time.perf_counter() - t1
                            alter(admin, topic, {"strom.iceberg.mode": "disabled"})
                            wait_translation_idle(broker, log_dir, topic)
                            line += (
                                f"; at the end {in_table:,} in the table ({count - in_table:,} behind), "
                                f"/metrics lag {at_end['records']:,.0f} records / {at_end['seconds']:.1f} s, "
                                f"rounds idle / raised {at_end['idle']:.0f} / {at_end['raised']:.0f} "
                                f"({'raised' if at_end['raised'] else 'not raised'}); "
                                f"then {drained:,} rows in {drain_wall:.1f} s "
                                f"({drained / drain_wall:,.0f}/s) for {drain_cpu:.1f} broker CPU s = "
                                f"{drained / max(drain_cpu, 0.01):,.0f} rows per CPU second "
                                f"(rounds idle / raised by then {after_drain['idle']:.0f} / "
                                f"{after_drain['raised']:.0f})"
                            )
                        print(line, flush=True)
                plain, lake = (statistics.median(rates[k]) for k in ("plain", "lake"))
                print(
                    f"{size} B sustained produce: with translation {100 * lake / plain:.0f}% of without "
                    f"(medians {lake:,.0f} / {plain:,.0f} records/s; load {os.getloadavg()[0]:.1f})",
                    flush=True,
                )
        finally:
            broker.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--sizes", default="100,1000")
    parser.add_argument("--sustained", type=float, default=0.0, help="seconds of produce per measurement")
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--producers", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--target-lag-ms", default="", help="the topic default unless given")
    parser.add_argument("--drain", type=float, default=20.0)
    parser.add_argument("--pin", action="store_true", help="the broker on one CPU, the clients on the others")
    parser.add_argument(
        "--backlog-ms", default="", help="strom.iceberg.translation.backlog.ms (default: the broker's)"
    )
    args = parser.parse_args()
    print(f"load {os.getloadavg()[0]:.1f}", flush=True)
    sizes = [int(s) for s in args.sizes.split(",")]
    if args.sustained:
        run_sustained(
            args.sustained,
            sizes,
            args.partitions,
            args.producers,
            args.rounds,
            args.target_lag_ms,
            args.drain,
            args.pin,
            args.backlog_ms,
        )
    else:
        run(args.records, sizes)


if __name__ == "__main__":
    main()
