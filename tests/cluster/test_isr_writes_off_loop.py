"""A leader's ISR change waits for ZooKeeper off the event loop: with ZooKeeper paused (SIGSTOP) when the
leader shrinks the ISR of a partition whose follower stopped, another connection's Metadata is still
answered at once, and the shrink is stored once ZooKeeper runs again (before, the conditional write of
the partition state znode ran on the event loop and held every connection of the leader until
ZooKeeper answered)."""

from __future__ import annotations

import os
import signal
import time
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from strom.protocol.api import ApiKey
from strom.testing.cluster import LocalCluster
from tests.cluster.conftest import partitions_of, wait_until
from tests.integration.rawclient import RawClient

pytestmark = pytest.mark.cluster

LAG_MS = 500  # replica.lag.time.max.ms: the leader checks every 250 ms
PROPOSED = "shrink-0: proposing ISR [0, 1] -> [0]"
STORED = "shrink-0: ISR [0, 1] -> [0] stored"


def test_an_isr_shrink_does_not_stall_the_leader(make_cluster: Any) -> None:
    cluster: LocalCluster = make_cluster(
        2, zookeeper_session_timeout_ms="6000", replica_lag_time_max_ms=str(LAG_MS)
    )
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic("shrink", 1, replica_assignment=[[0, 1]])])["shrink"].result(30)
    wait_until(lambda: sorted(partitions_of(cluster.bootstrap, "shrink")[0][2]) == [0, 1], 30, "ISR [0, 1]")
    leader, follower = cluster.brokers[0], cluster.brokers[1]
    zk_pid = cluster.zookeeper.pid
    assert zk_pid is not None
    os.kill(zk_pid, signal.SIGSTOP)
    follower.signal(signal.SIGSTOP)
    try:
        # Follower 1 lags past 500 ms: the leader proposes the shrink, whose write waits for ZooKeeper.
        wait_until(lambda: PROPOSED in leader.log_tail(200), 3, "the leader to propose the shrink")
        with RawClient(leader.bootstrap, timeout_s=10) as raw:
            started = time.monotonic()
            metadata = raw.call(ApiKey.METADATA, 1, {"topics": None})
            took_s = time.monotonic() - started
        assert metadata["brokers"], metadata
        assert took_s < 0.8, f"Metadata took {took_s:.2f} s while the ISR write waited for ZooKeeper"
        assert STORED not in leader.log_tail(200), "the shrink was stored while ZooKeeper was paused"
    finally:
        os.kill(zk_pid, signal.SIGCONT)
    try:
        wait_until(lambda: STORED in leader.log_tail(200), 30, "the shrink to be stored")
    finally:
        follower.signal(signal.SIGCONT)
