"""Network partitions between namespaces: a leader, a broker's ZooKeeper link, a follower; then healing.

Each case cuts links with nftables drop rules inside one broker's namespace for a random time longer than
the ZooKeeper session (3 s) or replica.lag.time.max.ms (4 s), heals, and hands everything acknowledged
and read back to the checker (tests/faults/harness.py).
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable

import pytest

from tests.faults.harness import FaultCluster, run_case, wait_for
from tests.faults.workload import Writer

pytestmark = pytest.mark.faults


def _leader_isolated(fc: FaultCluster, rng: random.Random, topic: str, _writer: Writer) -> None:
    """The leader of partition 0 loses its followers and ZooKeeper; clients still reach it."""
    leader = fc.leader_of(topic, 0)
    others = [n for i, n in fc.nodes.items() if i != leader]
    fc.lab.cut(fc.nodes[leader], fc.zk_node, *others)
    # Its session expires, the controller elects another leader from the ISR.
    wait_for(
        lambda: fc.zk_partition_state(topic, 0)[0] not in (leader, -1), 30, "a new leader of partition 0"
    )
    time.sleep(rng.uniform(0.0, 4.0))
    fc.lab.heal()


def _cut_from_zookeeper(fc: FaultCluster, rng: random.Random, topic: str, _writer: Writer) -> None:
    """One broker loses ZooKeeper only: its session expires, the controller fences it, it comes back."""
    victim = rng.choice([fc.leader_of(topic, 0), fc.controller_id(), rng.choice(sorted(fc.nodes))])
    fc.lab.cut(fc.nodes[victim], fc.zk_node)
    wait_for(lambda: victim not in fc.zk_registered(), 30, f"broker {victim}'s session to expire")
    time.sleep(rng.uniform(0.0, 4.0))
    fc.lab.heal()


def _follower_cut_from_leader(fc: FaultCluster, rng: random.Random, topic: str, _writer: Writer) -> None:
    """A follower of partition 0 cannot reach its leader; it leaves the ISR, then rejoins."""
    md = fc.metadata(topic).topics[topic].partitions[0]
    follower = rng.choice([r for r in md.replicas if r != md.leader])
    fc.lab.cut(fc.nodes[follower], fc.nodes[md.leader])
    wait_for(lambda: follower not in fc.zk_partition_state(topic, 0)[1], 30, f"{follower} to leave the ISR")
    time.sleep(rng.uniform(0.0, 4.0))
    fc.lab.heal()


def test_leader_cut_off_from_followers_and_zookeeper(
    fault_cluster: FaultCluster, rng: random.Random, outcome: Callable[..., None]
) -> None:
    report, writer = run_case(fault_cluster, rng, _leader_isolated)
    outcome("partition: leader isolated", report, writer)


def test_broker_cut_off_from_zookeeper(
    fault_cluster: FaultCluster, rng: random.Random, outcome: Callable[..., None]
) -> None:
    report, writer = run_case(fault_cluster, rng, _cut_from_zookeeper)
    outcome("partition: broker-zookeeper", report, writer)


def test_follower_cut_off_from_leader(
    fault_cluster: FaultCluster, rng: random.Random, outcome: Callable[..., None]
) -> None:
    report, writer = run_case(fault_cluster, rng, _follower_cut_from_leader)
    outcome("partition: follower-leader", report, writer)
