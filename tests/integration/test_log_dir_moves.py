"""AlterReplicaLogDirs (KIP-113) on a real broker with two log dirs, over TCP: kafka-python's admin
client moves a partition's replica to the other dir while a confluent-kafka producer keeps writing to
it; every acknowledged record is read back, from the new dir, and again after a restart. DescribeLogDirs
follows the replica; an unknown dir and a partition not hosted get Kafka's errors, and the latter is
created in the dir asked for. Both versions (v1, v2) over the wire."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaAdminClient
from kafka.errors import LogDirNotFoundError, NoError, ReplicaNotAvailableError

from strom.protocol.api import ApiKey
from strom.testing import BrokerProcess
from tests.integration.rawclient import RawClient


@pytest.fixture(scope="module")
def dirs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    base = tmp_path_factory.mktemp("log-dir-moves")
    return base / "data", (base / "disk-a").resolve(), (base / "disk-b").resolve()


@pytest.fixture(scope="module")
def broker(dirs: tuple[Path, Path, Path]) -> Iterator[BrokerProcess]:
    data, first, second = dirs
    proc = BrokerProcess(data, {"log.dirs": f"{first},{second}", "group.initial.rebalance.delay.ms": "0"})
    proc.start()
    try:
        yield proc
    finally:
        proc.stop()


def _where(admin: KafkaAdminClient, topic: str) -> dict[str, list[tuple[bool, int]]]:
    """log dir -> [(is future, size)] of the topic's partition 0."""
    (answer,) = admin.describe_log_dirs({topic: [0]})
    out: dict[str, list[tuple[bool, int]]] = {}
    for log_dir in answer["log_dirs"]:
        assert log_dir["error_code"] == 0
        for t in log_dir["topics"]:
            for p in t["partitions"]:
                out.setdefault(log_dir["log_dir"], []).append((p["is_future_key"], p["partition_size"]))
    return out


def _read_all(bootstrap: str, topic: str, expected: int) -> list[bytes]:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"g-{uuid.uuid4().hex[:6]}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    consumer.subscribe([topic])
    values: list[bytes] = []
    deadline = time.monotonic() + 60
    try:
        while len(values) < expected and time.monotonic() < deadline:
            for message in consumer.consume(1000, 1.0):
                assert message.error() is None, message.error()
                value = message.value()
                assert value is not None
                values.append(value)
    finally:
        consumer.close()
    return values


def test_a_replica_moves_to_the_other_dir_under_load_without_losing_a_record(
    broker: BrokerProcess, dirs: tuple[Path, Path, Path]
) -> None:
    _, first, second = dirs
    topic = f"move-{uuid.uuid4().hex[:8]}"
    creator = AdminClient({"bootstrap.servers": broker.bootstrap})  # kept alive until the topic is made
    creator.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        (source,) = _where(admin, topic)
        dest = str(second if source == str(first) else first)

        acked: list[bytes] = []
        stop = threading.Event()

        def produce() -> None:
            producer = Producer(
                {"bootstrap.servers": broker.bootstrap, "enable.idempotence": True, "linger.ms": 5}
            )

            def done(err: Any, msg: Any) -> None:
                if err is None:
                    acked.append(msg.value())

            i = 0
            while not stop.is_set():
                producer.produce(topic, value=f"{i:08d}".encode() * 64, on_delivery=done)
                producer.poll(0)
                i += 1
                if i % 500 == 0:
                    time.sleep(0.01)
            assert producer.flush(60) == 0

        writer = threading.Thread(target=produce)
        writer.start()
        try:
            filled = time.monotonic() + 120
            while len(acked) < 20_000:  # several MB in the partition before the move
                assert writer.is_alive() and time.monotonic() < filled, f"{len(acked)} acknowledged"
                time.sleep(0.05)
            answer = admin.alter_replica_log_dirs({(topic, 0, 0): dest})
            assert list(answer.values()) == [NoError]
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                where = _where(admin, topic)
                if list(where) == [dest] and [f for f, _ in where[dest]] == [False]:
                    break
                time.sleep(0.1)
            else:
                pytest.fail(f"the replica did not move: {_where(admin, topic)}")
            time.sleep(0.5)  # the producer keeps writing to the moved replica
        finally:
            stop.set()
            writer.join(90)
        assert not writer.is_alive()
        assert not (Path(source) / f"{topic}-0").exists()
        assert (Path(dest) / f"{topic}-0").is_dir()
        assert "moved" in broker.log_path.read_text()
        read = _read_all(broker.bootstrap, topic, len(acked))
        assert read == acked  # every acknowledged record, once, in order

        broker.stop()
        broker.start()
        after = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
        try:
            assert [(d, [f for f, _ in found]) for d, found in _where(after, topic).items()] == [
                (dest, [False])
            ]
        finally:
            after.close()
        assert _read_all(broker.bootstrap, topic, len(acked)) == acked
    finally:
        admin.close()


def test_an_unknown_dir_and_a_partition_not_hosted(
    broker: BrokerProcess, dirs: tuple[Path, Path, Path]
) -> None:
    _, first, second = dirs
    topic = f"later-{uuid.uuid4().hex[:8]}"
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        assert list(admin.alter_replica_log_dirs({(topic, 0, 0): "/nowhere"}).values()) == [
            LogDirNotFoundError
        ]
        # Not hosted yet: REPLICA_NOT_AVAILABLE, and the partition is created in that dir.
        for target in (first, second):
            name = f"{topic}-{target.name}"
            answer = admin.alter_replica_log_dirs({(name, 0, 0): str(target)})
            assert list(answer.values()) == [ReplicaNotAvailableError]
            admin.create_topics({name: {"num_partitions": 1, "replication_factor": 1}})
            assert list(_where(admin, name)) == [str(target)]
    finally:
        admin.close()


@pytest.mark.parametrize("version", [1, 2])
def test_both_versions_over_the_wire(broker: BrokerProcess, version: int) -> None:
    topic = f"raw-{uuid.uuid4().hex[:8]}"
    with RawClient(broker.bootstrap) as raw:
        assert raw.create_topic(topic, 1) == 0
        described = raw.call(ApiKey.DESCRIBE_LOG_DIRS, 4, {"topics": [{"topic": topic, "partitions": [0]}]})
        here = [r["log_dir"] for r in described["results"] if r["topics"]]
        (current,) = set(here)
        body = {
            "dirs": [
                {"path": current, "topics": [{"name": topic, "partitions": [0]}]},  # where it is
                {"path": "/not/a/log/dir", "topics": [{"name": topic, "partitions": [2]}]},
            ]
        }
        resp = raw.call(ApiKey.ALTER_REPLICA_LOG_DIRS, version, body)
    assert resp["throttle_time_ms"] == 0
    assert [
        (r["topic_name"], [(p["partition_index"], p["error_code"]) for p in r["partitions"]])
        for r in resp["results"]
    ] == [
        (topic, [(0, 0), (2, 57)])  # LOG_DIR_NOT_FOUND
    ]


def test_a_swap_whose_last_rename_fails_leaves_the_replica_serving_where_it_was(
    broker: BrokerProcess, dirs: tuple[Path, Path, Path]
) -> None:
    """The destination already holds a non-empty directory under the partition's name (made by the
    test), so the copy's last rename fails after the source was renamed aside: the broker renames the
    source back and reopens it, and the partition keeps every record and takes new ones."""
    _, first, second = dirs
    topic = f"blocked-{uuid.uuid4().hex[:8]}"
    creator = AdminClient({"bootstrap.servers": broker.bootstrap})
    creator.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": True})
    sent = [f"{i:06d}".encode() * 32 for i in range(2_000)]
    for value in sent[:1_000]:
        producer.produce(topic, value=value)
    assert producer.flush(30) == 0
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    (source,) = _where(admin, topic)
    dest = second if source == str(first) else first
    blocker = dest / f"{topic}-0"
    blocker.mkdir()
    (blocker / "not-a-segment").write_bytes(b"x")
    try:
        assert list(admin.alter_replica_log_dirs({(topic, 0, 0): str(dest)}).values()) == [NoError]
        deadline = time.monotonic() + 60
        failure = f"moving {topic}-0 to {dest} failed"
        while failure not in broker.log_path.read_text():
            assert time.monotonic() < deadline, "the move did not fail"
            time.sleep(0.1)
        assert "moved " + topic not in broker.log_path.read_text()
        assert [(d, [f for f, _ in found]) for d, found in _where(admin, topic).items()] == [
            (source, [False])
        ]
        assert (Path(source) / f"{topic}-0").is_dir()
        assert sorted(p.name for p in dest.iterdir() if p.name.startswith(topic)) == [f"{topic}-0"]
        for value in sent[1_000:]:
            producer.produce(topic, value=value)
        assert producer.flush(30) == 0
        assert _read_all(broker.bootstrap, topic, len(sent)) == sent
    finally:
        admin.close()
        (blocker / "not-a-segment").unlink()
        blocker.rmdir()
