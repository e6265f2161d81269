"""Offline conversion between a classic group and a KIP-848 consumer group on a real broker over TCP, as
Kafka 4 converts an empty group whatever ``group.consumer.migration.policy`` says: a kafka-python
(classic) group commits and leaves; a confluent-kafka ``group.protocol=consumer`` consumer of the same
group id goes on from the committed offsets (the group is a consumer group now); it leaves and a classic
consumer goes on from its commits (a classic group again). ListGroups v5 reports the type each time,
and a consumer group refuses a classic member whose subscription it cannot read. (Groups with members
convert online: test_group_migration.py.)"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaConsumer

from strom.protocol.api import ApiKey
from strom.protocol.errors import ErrorCode
from strom.testing import BrokerProcess
from tests.integration.kip848_clients import classic_join_body
from tests.integration.rawclient import RawClient
from tests.integration.test_consumer_group_protocol import heartbeat

PARTITIONS = 2


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    proc = BrokerProcess(
        tmp_path_factory.mktemp("conversion") / "data",
        {
            "group.initial.rebalance.delay.ms": "0",
            "group.consumer.heartbeat.interval.ms": "500",
            "group.consumer.min.heartbeat.interval.ms": "100",
        },
    )
    proc.start()
    try:
        yield proc
    finally:
        proc.stop()


def _produce(bootstrap: str, topic: str, values: list[bytes]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap})
    for i, value in enumerate(values):
        producer.produce(topic, value, partition=i % PARTITIONS)
    assert producer.flush(30) == 0


def _classic_read(bootstrap: str, topic: str, group: str, expected: int) -> list[bytes]:
    consumer = KafkaConsumer(
        topic,
        bootstrap_servers=bootstrap,
        group_id=group,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
    )
    got: list[bytes] = []
    try:
        deadline = time.monotonic() + 60
        while len(got) < expected and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=500).values():
                got.extend(r.value for r in records)
        time.sleep(0.5)  # nothing more arrives
        for records in consumer.poll(timeout_ms=500).values():
            got.extend(r.value for r in records)
        consumer.commit()
    finally:
        consumer.close()  # leaves the group: it is empty now
    return got


def _consumer_read(bootstrap: str, topic: str, group: str, expected: int) -> list[bytes]:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "group.protocol": "consumer",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    consumer.subscribe([topic])
    got: list[bytes] = []
    try:
        deadline = time.monotonic() + 60
        while len(got) < expected and time.monotonic() < deadline:
            for message in consumer.consume(100, 0.5):
                assert message.error() is None, message.error()
                value = message.value()
                assert value is not None
                got.append(value)
        for message in consumer.consume(100, 1.0):
            value = message.value()
            assert value is not None
            got.append(value)
        consumer.commit(asynchronous=False)
    finally:
        consumer.close()
    return got


def group_type(bootstrap: str, group: str) -> list[tuple[str, str]]:
    with RawClient(bootstrap) as raw:
        listed: Any = raw.call(ApiKey.LIST_GROUPS, 5, {"states_filter": [], "types_filter": []})
    return [(g["group_type"], g["group_state"]) for g in listed["groups"] if g["group_id"] == group]


def test_an_empty_group_converts_both_ways_and_keeps_its_offsets(broker: BrokerProcess) -> None:
    topic, group = f"conv-{uuid.uuid4().hex[:8]}", f"g-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})  # kept alive until the topic is made
    admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result(30)
    first = [f"a{i}".encode() for i in range(10)]
    _produce(broker.bootstrap, topic, first)
    assert sorted(_classic_read(broker.bootstrap, topic, group, 10)) == sorted(first)
    assert group_type(broker.bootstrap, group) == [("classic", "Empty")]

    second = [f"b{i}".encode() for i in range(6)]
    _produce(broker.bootstrap, topic, second)
    # Upgrade: the consumer-protocol member starts from the classic group's commits.
    assert sorted(_consumer_read(broker.bootstrap, topic, group, 6)) == sorted(second)
    assert group_type(broker.bootstrap, group) == [("consumer", "Empty")]

    third = [f"c{i}".encode() for i in range(4)]
    _produce(broker.bootstrap, topic, third)
    # Downgrade: a classic member again, from the consumer group's commits.
    assert sorted(_classic_read(broker.bootstrap, topic, group, 4)) == sorted(third)
    assert group_type(broker.bootstrap, group) == [("classic", "Empty")]


def test_a_consumer_group_refuses_a_classic_member_with_an_unreadable_subscription(
    broker: BrokerProcess,
) -> None:
    topic, group = f"conv-{uuid.uuid4().hex[:8]}", f"g-{uuid.uuid4().hex[:8]}"
    with RawClient(broker.bootstrap) as raw:
        assert raw.create_topic(topic, PARTITIONS) == 0
        joined = heartbeat(raw, 0, group, "", 0, subscribed_topic_names=[topic], rebalance_timeout_ms=30_000)
        assert joined["error_code"] == 0
        body = classic_join_body(group)
        first: Any = raw.call(ApiKey.JOIN_GROUP, 9, body)
        assert first["error_code"] == int(ErrorCode.MEMBER_ID_REQUIRED)  # KIP-394's round trip first
        refused: Any = raw.call(ApiKey.JOIN_GROUP, 9, {**body, "member_id": first["member_id"]})
        assert refused["error_code"] == int(ErrorCode.INCONSISTENT_GROUP_PROTOCOL)
        assert [kind for kind, _ in group_type(broker.bootstrap, group)] == ["consumer"]
