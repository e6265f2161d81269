"""The tiered-storage acceptance run (issue 21): 3 brokers, ZooKeeper, SeaweedFS, a tiered topic.

``STROM_TIERED_ACCEPTANCE_MB`` sets the volume (default 12 MB: the suite's small form; ``make
tiered-acceptance`` runs several GB). The topic (3 partitions, replication 3, ``remote.storage.enable``,
``local.retention.bytes`` of three segments) is produced to by an idempotent confluent-kafka producer in
four chunks; between chunks the leader of one partition is killed with SIGKILL and started again, so
every partition's leader dies once. Then one broker's log dir is wiped and the broker restarted: it
catches up into every ISR without copying the history (its disk holds only the local retention).
Finally every partition is read from offset 0 by confluent-kafka and by kafka-python (and with
``STROM_TIERED_ACCEPTANCE_SPARK=1``, which ``make tiered-acceptance`` sets, by the Spark source in a
local SparkSession, checked in Spark) and compared, record by record, with what was produced (values are
regenerated from their partition and index, so a run of several GB needs no memory for them): nothing
lost, nothing twice, byte for byte. Each broker's disk
holds, per partition, no more than the local retention and the segments not yet copied.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable, Iterator
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition

from strom.testing import BrokerProcess
from strom.testing.seaweedfs_process import SeaweedS3Process
from tests.cluster.conftest import partitions_of, wait_until
from tests.cluster.tiered import create_tiered_topic, in_every_isr, local_segments, seaweedfs, tiered_settings

__all__ = ["seaweedfs"]

TOPIC = "acceptance"
PARTITIONS = 3
VALUE_BYTES = 1000
CHUNKS = 4
MB = int(os.environ.get("STROM_TIERED_ACCEPTANCE_MB", "12"))
SPARK = os.environ.get("STROM_TIERED_ACCEPTANCE_SPARK") == "1"  # make tiered-acceptance sets it
PER_PARTITION = MB * 1_000_000 // VALUE_BYTES // PARTITIONS
# About 30 segments per partition, between 64 KiB and 64 MiB; local retention of three.
SEGMENT_BYTES = min(max(65536, PER_PARTITION * VALUE_BYTES // 30), 64 * 1024 * 1024)
LOCAL_RETENTION_BYTES = 3 * SEGMENT_BYTES


def value_of(partition: int, index: int) -> bytes:
    return (b"%d:%010d:" % (partition, index)).ljust(VALUE_BYTES, b"abcdefghij"[index % 10 : index % 10 + 1])


def _produce(bootstrap: str, first: int, count: int) -> None:
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "enable.idempotence": True,
            "linger.ms": 10,
            "batch.size": SEGMENT_BYTES // 2,  # a batch larger than segment.bytes is refused
            "message.timeout.ms": 300_000,
        }
    )
    failed: list[str] = []

    def delivered(error: Any, _msg: Any) -> None:
        if error is not None:
            failed.append(str(error))

    for index in range(first, first + count):
        for partition in range(PARTITIONS):
            while True:
                try:
                    producer.produce(
                        TOPIC, value_of(partition, index), partition=partition, on_delivery=delivered
                    )
                    break
                except BufferError:
                    producer.poll(0.05)
    assert producer.flush(300) == 0
    assert failed == []


def _local_bytes(broker: BrokerProcess, partition: int) -> int:
    return sum(local_segments(broker, TOPIC, partition).values())


def _read_confluent(bootstrap: str, partition: int) -> Iterator[tuple[int, bytes]]:
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "acceptance-ck", "enable.auto.commit": False}
    )
    consumer.assign([TopicPartition(TOPIC, partition, 0)])
    got, idle_until = 0, time.monotonic() + 120
    try:
        while got < PER_PARTITION and time.monotonic() < idle_until:
            for msg in consumer.consume(5000, 1.0):
                if msg.error() is None:
                    got += 1
                    idle_until = time.monotonic() + 120
                    yield msg.offset(), msg.value() or b""
    finally:
        consumer.close()


def _read_kafka_python(bootstrap: str, partition: int) -> Iterator[tuple[int, bytes]]:
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KTopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap.split(","), enable_auto_commit=False)
    tp = KTopicPartition(TOPIC, partition)
    consumer.assign([tp])
    consumer.seek(tp, 0)
    got, idle_until = 0, time.monotonic() + 120
    try:
        while got < PER_PARTITION and time.monotonic() < idle_until:
            for records in consumer.poll(timeout_ms=1000, max_records=5000).values():
                for record in records:
                    got += 1
                    idle_until = time.monotonic() + 120
                    yield record.offset, record.value or b""
    finally:
        consumer.close()


def _check(read: Callable[[str, int], Iterator[tuple[int, bytes]]], bootstrap: str) -> None:
    for partition in range(PARTITIONS):
        count = 0
        for offset, value in read(bootstrap, partition):
            assert offset == count, f"partition {partition}: offset {offset} where {count} was expected"
            expected = value_of(partition, count)
            assert value == expected, (
                f"partition {partition}: offset {offset} holds {value[:24]!r}, not {expected[:24]!r}"
            )
            count += 1
        assert count == PER_PARTITION, f"partition {partition}: {count} of {PER_PARTITION} records"


def _check_spark(bootstrap: str) -> None:
    """The Spark source's batch read of the topic from its earliest offsets, checked in Spark (a run of
    several GB is not collected): every (partition, offset) once, every value the one produced there."""
    from pyspark.sql import functions as F

    from tests.spark.session import local_spark_session

    session = local_spark_session("strom-tiered-acceptance")
    try:
        df = (
            session.read.format("strom")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("subscribe", TOPIC)
        )
        rows = df.load().select("partition", "offset", "value")
        prefix = F.format_string("%d:%010d:", F.col("partition"), F.col("offset"))
        fill = F.substring(F.lit("abcdefghij"), (F.col("offset") % 10 + 1).cast("int"), 1)
        prefix_bytes = len(value_of(0, 0).split(b":", 2)[0]) + 12  # "<p>:" and "<10 digits>:"
        expected = F.concat(prefix, F.repeat(fill, VALUE_BYTES - prefix_bytes)).cast("binary")
        (count, distinct, wrong, first, last) = rows.agg(
            F.count(F.lit(1)),
            F.countDistinct("partition", "offset"),
            F.sum(F.when(F.col("value") != expected, 1).otherwise(0)),
            F.min("offset"),
            F.max("offset"),
        ).collect()[0]
        assert (count, distinct, wrong) == (PER_PARTITION * PARTITIONS,) * 2 + (0,)
        assert (first, last) == (0, PER_PARTITION - 1)
    finally:
        session.stop()


def test_acceptance(make_cluster: Callable[..., Any], seaweedfs: SeaweedS3Process) -> None:
    cluster = make_cluster(3, **tiered_settings(seaweedfs, metadata_partitions=3, interval_ms=500))
    create_tiered_topic(cluster.bootstrap, TOPIC, PARTITIONS, SEGMENT_BYTES, LOCAL_RETENTION_BYTES)

    chunk = PER_PARTITION // CHUNKS
    for n in range(CHUNKS):
        count = chunk if n < CHUNKS - 1 else PER_PARTITION - chunk * (CHUNKS - 1)
        _produce(cluster.bootstrap, n * chunk, count)
        if n < PARTITIONS:  # kill partition n's leader (SIGKILL), then bring it back
            leader = partitions_of(cluster.bootstrap, TOPIC)[n][0]
            cluster.brokers[leader].kill()
            wait_until(
                lambda n=n, leader=leader: partitions_of(cluster.bootstrap, TOPIC)[n][0] not in (-1, leader),
                60,
                f"a new leader of partition {n}",
            )
            cluster.brokers[leader].start()
            wait_until(
                lambda leader=leader: in_every_isr(cluster.bootstrap, TOPIC, leader),
                120,
                f"broker {leader} back in sync",
            )

    wiped = cluster.brokers[1]
    wiped.stop()
    shutil.rmtree(wiped.data_dir / "logs")
    wiped.start()
    wait_until(lambda: in_every_isr(cluster.bootstrap, TOPIC, 1), 300, "the wiped broker back in every ISR")
    copied = PER_PARTITION * VALUE_BYTES  # what the wiped broker would hold had it copied the history
    assert all(_local_bytes(wiped, p) < copied // 2 for p in range(PARTITIONS))

    # Local disk per broker and partition: the local retention, the active segment and what awaits copying.
    bound = LOCAL_RETENTION_BYTES + 3 * SEGMENT_BYTES
    wait_until(
        lambda: all(_local_bytes(b, p) <= bound for b in cluster.brokers.values() for p in range(PARTITIONS)),
        300,
        "local retention on every broker",
    )
    _check(_read_confluent, cluster.bootstrap)
    _check(_read_kafka_python, cluster.bootstrap)
    if SPARK:
        _check_spark(cluster.bootstrap)
