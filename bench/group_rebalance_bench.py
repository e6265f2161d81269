"""One member of a 50-consumer group leaves: KIP-848 consumer groups against the classic protocol.

    PYTHONPATH=src .venv/bin/python bench/group_rebalance_bench.py [--consumers 50] [--partitions 100]
        [--runs 1] [--protocols consumer,classic-range,classic-cooperative]

Per protocol and round, on one fresh broker, a topic of ``--partitions`` partitions gets a steady
stream of records (a producer thread, about 2,000 records/s round-robin) and ``--consumers``
confluent-kafka consumers join one group (each in its own thread, polling). Once every partition is
owned and every consumer has consumed, one consumer closes (a clean leave: LeaveGroup for the classic
protocol, a heartbeat with epoch -1 for KIP-848). Measured from the close call:

- **owned again**: until the leaver's partitions are all assigned to the others (their assignment
  callbacks);
- **others revoked**: how many of the remaining consumers had partitions revoked (an eager rebalance
  revokes everything from everyone; an incremental one only what moves);
- **the others' pause**: per remaining consumer, the longest time without a message in the
  ``WINDOW_S`` (3 s) after the close, as the median and the maximum over the remaining consumers, next to
  the maximum of the same figure in the 3 s before the close (the gaps of a steady stream).

Settings (the same for every protocol): the classic consumers' ``heartbeat.interval.ms`` is 1000 and
``session.timeout.ms`` 45000; the broker's ``group.consumer.heartbeat.interval.ms`` is 1000 (with
``group.consumer.min.heartbeat.interval.ms`` lowered to allow it). The last lines are a Markdown table.
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from strom.testing.broker_process import BrokerProcess

BROKER_SETTINGS = {
    "group.initial.rebalance.delay.ms": "0",
    "group.consumer.heartbeat.interval.ms": "1000",
    "group.consumer.min.heartbeat.interval.ms": "500",
}
WINDOW_S = 3.0  # the gaps are measured over this long after the leave, and before it as a baseline
PROTOCOLS: dict[str, dict[str, Any]] = {
    "consumer": {"group.protocol": "consumer"},
    "classic-range": {"partition.assignment.strategy": "range"},
    "classic-cooperative": {"partition.assignment.strategy": "cooperative-sticky"},
}


class Member:
    """One consumer in its thread, with the times its partitions were revoked and assigned."""

    def __init__(self, bootstrap: str, group: str, topic: str, extra: dict[str, Any]) -> None:
        conf = {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "auto.offset.reset": "latest",
            "enable.auto.commit": True,
            **extra,
        }
        if "group.protocol" not in extra:
            conf.update({"heartbeat.interval.ms": 1000, "session.timeout.ms": 45000})
        self.consumer = Consumer(conf)
        self.owned: set[int] = set()
        self.events: list[tuple[float, str, frozenset[int]]] = []
        self.messages = 0
        self.arrivals: list[float] = []
        self.stop = threading.Event()
        incremental = extra.get("group.protocol") == "consumer" or "cooperative" in str(
            extra.get("partition.assignment.strategy", "")
        )
        self.incremental = incremental
        self.consumer.subscribe([topic], on_assign=self._assign, on_revoke=self._revoke)
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _assign(self, consumer: Any, parts: list[Any]) -> None:
        ps = frozenset(p.partition for p in parts)
        self.owned = self.owned | ps if self.incremental else set(ps)
        self.events.append((time.monotonic(), "assign", ps))

    def _revoke(self, consumer: Any, parts: list[Any]) -> None:
        ps = frozenset(p.partition for p in parts)
        self.owned = self.owned - ps if self.incremental else set()
        self.events.append((time.monotonic(), "revoke", ps))

    def _run(self) -> None:
        while not self.stop.is_set():
            msg = self.consumer.poll(0.1)
            if msg is not None and not msg.error():
                self.messages += 1
                self.arrivals.append(time.monotonic())
        self.consumer.close()

    def close(self) -> None:
        self.stop.set()
        self.thread.join(60)

    def revoked_after(self, t0: float) -> bool:
        return any(kind == "revoke" and at >= t0 for at, kind, _ in self.events)

    def longest_gap(self, start: float, end: float) -> float:
        """The longest time in [start, end] without a message (its edges count as messages)."""
        times = [start, *(t for t in self.arrivals if start <= t <= end), end]
        return max(b - a for a, b in itertools.pairwise(times))


def produce_forever(bootstrap: str, topic: str, partitions: int, stop: threading.Event) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    i = 0
    while not stop.is_set():
        for _ in range(20):
            producer.produce(topic, value=b"x" * 100, partition=i % partitions)
            i += 1
        producer.poll(0)
        time.sleep(0.01)
    producer.flush(10)


def wait(condition: Any, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        time.sleep(0.05)


def one_run(bootstrap: str, protocol: str, consumers: int, partitions: int) -> dict[str, float]:
    topic = f"rebalance-{protocol}-{uuid.uuid4().hex[:6]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(30)
    stop = threading.Event()
    producer = threading.Thread(
        target=produce_forever, args=(bootstrap, topic, partitions, stop), daemon=True
    )
    producer.start()
    members = [Member(bootstrap, f"g-{topic}", topic, PROTOCOLS[protocol]) for _ in range(consumers)]
    try:
        everything = set(range(partitions))

        def settled() -> bool:
            owned = [m.owned for m in members]
            return set().union(*owned) == everything and sum(map(len, owned)) == partitions

        wait(settled, 300, "every partition owned")
        wait(lambda: all(m.messages for m in members if m.owned), 120, "every owner consuming")
        time.sleep(WINDOW_S)  # a quiet stretch, the baseline of the gaps
        leaver, others = members[0], members[1:]
        t0 = time.monotonic()
        leaver.close()
        wait(lambda: set().union(*(m.owned for m in others)) == everything, 300, "partitions owned again")
        owned_again = time.monotonic() - t0
        time.sleep(max(0.0, WINDOW_S - (time.monotonic() - t0)))
        gaps = [m.longest_gap(t0, t0 + WINDOW_S) for m in others]
        before = [m.longest_gap(t0 - WINDOW_S, t0) for m in others]
        return {
            "owned_again_s": owned_again,
            "revoked": float(sum(1 for m in others if m.revoked_after(t0))),
            "gap_median_s": statistics.median(gaps),
            "gap_max_s": max(gaps),
            "gap_before_max_s": max(before),
        }
    finally:
        stop.set()
        for member in members[1:]:
            member.close()
        producer.join(30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--consumers", type=int, default=50)
    parser.add_argument("--partitions", type=int, default=100)
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--protocols", default=",".join(PROTOCOLS))
    args = parser.parse_args()
    protocols = args.protocols.split(",")
    results: dict[str, list[dict[str, float]]] = {p: [] for p in protocols}
    with tempfile.TemporaryDirectory() as tmp:
        for run in range(args.runs):
            for protocol in protocols:
                broker = BrokerProcess(Path(tmp) / f"{protocol}-{run}", BROKER_SETTINGS)
                broker.start()
                try:
                    result = one_run(broker.bootstrap, protocol, args.consumers, args.partitions)
                finally:
                    broker.stop()
                results[protocol].append(result)
                print(protocol, run, result, flush=True)
    print()
    print(
        "| protocol | owned again (s) | others revoked | longest gap, median / max (s) | max gap before (s) |"
    )
    print("|---|---|---|---|---|")
    for protocol, rows in results.items():
        med = {k: statistics.median(r[k] for r in rows) for k in rows[0]}
        print(
            f"| {protocol} | {med['owned_again_s']:.2f} | {int(med['revoked'])}/{args.consumers - 1} | "
            f"{med['gap_median_s']:.2f} / {med['gap_max_s']:.2f} | {med['gap_before_max_s']:.2f} |"
        )


if __name__ == "__main__":
    main()
