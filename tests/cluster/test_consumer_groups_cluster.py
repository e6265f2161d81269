"""A KIP-848 consumer group (confluent-kafka, ``group.protocol=consumer``) on three brokers and a real
ZooKeeper: the group coordinator's broker is killed with SIGKILL, the new leader of the group's
`__consumer_offsets` partition rebuilds the group from its records, and the members carry on with the
partitions and epochs they had: no rebalance, every message consumed, every offset committed once."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import ConsumerGroupTopicPartitions, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from strom.testing.cluster import LocalCluster
from tests.cluster.conftest import wait_until
from tests.integration.kip848_clients import Consumer

PARTITIONS = 6
SETTINGS = {
    "offsets_topic_replication_factor": "3",
    "group_consumer_heartbeat_interval_ms": "500",
    "group_consumer_min_heartbeat_interval_ms": "100",
    "group_consumer_session_timeout_ms": "6000",
    "group_consumer_min_session_timeout_ms": "1000",
}


@pytest.fixture
def consumers(tmp_path: Path) -> Iterator[list[Consumer]]:
    started: list[Consumer] = []
    yield started
    for consumer in started:
        consumer.kill()


def produce(bootstrap: str, start: int, count: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    for i in range(start, start + count):
        producer.produce("events", value=str(i).encode(), partition=i % PARTITIONS)
    assert producer.flush(60) == 0


def test_consumer_group_survives_a_coordinator_kill(
    make_cluster: Any, consumers: list[Consumer], tmp_path: Path
) -> None:
    cluster: LocalCluster = make_cluster(3, **SETTINGS)
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic("events", PARTITIONS, 3, config={"min.insync.replicas": "2"})])[
        "events"
    ].result(30)
    produce(cluster.bootstrap, 0, 60)
    for name in ("a", "b"):
        consumers.append(
            Consumer(tmp_path, name, {"bootstrap": cluster.bootstrap, "topics": ["events"], "group": "g"})
        )
    a, b = consumers

    def split() -> bool:
        return (
            a.partitions | b.partitions == set(range(PARTITIONS))
            and len(a.partitions) == len(b.partitions) == 3
        )

    wait_until(split, 60, "the two members to share the partitions")
    wait_until(lambda: len({m for c in consumers for m in c.messages()}) == 60, 60, "the first 60 messages")
    before = admin.describe_consumer_groups(["g"])["g"].result(15)
    assert before.type.name == "CONSUMER" and before.state.name == "STABLE"
    coordinator = before.coordinator.id
    owned = {"a": a.partitions, "b": b.partitions}

    cluster.brokers[coordinator].kill()
    produce(cluster.bootstrap, 60, 60)
    wait_until(lambda: len({m for c in consumers for m in c.messages()}) == 120, 90, "the next 60 messages")
    after = admin.describe_consumer_groups(["g"])["g"].result(15)
    assert after.coordinator.id != coordinator
    assert after.state.name == "STABLE" and len(after.members) == 2
    # No rebalance: each member kept exactly its partitions through the fail-over.
    assert a.partitions == owned["a"] and b.partitions == owned["b"]
    assert not a.lost_partitions() and not b.lost_partitions()
    commits = Counter(m for c in consumers for m in c.committed())
    assert max(commits.values()) == 1
    request = ConsumerGroupTopicPartitions("g", [TopicPartition("events", p) for p in range(PARTITIONS)])
    committed = admin.list_consumer_group_offsets([request])["g"].result(15)
    assert sorted((tp.partition, tp.offset) for tp in committed.topic_partitions) == [
        (p, 20) for p in range(PARTITIONS)
    ]
    for consumer in consumers:
        consumer.terminate()
