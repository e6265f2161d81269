"""Tiered storage on a 3-broker cluster (ZooKeeper, three broker processes, one SeaweedFS bucket): the
leader copies and deletes locally, it is killed with SIGKILL, the new leader loads what is remote from
``__remote_log_metadata`` (written to its partitions' leaders over the network) and carries on copying
from there; every record reads back from offset 0 through the new leader, byte for byte."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from strom.testing.seaweedfs_process import SeaweedS3Process
from tests.cluster.conftest import new_leader, partitions_of, wait_until
from tests.cluster.tiered import create_tiered_topic, local_start, produce, seaweedfs, tiered_settings
from tests.integration.clients import make_client

__all__ = ["seaweedfs"]

TOPIC = "tiered-cluster"


def test_a_new_leader_carries_on_from_the_remote_metadata(
    make_cluster: Callable[..., Any], seaweedfs: SeaweedS3Process
) -> None:
    cluster = make_cluster(3, **tiered_settings(seaweedfs, metadata_partitions=3))
    create_tiered_topic(cluster.bootstrap, TOPIC, 1, segment_bytes=16384, local_retention_bytes=16384)
    first = [b"a%06d:" % i + b"x" * 90 for i in range(1200)]
    produce(cluster.bootstrap, TOPIC, first)
    leader = partitions_of(cluster.bootstrap, TOPIC)[0][0]
    wait_until(lambda: local_start(cluster.brokers[leader], TOPIC) > 500, 60, "the leader's first copies")

    cluster.brokers[leader].kill()
    successor = new_leader(cluster.bootstrap, TOPIC, leader)
    second = [b"b%06d:" % i + b"y" * 90 for i in range(1200)]
    produce(cluster.bootstrap, TOPIC, second)
    wait_until(lambda: local_start(cluster.brokers[successor], TOPIC) > 1800, 90, "the new leader's copies")

    got = make_client("confluent-kafka", cluster.bootstrap).consume(TOPIC, 0, 0, 2400, timeout_s=90)
    assert [r.offset for r in got] == list(range(2400))
    assert [r.value for r in got] == first + second
