"""ZooKeeper stopped for 30 s and restarted.

During the outage the existing leaders keep acknowledging acks=all writes (their ISRs stay whole, so no
ZooKeeper write is needed) and serve reads; after the restart the brokers' sessions resume or are
re-established, controller work resumes (a topic created afterwards gets leaders), and no broker stays
fenced: every broker registered, every ISR whole again.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable

import pytest
from confluent_kafka import KafkaError, KafkaException

from tests.faults.harness import FaultCluster, run_case
from tests.faults.workload import Writer, create_topic, read_back

pytestmark = pytest.mark.faults

OUTAGE_S = 30.0


def _outage(fc: FaultCluster, rng: random.Random, topic: str, writer: Writer) -> None:
    fc.zookeeper.stop()
    try:
        start = time.monotonic()
        time.sleep(rng.uniform(2.0, 5.0))
        before = writer.acked_count()
        served = read_back(fc.bootstrap, topic, 3, timeout_s=20)
        assert len(served) >= before, f"during the outage only {len(served)} of {before} records were read"
        time.sleep(max(0.0, OUTAGE_S - 2.0 - (time.monotonic() - start)))
        during = writer.acked_count() - before
        assert during >= 100, f"only {during} writes acknowledged while ZooKeeper was down; {writer.errors}"
        time.sleep(max(0.0, OUTAGE_S - (time.monotonic() - start)))
    finally:
        fc.zookeeper.start()
    # Controller work resumes: a new topic is created in ZooKeeper and the controller gives it leaders.
    # The brokers reconnect within about a second of ZooKeeper's return; until then the request fails
    # and, as any client would, the test retries it (bounded).
    extra = f"{topic}-after"
    deadline = time.monotonic() + 30
    while True:
        try:
            create_topic(fc.bootstrap, extra, 3, 3, min_insync_replicas="2")
            break
        except KafkaException as exc:
            if exc.args[0].code() == KafkaError.TOPIC_ALREADY_EXISTS:
                break
            if time.monotonic() > deadline:
                raise
            time.sleep(1.0)
    fc.wait_converged(extra, 60)


def test_zookeeper_stopped_30s(
    fault_cluster: FaultCluster, rng: random.Random, outcome: Callable[..., None]
) -> None:
    report, writer = run_case(fault_cluster, rng, _outage)
    outcome("ZooKeeper down 30 s", report, writer)
