"""``strom groups describe`` shows the lag of every partition on a 2-broker ZooKeeper cluster, where a
topic's two partitions are led by different brokers, so one of them is led by a broker that is not the
group's coordinator. A share group's coordinator measures the lag only of partitions it hosts; for the
other one the CLI asks the partition's leader for its high watermark (ListOffsets). A consumer group's
log end offsets come from each leader the same way."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from strom.testing.cluster import LocalCluster
from tests.integration.kip848_clients import wait_until
from tests.integration.share_clients import ShareConsumerProcess
from tests.integration.strom_cli import describe_group, describe_group_once_it_exists

pytestmark = pytest.mark.cluster

TOPIC, SHARE_GROUP, CONSUMER_GROUP = "lagged", "lag-workers", "lag-billing"
FIRST, MORE = 10, 5  # records per partition before and after the share consumer is paused


def produce(bootstrap: str, per_partition: int, start: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 1})
    for i in range(per_partition):
        for partition in (0, 1):
            producer.produce(TOPIC, f"job-{start + i}".encode(), partition=partition)
    assert producer.flush(30) == 0


def share_rows(bootstrap: str) -> list[list[str]] | None:
    """TOPIC, PARTITION, START-OFFSET, LAG, MEMBERS of each partition row of the share group (None
    until the consumer's first heartbeat has created the group)."""
    lines = describe_group_once_it_exists(bootstrap, SHARE_GROUP)
    if lines is None:
        return None
    assert lines[0].startswith(f"Group {SHARE_GROUP}: type share"), lines
    return [line.split()[:5] for line in lines[2:]]


def test_lag_of_partitions_led_by_another_broker_than_the_coordinator(
    make_cluster: Any, tmp_path: Path
) -> None:
    cluster: LocalCluster = make_cluster(
        2,
        offsets_topic_replication_factor="1",
        share_auto_offset_reset="earliest",
        group_share_heartbeat_interval_ms="500",
        # The member is paused while the lag is read: the longest session Kafka allows keeps it in.
        group_share_session_timeout_ms="60000",
    )
    bootstrap = cluster.bootstrap
    first, second = sorted(cluster.brokers)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(TOPIC, 2, replica_assignment=[[first], [second]])])[TOPIC].result(30)
    produce(bootstrap, FIRST, 0)

    consumer = ShareConsumerProcess(
        tmp_path, "share-lag", {"bootstrap": bootstrap, "topics": [TOPIC], "group": SHARE_GROUP}
    )
    try:
        accepted = [[TOPIC, "0", str(FIRST), "0", "1"], [TOPIC, "1", str(FIRST), "0", "1"]]
        # Implicit acknowledgement: a poll's records are accepted with the next poll.
        assert wait_until(lambda: share_rows(bootstrap) == accepted, 60), share_rows(bootstrap)
        os.kill(consumer.proc.pid, signal.SIGSTOP)  # a member that reads no more
        produce(bootstrap, MORE, FIRST)
        behind = [[TOPIC, "0", str(FIRST), str(MORE), "1"], [TOPIC, "1", str(FIRST), str(MORE), "1"]]
        assert share_rows(bootstrap) == behind
    finally:
        consumer.kill()

    member = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": CONSUMER_GROUP, "group.protocol": "consumer",
         "enable.auto.commit": False}
    )  # fmt: skip
    try:
        member.commit(offsets=[TopicPartition(TOPIC, 0, 4), TopicPartition(TOPIC, 1, 3)], asynchronous=False)
    finally:
        member.close()
    end = FIRST + MORE
    rows = [line.split()[:5] for line in describe_group(bootstrap, CONSUMER_GROUP)[2:]]
    assert rows == [
        [TOPIC, "0", "4", str(end), str(end - 4)],
        [TOPIC, "1", "3", str(end), str(end - 3)],
    ], rows
