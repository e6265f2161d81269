"""Fixtures for the cluster suite: a real ZooKeeper (Debian package) and real broker processes."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from strom.testing.cluster import LocalCluster
from tests.prerequisites import require_zookeeper

pytestmark = pytest.mark.cluster

FAST = {
    "zookeeper.session.timeout.ms": "3000",
    "offsets.topic.num.partitions": "3",
    "group.initial.rebalance.delay.ms": "0",
    "replica.lag.time.max.ms": "10000",
}


@pytest.fixture
def make_cluster(tmp_path: Path) -> Iterator[Callable[..., LocalCluster]]:
    require_zookeeper()
    started: list[LocalCluster] = []

    def make(brokers: int = 3, racks: int = 0, **overrides: str) -> LocalCluster:
        settings = {**FAST, **{k.replace("_", "."): v for k, v in overrides.items()}}
        cluster = LocalCluster(tmp_path / f"cluster{len(started)}", brokers, racks, settings)
        started.append(cluster)
        cluster.start()
        return cluster

    yield make
    for cluster in started:
        cluster.stop()


def wait_until(condition: Callable[[], object], timeout_s: float = 30.0, what: str = "condition") -> object:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            value = condition()
        except Exception:
            value = None
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")


def partitions_of(bootstrap: str, topic: str) -> dict[int, tuple[int, list[int], list[int]]]:
    """partition -> (leader, replicas, isr) as Metadata reports them."""
    md = AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=10)
    return {p.id: (p.leader, list(p.replicas), list(p.isrs)) for p in md.topics[topic].partitions.values()}


def new_leader(bootstrap: str, topic: str, old: int, timeout_s: float = 60, partition: int = 0) -> int:
    """The leader of ``topic``'s ``partition`` once Metadata names one other than ``old``."""
    lead = wait_until(
        lambda: (n := partitions_of(bootstrap, topic)[partition][0]) not in (-1, old) and n,
        timeout_s,
        f"a new leader of {topic}-{partition}",
    )
    assert isinstance(lead, int)
    return lead


def produce_values(bootstrap: str, topic: str, values: range) -> None:
    """Each value as a record of partition 0's topic, acks=all and idempotent; all acknowledged."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True})
    failed: list[object] = []
    for value in values:
        producer.produce(topic, value=str(value), on_delivery=lambda err, _m: err and failed.append(err))
    assert producer.flush(30) == 0 and failed == []


def read_values(bootstrap: str, topic: str, count: int, timeout_s: float = 60) -> list[int]:
    """Up to ``count`` values of partition 0 from its start, in order."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "check", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, 0)])
    found: list[int] = []
    deadline = time.monotonic() + timeout_s
    while len(found) < count and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None and not msg.error():
            found.append(int(msg.value()))
    consumer.close()
    return found
