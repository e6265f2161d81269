"""Kafka helpers for the Spark suite: create topics, produce, and read back with confluent-kafka."""

from __future__ import annotations

import time
import uuid
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic


def new_topic(bootstrap: str, partitions: int = 3, prefix: str = "t") -> str:
    """Create a uniquely named topic and wait until it exists."""
    name = f"{prefix}-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(name, partitions, 1)]).values():
        future.result(timeout=30)
    return name


def produce(
    bootstrap: str,
    topic: str,
    records: list[tuple[bytes | None, bytes | None]],
    *,
    headers: bool = False,
    timestamps: list[int] | None = None,
    partition: int | None = None,
    batch_per_record: bool = False,
) -> None:
    """Produce (key, value) records with an idempotent murmur2 producer and wait for every ack."""
    producer = Producer(
        {"bootstrap.servers": bootstrap, "enable.idempotence": True, "partitioner": "murmur2_random"}
    )
    for i, (key, value) in enumerate(records):
        extra: dict[str, Any] = {}
        if headers and i % 2:
            extra["headers"] = [("i", str(i).encode()), ("empty", None)]
        if timestamps is not None:
            extra["timestamp"] = timestamps[i]
        if partition is not None:
            extra["partition"] = partition
        producer.produce(topic, value, key, **extra)
        if batch_per_record:
            assert producer.flush(30) == 0
    assert producer.flush(30) == 0


def recent_base_ms() -> int:
    """An hour ago: far older timestamps would be fair game for the broker's 7-day time retention."""
    return (int(time.time()) - 3600) * 1000


def timed_topic(bootstrap: str, partitions: int, batch_per_record: bool = True) -> tuple[str, int]:
    """A new topic whose partitions each hold 10 records stamped base, base+1 s, ...; (topic, base)."""
    topic = new_topic(bootstrap, partitions)
    base = recent_base_ms()
    for p in range(partitions):
        produce(
            bootstrap,
            topic,
            [(None, f"{p}-{i}".encode()) for i in range(10)],
            timestamps=[base + i * 1000 for i in range(10)],
            partition=p,
            batch_per_record=batch_per_record,
        )
    return topic, base


def consume_all(bootstrap: str, topic: str, partitions: int) -> list[dict[str, Any]]:
    """Every record of a topic, as a confluent-kafka consumer sees it (the oracle for reads)."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"oracle-{uuid.uuid4().hex}",
            "enable.auto.commit": False,
            # Requests on a connection queue behind a long-polling Fetch: keep the poll short.
            "fetch.wait.max.ms": 10,
        }
    )
    rows: list[dict[str, Any]] = []
    try:
        for p in range(partitions):
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
            if high <= low:
                continue
            consumer.assign([TopicPartition(topic, p, low)])
            # By position, not by the last record's offset: a transaction marker may end the partition.
            while consumer.position([TopicPartition(topic, p)])[0].offset < high:
                for m in consumer.consume(1000, timeout=5):
                    assert m.error() is None, m.error()
                    ts_type, ts = m.timestamp()
                    rows.append(
                        {
                            "key": m.key(),
                            "value": m.value(),
                            "topic": m.topic(),
                            "partition": m.partition(),
                            "offset": m.offset(),
                            "timestamp_ms": ts,
                            "timestampType": ts_type - 1,
                            "headers": [(k, v) for k, v in m.headers()] if m.headers() else None,
                        }
                    )
    finally:
        consumer.close()
    return rows


def consume_values(bootstrap: str, topic: str, partitions: int, isolation: str) -> list[bytes]:
    """Every value of a topic for a consumer of `isolation` level, in partition then offset order.

    Reads each partition up to its end (the last stable offset for read_committed), going by the
    consumer's position, which moves past aborted records and transaction markers.
    """
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"oracle-{uuid.uuid4().hex}",
            "enable.auto.commit": False,
            "isolation.level": isolation,
            "fetch.wait.max.ms": 10,
        }
    )
    values: list[bytes] = []
    try:
        for p in range(partitions):
            tp = TopicPartition(topic, p)
            low, high = consumer.get_watermark_offsets(tp, timeout=10)
            consumer.assign([TopicPartition(topic, p, low)])
            deadline = time.monotonic() + 30
            while consumer.position([tp])[0].offset < high:
                assert time.monotonic() < deadline, f"{topic}-{p}: stuck below {high}"
                for m in consumer.consume(1000, timeout=0.2):
                    assert m.error() is None, m.error()
                    values.append(m.value())
    finally:
        consumer.close()
    return values
