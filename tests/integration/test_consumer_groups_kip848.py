"""KIP-848 consumer groups on one node with confluent-kafka (``group.protocol=consumer``) over TCP.

A group forms, a member joins and the others keep their partitions (incremental reconciliation: they
revoke only what the newcomer gets), a killed member's partitions go to the survivors after the
session timeout, a member that closes leaves at once, and every offset is committed exactly once across
all of it. ConsumerGroupDescribe (AdminClient.describe_consumer_groups) reports the group's type,
state and members.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer as CkConsumer
from confluent_kafka import ConsumerGroupTopicPartitions, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from strom.testing import BrokerProcess
from tests.integration.kip848_clients import Consumer, wait_until
from tests.integration.rdkafka_debug import ProtocolLog

SESSION_TIMEOUT_MS = 6000
PARTITIONS = 6
CONFIGS = {
    "group.consumer.heartbeat.interval.ms": "500",
    "group.consumer.min.heartbeat.interval.ms": "100",
    "group.consumer.session.timeout.ms": str(SESSION_TIMEOUT_MS),
    "group.consumer.min.session.timeout.ms": "1000",
}


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    proc = BrokerProcess(tmp_path_factory.mktemp("broker") / "data", CONFIGS)
    proc.start()
    try:
        yield proc
    finally:
        proc.stop()


@pytest.fixture
def spawn(tmp_path: Path) -> Iterator[Callable[..., Consumer]]:
    consumers: list[Consumer] = []

    def start(bootstrap: str, topics: list[str], group: str, **cfg: Any) -> Consumer:
        config = {"bootstrap": bootstrap, "topics": topics, "group": group, **cfg}
        consumer = Consumer(tmp_path, f"consumer-{len(consumers)}", config)
        consumers.append(consumer)
        return consumer

    yield start
    for consumer in consumers:
        consumer.kill()


def make_topic(bootstrap: str, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result(15)


def produce(bootstrap: str, topic: str, per_partition: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(per_partition * PARTITIONS):
        producer.produce(topic, value=f"v{i}".encode(), partition=i % PARTITIONS)
    assert producer.flush(15) == 0


def owned(consumers: list[Consumer]) -> list[set[int]]:
    return [c.partitions for c in consumers]


def split(consumers: list[Consumer]) -> bool:
    """Every partition owned by exactly one consumer, sizes within one of each other."""
    parts = owned(consumers)
    sizes = [len(p) for p in parts]
    union = set().union(*parts)
    return union == set(range(PARTITIONS)) and sum(sizes) == PARTITIONS and max(sizes) - min(sizes) <= 1


def consumed(consumers: list[Consumer]) -> set[tuple[int, int]]:
    return {m for c in consumers for m in c.messages()}


@pytest.mark.slow
def test_incremental_rebalance_kill_leave_and_exactly_once_commits(
    broker: BrokerProcess, topic_name: str, spawn: Callable[..., Consumer]
) -> None:
    bootstrap = broker.bootstrap
    make_topic(bootstrap, topic_name)
    group = f"g-{topic_name}"
    produce(bootstrap, topic_name, 10)
    a = spawn(bootstrap, [topic_name], group)
    assert wait_until(lambda: a.partitions == set(range(PARTITIONS)), 40), a.snapshot()[-5:]
    assert wait_until(lambda: len(consumed([a])) == 60, 30)

    # A second member: a gives up only what b gets, and keeps consuming the rest.
    b = spawn(bootstrap, [topic_name], group)
    assert wait_until(lambda: split([a, b]), 40), owned([a, b])
    assert a.revoked() == b.partitions and not a.lost_partitions()
    produce(bootstrap, topic_name, 10)
    assert wait_until(lambda: len(consumed([a, b])) == 120, 30)

    # A third one, then it is killed: after the session timeout the others get its partitions back,
    # without losing theirs.
    c = spawn(bootstrap, [topic_name], group)
    assert wait_until(lambda: split([a, b, c]) and all(owned([a, b, c])), 40), owned([a, b, c])
    kept = {"a": a.partitions, "b": b.partitions}
    c.kill()
    killed_at = time.monotonic()
    assert wait_until(lambda: split([a, b]), SESSION_TIMEOUT_MS / 1000 + 15), owned([a, b])
    assert time.monotonic() - killed_at < SESSION_TIMEOUT_MS / 1000 + 10
    assert kept["a"] <= a.partitions and kept["b"] <= b.partitions
    assert not a.lost_partitions() and not b.lost_partitions()

    # b closes: it leaves with epoch -1 and a owns everything again well before a session timeout.
    b.terminate()
    left_at = time.monotonic()
    assert wait_until(lambda: a.partitions == set(range(PARTITIONS)), 15), a.partitions
    assert time.monotonic() - left_at < SESSION_TIMEOUT_MS / 1000
    produce(bootstrap, topic_name, 10)
    assert wait_until(lambda: len(consumed([a, b, c])) == 180, 30)

    # Exactly once: no offset committed by two members (a member commits only what it owns), and the
    # group's committed offsets are the ends of the partitions.
    commits = Counter(m for x in (a, b, c) for m in x.committed())
    assert max(commits.values()) == 1, [m for m, n in commits.items() if n > 1]
    admin = AdminClient({"bootstrap.servers": bootstrap})
    request = ConsumerGroupTopicPartitions(group, [TopicPartition(topic_name, p) for p in range(PARTITIONS)])
    result = admin.list_consumer_group_offsets([request])[group].result(15)
    assert sorted((tp.partition, tp.offset) for tp in result.topic_partitions) == [
        (p, 30) for p in range(PARTITIONS)
    ]

    # ConsumerGroupDescribe: one consumer group member, Stable, all partitions.
    described = admin.describe_consumer_groups([group])[group].result(15)
    assert described.state.name == "STABLE"
    assert described.type.name == "CONSUMER"
    assert len(described.members) == 1
    assert {tp.partition for tp in described.members[0].assignment.topic_partitions} == set(range(PARTITIONS))
    a.terminate()


@pytest.mark.slow
def test_regular_expression_subscription_picks_up_a_new_topic(
    broker: BrokerProcess, topic_name: str, spawn: Callable[..., Consumer]
) -> None:
    bootstrap = broker.bootstrap
    make_topic(bootstrap, f"{topic_name}-one")
    a = spawn(bootstrap, [f"^{topic_name}-.*"], f"g-{topic_name}")
    assert wait_until(lambda: a.partitions == set(range(PARTITIONS)), 40), a.snapshot()[-5:]
    make_topic(bootstrap, f"{topic_name}-two")
    produce(bootstrap, f"{topic_name}-two", 2)
    topics = lambda: {e["t"] for e in a.snapshot() if e["ev"] == "msg"}  # noqa: E731
    assert wait_until(lambda: f"{topic_name}-two" in topics(), 40), a.snapshot()[-5:]
    a.terminate()


def test_offset_fetch_v9_with_member_epoch_resumes_from_commits(
    broker: BrokerProcess, topic_name: str
) -> None:
    """librdkafka's consumer-protocol member fetches its committed offsets with OffsetFetch v9 (member
    id and epoch, checked by the broker): a second member of the group resumes exactly where the first
    one's commits ended, so every record is read once across the two."""
    bootstrap = broker.bootstrap
    make_topic(bootstrap, topic_name)
    produce(bootstrap, topic_name, 3)
    group = f"g-{topic_name}"
    log = ProtocolLog()
    read: list[tuple[int, int]] = []
    for share in (PARTITIONS * 3 // 2, PARTITIONS * 3 // 2):
        consumer = CkConsumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": group,
                "group.protocol": "consumer",
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
                "debug": "protocol,cgrp",
                "logger": log.logger(),
            }
        )
        try:
            consumer.subscribe([topic_name])
            mine: list[tuple[int, int]] = []
            deadline = time.monotonic() + 40
            while len(mine) < share and time.monotonic() < deadline:
                msg = consumer.poll(0.2)
                if msg is None or msg.error():
                    continue
                mine.append((msg.partition(), msg.offset()))
                consumer.commit(message=msg, asynchronous=False)
            read += mine
        finally:
            consumer.close()
    assert sorted(read) == [(p, o) for p in range(PARTITIONS) for o in range(3)]
    sent = log.sent("OffsetFetch")
    assert sent and all("(v9," in line for line in sent), sent[:3]
