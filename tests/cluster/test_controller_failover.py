"""Fail-over with a few hundred partitions: the controller batches its ZooKeeper work and sends
UpdateMetadata deltas, and after kill -9 of the controller and then of another broker every broker
answers Metadata alike (same leaders, ISRs, replicas; every leader alive), while a confluent-kafka
producer (acks=all, idempotent) and consumer lose nothing. Real ZooKeeper, real broker processes."""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from strom.testing.cluster import LocalCluster, PartitionView, broker_metadata

from .conftest import wait_until

pytestmark = pytest.mark.cluster

TOPICS, PARTITIONS = 30, 10  # 300 partitions at replication factor 3


def _converged(cluster: LocalCluster, dead: set[int]) -> PartitionView | None:
    """The one view every live broker answers, if they agree and every partition has a live leader."""
    views = [broker_metadata(proc.bootstrap)[1] for b, proc in cluster.brokers.items() if b not in dead]
    first = views[0]
    if len(first) < TOPICS * PARTITIONS or any(view != first for view in views[1:]):
        return None
    if any(leader < 0 or leader in dead for leader, _, _ in first.values()):
        return None
    return first


def _produce(bootstrap: str, names: list[str], tag: str) -> set[bytes]:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True})
    values = set()
    for name in names:
        for partition in range(PARTITIONS):
            value = f"{tag}/{name}/{partition}".encode()
            producer.produce(name, value, partition=partition)
            values.add(value)
        producer.poll(0)
    assert producer.flush(90) == 0
    return values


def _consume_all(bootstrap: str, names: list[str], expected: int) -> list[bytes]:
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "failover-check", "enable.auto.commit": False}
    )
    consumer.assign([TopicPartition(n, p, 0) for n in names for p in range(PARTITIONS)])
    seen: list[bytes] = []

    def done() -> bool:
        seen.extend(m.value() for m in consumer.consume(1000, timeout=1.0) if m.error() is None)
        return len(seen) >= expected

    wait_until(done, 90, "every record consumed")
    seen.extend(m.value() for m in consumer.consume(1000, timeout=1.0) if m.error() is None)
    consumer.close()
    return seen


def test_controller_and_broker_kill_converge_every_brokers_metadata(make_cluster: Any) -> None:
    cluster = make_cluster(3, auto_leader_rebalance_enable="false")
    names = [f"fo{i:02d}" for i in range(TOPICS)]
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    for future in admin.create_topics([NewTopic(n, PARTITIONS, 3) for n in names]).values():
        future.result(timeout=60)
    before = wait_until(lambda: _converged(cluster, set()), 60, "all brokers agree after creation")
    assert all(len(isr) == 3 for _, isr, _ in before.values())
    sent = _produce(cluster.bootstrap, names, "before")

    controller = broker_metadata(cluster.brokers[0].bootstrap)[0]
    cluster.brokers[controller].kill()
    after_controller = wait_until(
        lambda: _converged(cluster, {controller}), 60, "all brokers agree after the controller died"
    )
    assert all(controller not in isr for _, isr, _ in after_controller.values())
    survivor = next(b for b in cluster.brokers if b != controller)
    assert broker_metadata(cluster.brokers[survivor].bootstrap)[0] not in (-1, controller)
    sent |= _produce(cluster.brokers[survivor].bootstrap, names, "after-controller")

    cluster.brokers[controller].start()  # a full UpdateMetadata brings it back; then deltas again
    wait_until(
        lambda: (v := _converged(cluster, set())) and all(len(isr) == 3 for _, isr, _ in v.values()),
        90,
        "the old controller back in every ISR, every broker agreeing",
    )
    new_controller = broker_metadata(cluster.brokers[survivor].bootstrap)[0]
    victim = next(
        b
        for b in cluster.brokers
        if b != new_controller and any(lead == b for lead, _, _ in after_controller.values())
    )
    cluster.brokers[victim].kill()
    after_broker = wait_until(
        lambda: _converged(cluster, {victim}), 60, "all brokers agree after a leader died"
    )
    assert all(victim not in isr for _, isr, _ in after_broker.values())
    survivor = next(b for b in cluster.brokers if b != victim)
    sent |= _produce(cluster.brokers[survivor].bootstrap, names, "after-broker")

    seen = _consume_all(cluster.brokers[survivor].bootstrap, names, len(sent))
    assert sorted(seen) == sorted(sent)  # every acknowledged record, each exactly once
