"""Process faults at random moments: kill -9 of a leader, a follower, the controller; SIGSTOP/SIGCONT;
and two brokers lost at once with RF 3 and min.insync.replicas=2 (writes refused, never acknowledged
and then lost).

The victim, the moment (the writer has been running 0.5-2 s) and the downtime are drawn from the run's
seed; the brokers run in their namespaces like every case of the suite (tests/faults/harness.py).
"""

from __future__ import annotations

import random
import signal
import time
from collections.abc import Callable

import pytest

from tests.faults.harness import Fault, FaultCluster, run_case, wait_for
from tests.faults.workload import Writer

pytestmark = pytest.mark.faults


def _victim(fc: FaultCluster, rng: random.Random, topic: str, role: str) -> int:
    partition = rng.randrange(3)
    if role == "controller":
        return fc.controller_id()
    md = fc.metadata(topic).topics[topic].partitions[partition]
    if role == "leader":
        return int(md.leader)
    return rng.choice([r for r in md.replicas if r != md.leader])


def _kill_and_restart(role: str) -> Fault:
    def fault(fc: FaultCluster, rng: random.Random, topic: str, _writer: Writer) -> None:
        victim = _victim(fc, rng, topic, role)
        registered = fc.zk_registration_zxid(victim)
        fc.broker(victim).kill()
        time.sleep(rng.uniform(0.5, 6.0))
        fc.restart(victim, registered)

    return fault


def _pause(fc: FaultCluster, rng: random.Random, topic: str, _writer: Writer) -> None:
    """SIGSTOP for 1-8 s: shorter or longer than the ZooKeeper session (3 s) and the ISR lag (4 s)."""
    victim = _victim(fc, rng, topic, rng.choice(["leader", "follower", "controller"]))
    fc.broker(victim).signal(signal.SIGSTOP)
    try:
        time.sleep(rng.uniform(1.0, 8.0))
    finally:
        fc.broker(victim).signal(signal.SIGCONT)


@pytest.mark.parametrize("role", ["leader", "follower", "controller"])
def test_kill9(
    role: str, fault_cluster: FaultCluster, rng: random.Random, outcome: Callable[..., None]
) -> None:
    report, writer = run_case(fault_cluster, rng, _kill_and_restart(role))
    outcome(f"kill -9 {role}", report, writer)


def test_sigstop_sigcont(
    fault_cluster: FaultCluster, rng: random.Random, outcome: Callable[..., None]
) -> None:
    report, writer = run_case(fault_cluster, rng, _pause)
    outcome("SIGSTOP/SIGCONT", report, writer)


def test_two_brokers_lost_at_once(
    fault_cluster: FaultCluster, rng: random.Random, outcome: Callable[..., None]
) -> None:
    """With two of three replicas gone no write may be acknowledged, and none acknowledged before is lost."""
    acked_during_outage: list[int] = []

    def fault(fc: FaultCluster, rng: random.Random, topic: str, writer: Writer) -> None:
        victims = rng.sample(sorted(fc.nodes), 2)
        survivor = next(i for i in fc.nodes if i not in victims)
        registered = {v: fc.zk_registration_zxid(v) for v in victims}
        for victim in victims:
            fc.broker(victim).kill()
        # Responses already on the wire may still arrive; after that nothing can be acknowledged.
        time.sleep(1.0)
        before = writer.acked_count()
        wait_for(
            lambda: all(fc.zk_partition_state(topic, p)[1] == [survivor] for p in range(3)),
            30,
            f"every ISR to shrink to the survivor {survivor}",
        )
        time.sleep(rng.uniform(0.0, 4.0))
        acked_during_outage.append(writer.acked_count() - before)
        for victim in victims:
            fc.restart(victim, registered[victim])

    report, writer = run_case(fault_cluster, rng, fault)
    assert acked_during_outage == [0], f"writes acknowledged with one replica of three: {acked_during_outage}"
    outcome("two brokers lost (RF 3, min ISR 2)", report, writer)
