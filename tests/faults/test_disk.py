"""Disk full on one broker's log directory (a small tmpfs mounted for the test).

The victim's log directory is a tmpfs; while the idempotent writer runs, a filler file takes every free
byte. Then a produce to a partition the victim leads fails with KAFKA_STORAGE_ERROR (probed with a
producer that does not retry; the suite's writer retries it, as librdkafka treats it as retriable), the
victim as follower cannot append either, and nothing already written may be damaged. The filler goes
away (space returns), the victim serves writes again, and it is restarted so that its log is also
recovered from disk before everything is read back and checked.
"""

from __future__ import annotations

import itertools
import random
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from strom.testing.fault_checker import encode_payload
from tests.faults.harness import FaultCluster, run_case, wait_for
from tests.faults.netlab import NetLab
from tests.faults.workload import Writer
from tests.tmpfs import TMPFS_BYTES, fill, mounted_tmpfs

pytestmark = pytest.mark.faults

_probe_seq = itertools.count()


def _probe(bootstrap: str, topic: str, partition: int) -> str:
    """One acks=all produce without retries; the error name ("NO_ERROR" when it was written)."""
    result: list[str] = []
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "enable.idempotence": False,
            "retries": 0,
            "message.timeout.ms": 10000,
        }
    )
    producer.produce(
        topic,
        value=encode_payload("probe", next(_probe_seq), 100),
        partition=partition,
        on_delivery=lambda err, _msg: result.append("NO_ERROR" if err is None else err.name()),
    )
    producer.flush(15)
    return result[0] if result else "NO_ANSWER"


@pytest.fixture
def full_disk_cluster(lab: NetLab, tmp_path: Path, rng: random.Random) -> Iterator[tuple[FaultCluster, int]]:
    fc = FaultCluster(tmp_path / "cluster", lab)
    victim = rng.randrange(len(fc.nodes))
    with mounted_tmpfs(tmp_path / "cluster" / f"broker-{victim}" / "logs"):
        try:
            fc.start()
            yield fc, victim
        finally:
            fc.stop()


def test_disk_full_on_one_broker(
    full_disk_cluster: tuple[FaultCluster, int], rng: random.Random, outcome: Callable[..., None]
) -> None:
    fc, victim = full_disk_cluster
    probes: dict[str, Any] = {}

    def fault(fc: FaultCluster, rng: random.Random, topic: str, writer: Writer) -> None:
        led = [p for p in range(3) if fc.leader_of(topic, p) == victim]
        assert led, f"broker {victim} leads no partition of {topic}"
        filler = fc.broker(victim).data_dir / "logs" / "filler"
        fill(filler, TMPFS_BYTES)
        # The first appends may still fit in the last free page; the next fail.
        wait_for(
            lambda: _probe(fc.bootstrap, topic, led[0]) == "KAFKA_STORAGE_ERROR", 30, "KAFKA_STORAGE_ERROR"
        )
        probes["full"] = "KAFKA_STORAGE_ERROR"
        time.sleep(rng.uniform(1.0, 4.0))
        filler.unlink()
        wait_for(
            lambda: _probe(fc.bootstrap, topic, led[0]) == "NO_ERROR",
            30,
            "writes accepted after space returns",
        )
        probes["after"] = "NO_ERROR"
        # Restart: the log written through the full disk must load cleanly too.
        registered = fc.zk_registration_zxid(victim)
        fc.broker(victim).stop()
        fc.restart(victim, registered)

    report, writer = run_case(fc, rng, fault)
    assert probes == {"full": "KAFKA_STORAGE_ERROR", "after": "NO_ERROR"}
    outcome("disk full on one broker", report, writer)
