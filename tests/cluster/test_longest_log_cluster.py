"""Both ISR members of a partition restart, one of them having lost its unsynced tail: on a real
three-broker cluster over ZooKeeper, driven by confluent-kafka, the controller waits for both, asks
each where its log ends (their LeaderAndIsr answers) and elects the furthest, so no acknowledged
record is lost. The lost tail is made by hand: the log file is cut at a batch boundary while the
broker is down, as a machine crash that took the page cache would leave it."""

from __future__ import annotations

import signal
import time
from pathlib import Path
from typing import Any

from confluent_kafka.admin import AdminClient, NewTopic

from strom.testing.cluster import LocalCluster

from .conftest import partitions_of, produce_values, read_values, wait_until

TOPIC = "longest"


def _cut_from(segment: Path, offset: int) -> None:
    """Drop every record batch from the first one at ``offset`` on (base offset, then length, as
    stored)."""
    data = segment.read_bytes()
    position = 0
    while position + 12 <= len(data):
        if int.from_bytes(data[position : position + 8], "big") >= offset:
            break
        position += 12 + int.from_bytes(data[position + 8 : position + 12], "big")
    assert 0 < position < len(data), (position, len(data))
    with segment.open("r+b") as f:
        f.truncate(position)


def test_the_longest_log_leads_when_every_isr_member_restarted(make_cluster: Any) -> None:
    cluster: LocalCluster = make_cluster(3)  # ZooKeeper sessions of 3 s
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    controller = admin.describe_cluster().result(30).controller
    short, long_ = [b for b in sorted(cluster.brokers) if b != controller.id]
    topic = NewTopic(TOPIC, 1, replica_assignment=[[short, long_]], config={"min.insync.replicas": "2"})
    admin.create_topics([topic])[TOPIC].result(30)
    wait_until(lambda: partitions_of(cluster.bootstrap, TOPIC)[0][0] == short, 30, "a leader")
    produce_values(cluster.bootstrap, TOPIC, range(100))
    produce_values(
        cluster.bootstrap, TOPIC, range(100, 120)
    )  # batches of their own: the tail one broker loses

    # Both replicas die while the controller is stopped, so that its successor (itself, once its own
    # session expired) finds the partition's leader gone with both members in the ISR.
    cluster.brokers[controller.id].signal(signal.SIGSTOP)
    try:
        cluster.brokers[short].kill()
        cluster.brokers[long_].kill()
        time.sleep(6)  # every session expires
    finally:
        cluster.brokers[controller.id].signal(signal.SIGCONT)
    wait_until(lambda: partitions_of(cluster.bootstrap, TOPIC)[0][0] == -1, 60, "no leader")
    _cut_from(cluster.brokers[short].data_dir / "logs" / f"{TOPIC}-0" / f"{0:020d}.log", 100)

    # The whole one comes back first: restarted, it may have lost writes, so the partition waits for
    # the other member; that one comes back restarted too, with 100 records against 120.
    cluster.brokers[long_].start()
    wait_until(lambda: partitions_of(cluster.bootstrap, TOPIC)[0][2] == [short], 60, "ISR = [short]")
    assert partitions_of(cluster.bootstrap, TOPIC)[0][0] == -1
    cluster.brokers[short].start()
    wait_until(lambda: partitions_of(cluster.bootstrap, TOPIC)[0][0] == long_, 60, "the longest log leads")
    assert read_values(cluster.bootstrap, TOPIC, 120) == list(range(120))
