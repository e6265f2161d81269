"""Throttled clients for the client-quota tests: a confluent-kafka producer or consumer driven as hard as
it goes, with the bytes it moved timed per message and the throttle times librdkafka saw per broker
(its statistics: ``brokers.<name>.throttle.max``, what the responses' ``throttle_time_ms`` said)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import Consumer, KafkaError, Producer

STROM = [sys.executable, "-m", "strom.cli.main"]


def strom_quotas(bootstrap: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*STROM, "--bootstrap-server", bootstrap, "quotas", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@dataclass
class Run:
    """Bytes moved, as (monotonic seconds since the start, bytes), and the largest throttle per broker id."""

    moved: list[tuple[float, int]] = field(default_factory=list)
    throttle_ms: dict[int, int] = field(default_factory=dict)

    def stats(self, text: str) -> None:
        for broker in json.loads(text).get("brokers", {}).values():
            node = int(broker.get("nodeid", -1))
            seen = int(broker.get("throttle", {}).get("max", 0))
            if node >= 0 and seen > self.throttle_ms.get(node, 0):
                self.throttle_ms[node] = seen

    def rate(self, start_s: float, end_s: float) -> float:
        """Bytes per second moved in [start_s, end_s)."""
        return sum(n for t, n in self.moved if start_s <= t < end_s) / (end_s - start_s)


def produce_flat_out(
    bootstrap: str,
    topic: str,
    client_id: str,
    seconds: float,
    value_bytes: int = 1000,
    probe: Callable[[], None] | None = None,
    partition: int | None = None,
    **conf: Any,
) -> Run:
    """Produce ``value_bytes`` values for ``seconds``, keeping librdkafka's queue full; ``probe`` is
    called once half way. ``partition`` pins every record to one partition (by default the
    partitioner spreads them)."""
    run = Run()
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "client.id": client_id,
            "linger.ms": 5,
            # Requests of 16 kB, small against the quotas tested: the rate is measured over many of
            # them (librdkafka's 1 MB default would make each one a multi-second throttle).
            "batch.size": 16384,
            "queue.buffering.max.messages": 2000,
            "statistics.interval.ms": 500,
            "stats_cb": run.stats,
            **conf,
        }
    )
    start = time.monotonic()
    payload = b"x" * value_bytes

    purged = {KafkaError._PURGE_QUEUE, KafkaError._PURGE_INFLIGHT}  # what the end left unsent

    def delivered(err: KafkaError | None, msg: Any) -> None:
        if err is None:
            run.moved.append((time.monotonic() - start, len(msg.value())))
        else:
            assert err.code() in purged, err

    while time.monotonic() - start < seconds:
        if probe is not None and time.monotonic() - start > seconds / 2:
            probe()
            probe = None
        try:
            if partition is None:
                producer.produce(topic, payload, on_delivery=delivered)
            else:
                producer.produce(topic, payload, partition=partition, on_delivery=delivered)
        except BufferError:
            producer.poll(0.05)
            continue
        producer.poll(0)
    producer.purge()
    producer.flush(30)
    return run


def produce_flat_out_to_each(
    bootstrap: str, topic: str, partitions: int, client_id: str, seconds: float, **conf: Any
) -> Run:
    """One flat-out producer per partition, all at once, merged into one ``Run``. One producer spread
    over partitions led by different brokers would fill its queue with the records of the leaders
    that throttle it, and feed the others too slowly to reach their quota."""
    with ThreadPoolExecutor(partitions) as pool:
        runs = list(
            pool.map(
                lambda p: produce_flat_out(bootstrap, topic, client_id, seconds, partition=p, **conf),
                range(partitions),
            )
        )
    merged = Run()
    for run in runs:
        merged.moved.extend(run.moved)
        for node, ms in run.throttle_ms.items():
            merged.throttle_ms[node] = max(ms, merged.throttle_ms.get(node, 0))
    return merged


def consume_flat_out(
    bootstrap: str,
    topic: str,
    client_id: str,
    seconds: float,
    probe: Callable[[], None] | None = None,
    **conf: Any,
) -> Run:
    run = Run()
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "client.id": client_id,
            "group.id": f"g-{client_id}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "statistics.interval.ms": 500,
            "stats_cb": run.stats,
            **conf,
        }
    )
    consumer.subscribe([topic])
    start: float | None = None
    try:
        while start is None or time.monotonic() - start < seconds:
            if probe is not None and start is not None and time.monotonic() - start > seconds / 2:
                probe()
                probe = None
            msg = consumer.poll(0.2)
            if msg is None or msg.error():
                continue
            if start is None:
                start = time.monotonic()  # from the first record: the group's join is not throttling
            run.moved.append((time.monotonic() - start, len(msg.value() or b"")))
    finally:
        consumer.close()
    return run
