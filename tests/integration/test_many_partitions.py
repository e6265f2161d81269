"""More partitions than descriptors (log.max.open.files), and topics created all or nothing.

The broker runs under ``prlimit --nofile=256:256`` (it execs the broker in place), with at most 64
segment files open: 500 partitions then only work if idle segment files are closed and reopened on
use. A CreateTopics or CreatePartitions whose partition log cannot be made answers KAFKA_STORAGE_ERROR
for that topic, leaves nothing of it behind and keeps the connection.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic

from strom.testing import BrokerProcess

NOFILE = 256
BOUND = 64
TOPICS, PARTITIONS = 25, 20  # 500 partitions


@pytest.fixture
def small_broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    proc = BrokerProcess(
        tmp_path / "data",
        {"log.max.open.files": str(BOUND), "group.initial.rebalance.delay.ms": "0"},
        command_prefix=["prlimit", f"--nofile={NOFILE}:{NOFILE}", "--"],
    )
    proc.start()
    try:
        yield proc
    finally:
        proc.stop()


def _open_descriptors(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def _consume_all(bootstrap: str, partitions: list[TopicPartition], expected: int) -> dict[str, bytes]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused", "enable.auto.commit": False})
    consumer.assign([TopicPartition(tp.topic, tp.partition, 0) for tp in partitions])
    seen: dict[str, bytes] = {}
    try:
        for _ in range(600):
            for msg in consumer.consume(500, timeout=0.5):
                assert msg.error() is None, msg.error()
                seen[f"{msg.topic()}-{msg.partition()}"] = msg.value()
            if len(seen) >= expected:
                break
    finally:
        consumer.close()
    return seen


def test_more_partitions_than_the_descriptor_bound(small_broker: BrokerProcess) -> None:
    bootstrap = small_broker.bootstrap
    admin = AdminClient({"bootstrap.servers": bootstrap})
    names = [f"many-{i}" for i in range(TOPICS)]
    for future in admin.create_topics([NewTopic(n, PARTITIONS, 1) for n in names]).values():
        future.result(timeout=60)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    all_partitions = [TopicPartition(n, p) for n in names for p in range(PARTITIONS)]
    for tp in all_partitions:
        producer.produce(tp.topic, value=f"{tp.topic}/{tp.partition}".encode(), partition=tp.partition)
    assert producer.flush(60) == 0
    seen = _consume_all(bootstrap, all_partitions, len(all_partitions))
    want = {f"{tp.topic}-{tp.partition}": f"{tp.topic}/{tp.partition}".encode() for tp in all_partitions}
    assert seen == want
    pid = small_broker.pid
    assert pid is not None and _open_descriptors(pid) < NOFILE
    assert "log.max.open.files: at most 64 segment files open" in small_broker.log_path.read_text()

    del producer  # no reconnect attempts while the broker restarts
    small_broker.stop()
    small_broker.start()
    assert _consume_all(small_broker.bootstrap, all_partitions, len(all_partitions)) == want
    producer = Producer({"bootstrap.servers": small_broker.bootstrap})
    producer.produce(names[0], value=b"after restart", partition=3)
    assert producer.flush(30) == 0


def test_a_topic_whose_log_cannot_be_made_is_not_created(small_broker: BrokerProcess) -> None:
    log_dir = small_broker.data_dir / "logs"
    blocker = log_dir / "half-5"  # a file where partition 5's directory must go: its log fails
    blocker.write_bytes(b"")
    admin = AdminClient({"bootstrap.servers": small_broker.bootstrap})
    with pytest.raises(KafkaException) as failed:
        admin.create_topics([NewTopic("half", 8, 1)])["half"].result(timeout=30)
    assert failed.value.args[0].name() == "KAFKA_STORAGE_ERROR"
    # The same client (its connection kept) sees no trace of the topic, on the broker or on disk.
    assert "half" not in admin.list_topics(timeout=10).topics
    assert sorted(p.name for p in log_dir.iterdir() if p.name.startswith("half")) == ["half-5"]

    blocker.unlink()
    admin.create_topics([NewTopic("half", 8, 1)])["half"].result(timeout=30)
    (log_dir / "half-9").write_bytes(b"")
    with pytest.raises(KafkaException) as failed:
        admin.create_partitions([NewPartitions("half", 12)])["half"].result(timeout=30)
    assert failed.value.args[0].name() == "KAFKA_STORAGE_ERROR"
    assert len(admin.list_topics(timeout=10).topics["half"].partitions) == 8
    assert not (log_dir / "half-8").exists()
    producer = Producer({"bootstrap.servers": small_broker.bootstrap})
    producer.produce("half", value=b"still serving", partition=7)
    assert producer.flush(30) == 0
