"""KIP-966's eligible leader replicas on a real three-broker cluster over ZooKeeper, driven by
confluent-kafka: a follower taken out of an ISR below min ISR (its ZooKeeper session expired while its
process was stopped) leads once the last ISR member is gone, with every acknowledged record, instead
of the partition staying offline until that member returns."""

from __future__ import annotations

import signal
from typing import Any

from strom.testing.cluster import LocalCluster

from .conftest import partitions_of, produce_values, read_values, wait_until
from .test_cluster import create_topic


def test_an_eligible_replica_leads_when_the_last_isr_member_dies(make_cluster: Any) -> None:
    cluster: LocalCluster = make_cluster(3)  # ZooKeeper sessions of 3 s
    create_topic(cluster.bootstrap, "elr", 1, 3, **{"min.insync.replicas": "2"})
    leader, replicas, _ = partitions_of(cluster.bootstrap, "elr")[0]
    first, second = [b for b in replicas if b != leader]
    produce_values(cluster.bootstrap, "elr", range(100))
    cluster.brokers[second].kill()
    wait_until(lambda: sorted(partitions_of(cluster.bootstrap, "elr")[0][2]) == sorted([leader, first]), 30)
    produce_values(
        cluster.bootstrap, "elr", range(100, 200)
    )  # acknowledged by the leader and the first follower
    cluster.brokers[first].signal(signal.SIGSTOP)
    try:
        # Its session expires: the controller takes it out of the ISR, now below min ISR: eligible.
        wait_until(lambda: partitions_of(cluster.bootstrap, "elr")[0][2] == [leader], 30, "ISR = leader")
        cluster.brokers[leader].kill()  # the last ISR member
    finally:
        cluster.brokers[first].signal(signal.SIGCONT)
    # The same process registers again (a renewal): it leads, instead of waiting for the dead leader.
    wait_until(
        lambda: partitions_of(cluster.bootstrap, "elr")[0][0] == first, 60, "the eligible replica leads"
    )
    assert read_values(cluster.bootstrap, "elr", 200) == list(range(200))
