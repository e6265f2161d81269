"""Log compaction against a real broker process, driven by confluent-kafka (librdkafka).

Topics use tiny segments, ``min.cleanable.dirty.ratio=0.01`` and a 1 s ``delete.retention.ms``; the
broker's cleaner backs off 200 ms, so compaction happens within seconds of producing.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic

from strom.testing import BrokerProcess

pytestmark = pytest.mark.slow

Row = tuple[int, bytes | None, bytes | None]
CLEANER = {"log.cleaner.backoff.ms": "200", "log.retention.check.interval.ms": "500"}
COMPACTED = {
    "cleanup.policy": "compact",
    "segment.bytes": "8192",
    "segment.ms": "500",
    "min.cleanable.dirty.ratio": "0.01",
    "delete.retention.ms": "1000",
}


def create_topic(bootstrap: str, topic: str, **overrides: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(topic, 1, 1, config={**COMPACTED, **overrides})])
    futures[topic].result(15)


def produce(
    bootstrap: str, records: Sequence[tuple[bytes | None, bytes | None]], **conf: Any
) -> dict[int, Row]:
    """Produce in order (idempotent, lz4 batches); returns the acknowledged records by offset."""
    acked: dict[int, Row] = {}
    errors: list[Any] = []

    def report(err: Any, msg: Any) -> None:
        if err is not None:
            errors.append(err)
        else:
            acked[msg.offset()] = (msg.offset(), msg.key(), msg.value())

    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "enable.idempotence": True,
            "compression.type": "lz4",
            "linger.ms": 5,
            "batch.size": 4000,  # a produce request may not exceed the topic's segment.bytes
            **conf,
        }
    )
    topic = TOPIC[0]
    for key, value in records:
        producer.produce(topic, key=key, value=value, on_delivery=report)
        producer.poll(0)
    assert producer.flush(30) == 0
    assert not errors, errors
    return acked


TOPIC: list[str] = [""]  # the current test's topic, set by the `topic` fixture


@pytest.fixture
def topic(topic_name: str) -> str:
    TOPIC[0] = topic_name
    return topic_name


def read_all(bootstrap: str, topic: str, timeout_s: float = 20) -> list[Row]:
    """Every record from the log start to the high watermark as it was when reading began."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "unused",
            "enable.auto.commit": False,
            "fetch.wait.max.ms": 50,
        }
    )
    try:
        tp = TopicPartition(topic, 0)
        low, high = consumer.get_watermark_offsets(tp, timeout=10)
        rows: list[Row] = []
        if high <= low:
            return rows
        consumer.assign([TopicPartition(topic, 0, low)])
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is None:
                continue
            assert msg.error() is None, msg.error()
            rows.append((msg.offset(), msg.key(), msg.value()))
            if msg.offset() >= high - 1:
                return rows
        raise AssertionError(f"read stopped at {rows[-1][0] if rows else None} of [{low}, {high})")
    finally:
        consumer.close()


def latest(rows: list[Row] | dict[int, Row]) -> dict[bytes | None, Row]:
    out: dict[bytes | None, Row] = {}
    for row in sorted(rows.values()) if isinstance(rows, dict) else rows:
        out[row[1]] = row
    return out


def wait_until(check: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.3)


def assert_nothing_lost(rows: list[Row], acked: dict[int, Row]) -> None:
    """Offsets increase, every record is one that was acknowledged, every key's latest is there."""
    offsets = [r[0] for r in rows]
    assert offsets == sorted(set(offsets))
    for row in rows:
        assert acked.get(row[0], row) == row
    present = set(offsets)
    for key, row in latest(acked).items():
        if row[2] is not None:
            assert row[0] in present, f"latest record of {key!r} (offset {row[0]}) lost"


def updates(keys: int, rounds: int, tag: str = "", size: int = 40) -> list[tuple[bytes | None, bytes | None]]:
    return [
        (b"key-%03d" % k, (b"%s-%d-%d-" % (tag.encode(), r, k)).ljust(size, b"x"))
        for r in range(rounds)
        for k in range(keys)
    ]


def test_many_updates_per_key_compact_to_the_latest_value(
    strom_broker_factory: Callable[..., BrokerProcess], topic: str
) -> None:
    broker = strom_broker_factory(**CLEANER)
    create_topic(broker.bootstrap, topic)
    acked = produce(broker.bootstrap, updates(keys=30, rounds=60))
    time.sleep(0.6)  # past segment.ms, so the next append rolls the segment holding the updates
    acked |= produce(broker.bootstrap, [(b"roll", b"x")])

    def compacted() -> bool:
        rows = read_all(broker.bootstrap, topic)
        assert_nothing_lost(rows, acked)
        return len(rows) <= 31 + 10  # at most a few stragglers besides the latest per key

    wait_until(compacted, 30, "compaction")
    rows = read_all(broker.bootstrap, topic)
    assert {k: r[2] for k, r in latest(rows).items()} == {k: r[2] for k, r in latest(acked).items()}


def test_tombstoned_keys_vanish_after_delete_retention(
    strom_broker_factory: Callable[..., BrokerProcess], topic: str
) -> None:
    broker = strom_broker_factory(**CLEANER)
    create_topic(broker.bootstrap, topic)
    acked = produce(broker.bootstrap, updates(keys=20, rounds=10))
    acked |= produce(broker.bootstrap, [(b"key-%03d" % k, None) for k in range(0, 20, 2)])
    filler = [(b"filler", b"%d" % i) for i in range(300)]
    acked |= produce(broker.bootstrap, filler)  # moves the tombstones out of the active segment
    time.sleep(0.6)
    acked |= produce(broker.bootstrap, [(b"roll", b"x")])
    deleted = {b"key-%03d" % k for k in range(0, 20, 2)}

    def tombstones_gone() -> bool:
        rows = read_all(broker.bootstrap, topic)
        assert_nothing_lost(rows, acked)
        return not deleted & {r[1] for r in rows}

    wait_until(tombstones_gone, 30, "tombstones to expire")
    keys = {r[1] for r in read_all(broker.bootstrap, topic)}
    assert {b"key-%03d" % k for k in range(1, 20, 2)} <= keys


def test_consumers_reading_during_compaction_see_a_consistent_log(
    strom_broker_factory: Callable[..., BrokerProcess], topic: str
) -> None:
    broker = strom_broker_factory(**CLEANER)
    create_topic(broker.bootstrap, topic)
    acked: dict[int, Row] = {}
    done = threading.Event()

    def keep_producing() -> None:
        try:
            for round_ in range(15):
                acked.update(produce(broker.bootstrap, updates(keys=25, rounds=20, tag=str(round_))))
        finally:
            done.set()

    writer = threading.Thread(target=keep_producing)
    writer.start()
    passes = 0
    try:
        while not done.is_set() or passes < 3:
            rows = read_all(broker.bootstrap, topic)
            snapshot = dict(acked)
            offsets = [r[0] for r in rows]
            assert offsets == sorted(set(offsets)), "offsets must increase"
            for row in rows:
                assert snapshot.get(row[0], row) == row, f"record at {row[0]} differs from what was acked"
            passes += 1
    finally:
        writer.join(60)
    time.sleep(0.6)
    acked |= produce(broker.bootstrap, [(b"roll", b"x")])
    rows = read_all(broker.bootstrap, topic)
    assert_nothing_lost(rows, acked)
    assert len(rows) < len(acked)  # compaction did happen while we were reading
    assert passes >= 3


def cleaned_files(broker: BrokerProcess, topic: str) -> list[Path]:
    return list((broker.data_dir / "logs" / f"{topic}-0").glob("*.cleaned"))


def set_policy(bootstrap: str, topic: str, policy: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    entry = ConfigEntry("cleanup.policy", policy, incremental_operation=AlterConfigOpType.SET)
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=[entry])
    admin.incremental_alter_configs([resource])[resource].result(15)


def test_kill_9_during_cleaning_then_restart_loses_nothing(
    strom_broker_factory: Callable[..., BrokerProcess], topic: str
) -> None:
    broker = strom_broker_factory(**CLEANER)
    create_topic(broker.bootstrap, topic, **{"segment.bytes": "65536"})
    acked: dict[int, Row] = {}
    kills_mid_clean = 0
    for _ in range(3):
        # Build up a large dirty section with compaction off, then switch it on and kill -9 the broker
        # as soon as the cleaner has a half-written cleaned segment on disk.
        set_policy(broker.bootstrap, topic, "delete")
        records = [(b"key-%03d" % (i % 50), os.urandom(150)) for i in range(8000)]
        acked |= produce(broker.bootstrap, records)
        set_policy(broker.bootstrap, topic, "compact")
        deadline = time.monotonic() + 20
        while not cleaned_files(broker, topic) and time.monotonic() < deadline:
            time.sleep(0.001)
        kills_mid_clean += bool(cleaned_files(broker, topic))
        broker.kill()
        broker.start()
        rows = read_all(broker.bootstrap, topic)
        assert_nothing_lost(rows, acked)
        assert rows[-1][0] == max(acked)  # the log end is intact
    assert kills_mid_clean >= 2
    wait_until(
        lambda: len(read_all(broker.bootstrap, topic)) < len(acked) / 2, 30, "compaction after restarts"
    )
    assert_nothing_lost(read_all(broker.bootstrap, topic), acked)


def test_keyless_record_to_a_compacted_topic_is_invalid_record(
    strom_broker_factory: Callable[..., BrokerProcess], topic: str
) -> None:
    broker = strom_broker_factory(**CLEANER)
    create_topic(broker.bootstrap, topic)
    errors: list[Any] = []
    producer = Producer({"bootstrap.servers": broker.bootstrap, "retries": 0})
    producer.produce(topic, value=b"no key", on_delivery=lambda err, _msg: errors.append(err))
    assert producer.flush(20) == 0  # alone: Kafka rejects the whole batch holding a keyless record
    producer.produce(topic, key=b"k", value=b"keyed", on_delivery=lambda err, _msg: errors.append(err))
    assert producer.flush(20) == 0
    assert errors[0] is not None and errors[0].code() == KafkaError.INVALID_RECORD
    assert errors[1] is None
    assert [(r[1], r[2]) for r in read_all(broker.bootstrap, topic)] == [(b"k", b"keyed")]
