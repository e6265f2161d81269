"""Online migration of a group with members between the classic protocol and KIP-848 (Kafka 4's
default ``group.consumer.migration.policy=bidirectional``) with real clients over TCP.

A kafka-python consumer and a confluent-kafka classic consumer share a classic group; a confluent-kafka
``group.protocol=consumer`` member joins: the group becomes a consumer group, the classic members stay
in it through JoinGroup/SyncGroup/Heartbeat and give up what the broker's assignor moves to the
newcomer, and everybody keeps consuming. The newcomer leaves: the group is classic again, its classic
members rebalance among themselves. Every member commits each record before polling again; every record
is read exactly once, no offset is committed twice, and the committed offsets end at the partitions'
ends. ListGroups and ``strom groups describe`` show the group's type at each step.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from strom.protocol.api import ApiKey
from strom.protocol.errors import ErrorCode
from strom.testing import BrokerProcess
from tests.integration.kip848_clients import wait_until
from tests.integration.rawclient import RawClient
from tests.integration.strom_cli import describe_group
from tests.integration.test_consumer_group_protocol import heartbeat
from tests.integration.test_group_conversion import group_type
from tests.integration.test_group_migration_policy import join, wait_for_coordinator

PARTITIONS = 6
CONFIGS = {
    "group.initial.rebalance.delay.ms": "0",
    "group.consumer.heartbeat.interval.ms": "500",
    "group.consumer.min.heartbeat.interval.ms": "100",
    "group.consumer.session.timeout.ms": "10000",
    "group.consumer.min.session.timeout.ms": "1000",
}


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    proc = BrokerProcess(tmp_path_factory.mktemp("migration") / "data", CONFIGS)
    proc.start()
    try:
        yield proc
    finally:
        proc.stop()


class Member(threading.Thread):
    """One consumer in a thread: it records every record it reads and commits it (synchronously)
    before it polls again, so no rebalance can move a partition between a read and its commit."""

    def __init__(
        self, name: str, poll: Callable[[], list[tuple[int, int]]], close: Callable[[], None]
    ) -> None:
        super().__init__(name=name, daemon=True)
        self._poll, self._close = poll, close
        self.read: list[tuple[int, int]] = []
        self.stop_flag = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            while not self.stop_flag.is_set():
                self.read += self._poll()
        except BaseException as exc:  # reported by the test
            self.error = exc
        finally:
            self._close()

    def stop(self) -> None:
        self.stop_flag.set()
        self.join(60)
        assert not self.is_alive(), f"{self.name} did not stop"


def kafka_python_member(bootstrap: str, topic: str, group: str) -> Member:
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KpTopicPartition
    from kafka.structs import OffsetAndMetadata

    consumer = KafkaConsumer(
        topic,
        bootstrap_servers=bootstrap,
        group_id=group,
        client_id="kafka-python-member",
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        heartbeat_interval_ms=500,
        session_timeout_ms=10_000,
        max_poll_interval_ms=60_000,
    )

    def poll() -> list[tuple[int, int]]:
        got = []
        for tp, records in consumer.poll(timeout_ms=200).items():
            for r in records:
                got.append((tp.partition, r.offset))
                offsets = {KpTopicPartition(tp.topic, tp.partition): OffsetAndMetadata(r.offset + 1, "", -1)}
                consumer.commit(offsets)
        return got

    return Member("kafka-python", poll, consumer.close)


def confluent_member(bootstrap: str, topic: str, group: str, protocol: str) -> Member:
    config: dict[str, Any] = {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "client.id": f"confluent-{protocol}",
        "group.protocol": protocol,
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
    }
    if protocol == "classic":
        config.update({"heartbeat.interval.ms": 500, "session.timeout.ms": 10_000})
    consumer = Consumer(config)
    # Rebalance callbacks make librdkafka hand partitions back only from poll (after the commit).
    consumer.subscribe([topic], on_assign=lambda c, ps: None, on_revoke=lambda c, ps: None)

    def poll() -> list[tuple[int, int]]:
        message = consumer.poll(0.2)
        if message is None or message.error() is not None:
            return []
        consumer.commit(message=message, asynchronous=False)
        offset = message.offset()
        assert offset is not None
        return [(message.partition() or 0, offset)]

    return Member(f"confluent-{protocol}", poll, consumer.close)


def produce(bootstrap: str, topic: str, per_partition: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(per_partition * PARTITIONS):
        producer.produce(topic, value=f"v{i}".encode(), partition=i % PARTITIONS)
    assert producer.flush(15) == 0


def described_type(bootstrap: str, group: str) -> str:
    """From the first line of ``strom groups describe``: "Group <id>: type <type>, state <state>, ..."."""
    first = describe_group(bootstrap, group)[0]
    return first.split(": type ", 1)[1].split(",", 1)[0]


def test_online_upgrade_and_downgrade_with_running_classic_members(broker: BrokerProcess) -> None:
    bootstrap = broker.bootstrap
    topic, group = f"mig-{uuid.uuid4().hex[:8]}", f"mig-g-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result(30)
    members: list[Member] = []

    def read() -> list[tuple[int, int]]:
        return [r for m in members for r in m.read]

    def healthy() -> None:
        for m in members:
            assert m.error is None, f"{m.name}: {m.error!r}"

    try:
        produce(bootstrap, topic, 10)
        members += [
            kafka_python_member(bootstrap, topic, group),
            confluent_member(bootstrap, topic, group, "classic"),
        ]
        for m in members:
            m.start()
        assert wait_until(lambda: len(read()) >= 60, 60), (len(read()), healthy())
        assert wait_until(lambda: group_type(bootstrap, group) == [("classic", "Stable")], 30)
        assert described_type(bootstrap, group) == "classic"

        # Upgrade: a consumer-protocol member joins the running classic group.
        newcomer = confluent_member(bootstrap, topic, group, "consumer")
        members.append(newcomer)
        newcomer.start()
        assert wait_until(lambda: group_type(bootstrap, group) == [("consumer", "Stable")], 60), group_type(
            bootstrap, group
        )
        assert described_type(bootstrap, group) == "consumer"
        described = admin.describe_consumer_groups([group])[group].result(15)
        owned = {m.client_id: len(m.assignment.topic_partitions) for m in described.members}
        assert owned == {"kafka-python-member": 2, "confluent-classic": 2, "confluent-consumer": 2}, owned
        before = {m.name: len(m.read) for m in members}
        produce(bootstrap, topic, 10)
        assert wait_until(lambda: len(read()) >= 120, 60), (len(read()), healthy())
        # Each member, the classic ones too, consumed records of the second batch.
        assert all(len(m.read) > before[m.name] for m in members), {m.name: len(m.read) for m in members}

        # Downgrade: the last consumer-protocol member leaves; the classic members take everything.
        newcomer.stop()
        assert wait_until(lambda: group_type(bootstrap, group) == [("classic", "Stable")], 60), group_type(
            bootstrap, group
        )
        assert described_type(bootstrap, group) == "classic"
        produce(bootstrap, topic, 10)
        assert wait_until(lambda: len(read()) >= 180, 60), (len(read()), healthy())
        time.sleep(1)  # a duplicate delivery would show up by now
        healthy()
    finally:
        for m in members:
            if m.is_alive():
                m.stop()

    # Exactly once: every record read once, and committed offsets at the partitions' ends.
    counts = Counter(read())
    assert sorted(counts) == [(p, o) for p in range(PARTITIONS) for o in range(30)]
    assert max(counts.values()) == 1, [r for r, n in counts.items() if n > 1]
    request = ConsumerGroupTopicPartitions(group, [TopicPartition(topic, p) for p in range(PARTITIONS)])
    result = admin.list_consumer_group_offsets([request])[group].result(15)
    assert sorted((tp.partition, tp.offset) for tp in result.topic_partitions) == [
        (p, 30) for p in range(PARTITIONS)
    ]


def test_a_silent_consumer_member_is_removed_and_the_group_downgrades(broker: BrokerProcess) -> None:
    """The last consumer-protocol member stops heartbeating (killed): its session runs out on the
    broker's timer, the group becomes classic and its classic member is asked to rejoin (the classic
    rebalance of the downgrade), which it does, alone in the group then."""
    topic, group = f"mig-{uuid.uuid4().hex[:8]}", f"mig-k-{uuid.uuid4().hex[:8]}"
    with RawClient(broker.bootstrap) as raw:
        assert raw.create_topic(topic, 2) == 0
        wait_for_coordinator(raw, topic, [group])
        silent = heartbeat(raw, 0, group, "", 0, subscribed_topic_names=[topic], rebalance_timeout_ms=30_000)
        assert silent["error_code"] == 0, silent
        classic_member = join(raw, group, topic)
        assert classic_member["error_code"] == 0, classic_member
        member_id, generation = classic_member["member_id"], classic_member["generation_id"]
        beat = {"group_id": group, "generation_id": generation, "member_id": member_id}
        deadline = time.monotonic() + 40  # the session timeout is 10 s
        while group_type(broker.bootstrap, group) != [("classic", "PreparingRebalance")]:
            assert time.monotonic() < deadline, group_type(broker.bootstrap, group)
            # The classic member stays alive; its generation is the group epoch the downgrade keeps.
            code = raw.call(ApiKey.HEARTBEAT, 3, beat)["error_code"]
            assert code in (0, ErrorCode.REBALANCE_IN_PROGRESS), code
            time.sleep(0.5)
        assert raw.call(ApiKey.HEARTBEAT, 3, beat)["error_code"] == ErrorCode.REBALANCE_IN_PROGRESS
        rejoined = join(raw, group, topic, member_id)
        assert rejoined["error_code"] == 0, rejoined
        assert rejoined["leader"] == member_id and rejoined["generation_id"] > generation
        assert group_type(broker.bootstrap, group) == [("classic", "CompletingRebalance")]
