"""An offline log dir (KIP-112, JBOD) on a 3-broker cluster with a real ZooKeeper.

Every broker has two log dirs; broker 0's second one is a small tmpfs. A topic with three replicas
(min.insync.replicas=2) has broker 0 as the leader of every partition, two of them in that tmpfs. While
a confluent-kafka producer with acks=all writes, a filler file takes every free byte of the tmpfs: the
next write there fails, broker 0 takes the dir offline and tells the controller, which moves the
leadership of those partitions to other ISR members and takes broker 0 out of their ISRs; the
partitions in broker 0's other dir stay led by it. DescribeLogDirs reports the dir with
KAFKA_STORAGE_ERROR. Nothing acknowledged is lost. Then the filler goes, broker 0 restarts, loads the
dir again and rejoins every ISR.

A segment roll in a dir made read-only under broker 0 (a read-only bind mount: open segments still
take appends, a new one cannot be made) answers the producer KAFKA_STORAGE_ERROR, then the
leaderships move and the same producer's records are acknowledged by the new leader.

A write of the broker's own, with no client writing, fails the dir the same way: the tmpfs made
read-only under an idle broker 0, its next offset checkpoint (every 300 ms here) fails, and the
leaderships move; a producer then writes to every partition and a consumer reads it all back.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Message, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from strom.protocol.errors import ErrorCode
from strom.testing.cluster import LocalCluster
from tests.cluster.conftest import FAST, partitions_of, wait_until
from tests.cluster.jbod import dir_error, place, two_dirs
from tests.prerequisites import require_zookeeper
from tests.tmpfs import TMPFS_BYTES, fill, mounted_tmpfs, read_only

TOPIC = "jbod"
PARTITIONS = 4
VICTIM = 0


def _jbod_cluster(base: Path, **settings: str) -> Iterator[tuple[LocalCluster, Path]]:
    require_zookeeper()

    with mounted_tmpfs(base / f"broker-{VICTIM}" / "logs-b") as failing:
        cluster = LocalCluster(base, 3, 0, {**FAST, **settings}, broker_factory=two_dirs)
        try:
            cluster.start()
            yield cluster, failing
        finally:
            cluster.stop()


@pytest.fixture
def jbod_cluster(tmp_path: Path) -> Iterator[tuple[LocalCluster, Path]]:
    yield from _jbod_cluster(tmp_path / "cluster")


@pytest.fixture
def checkpointing_jbod_cluster(tmp_path: Path) -> Iterator[tuple[LocalCluster, Path]]:
    yield from _jbod_cluster(tmp_path / "cluster", **{"log.flush.offset.checkpoint.interval.ms": "300"})


class _Writer:
    """A producer thread with acks=all; the values it had acknowledged."""

    def __init__(self, bootstrap: str) -> None:
        self.acked: set[int] = set()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _delivered(self, err: KafkaError | None, msg: Message) -> None:
        value = msg.value()
        if err is None and value is not None:
            with self._lock:
                self.acked.add(int(value))

    def count(self) -> int:
        with self._lock:
            return len(self.acked)

    def _run(self) -> None:
        i = 0
        while not self._stop.is_set():
            self._producer.produce(
                TOPIC, str(i).encode(), partition=i % PARTITIONS, on_delivery=self._delivered
            )
            self._producer.poll(0.005)
            i += 1

    def stop(self) -> set[int]:
        self._stop.set()
        self._thread.join(30)
        assert self._producer.flush(120) == 0
        with self._lock:
            return set(self.acked)


def _read_back(bootstrap: str, wanted: set[int]) -> set[int]:
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "jbod-check", "enable.auto.commit": False}
    )
    consumer.assign([TopicPartition(TOPIC, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
    seen: set[int] = set()
    try:

        def caught_up() -> bool:
            for msg in consumer.consume(500, 1.0):
                value = msg.value()
                if msg.error() is None and value is not None:
                    seen.add(int(value))
            return wanted <= seen

        wait_until(caught_up, 120, "every acknowledged record to be read back")
    finally:
        consumer.close()
    return seen


def _led_by_victim(cluster: LocalCluster, failing: Path, **configs: str) -> tuple[set[int], set[int]]:
    """The topic made with broker 0 leading every partition; (partitions in its failing dir, others)."""
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    assignment = [[VICTIM, 1, 2] if p % 2 else [VICTIM, 2, 1] for p in range(PARTITIONS)]
    config = {"min.insync.replicas": "2", **configs}
    topic = NewTopic(TOPIC, PARTITIONS, replica_assignment=assignment, config=config)
    in_failing, healthy = {0, 1}, {2, 3}
    dirs = {p: failing if p in in_failing else failing.parent / "logs-a" for p in range(PARTITIONS)}
    place(cluster.brokers[VICTIM].bootstrap, VICTIM, TOPIC, dirs)
    admin.create_topics([topic])[TOPIC].result(30)
    wait_until(
        lambda: all(
            leader == VICTIM and len(isr) == 3
            for leader, _, isr in partitions_of(cluster.bootstrap, TOPIC).values()
        ),
        60,
        "broker 0 to lead every partition with a full ISR",
    )
    assert {p for p in range(PARTITIONS) if (failing / f"{TOPIC}-{p}").is_dir()} == in_failing
    return in_failing, healthy


def _wait_moved(cluster: LocalCluster, in_failing: set[int], healthy: set[int]) -> None:
    def moved() -> bool:
        states = partitions_of(cluster.bootstrap, TOPIC)
        return all(
            states[p][0] not in (VICTIM, -1) and VICTIM not in states[p][2] for p in in_failing
        ) and all(states[p][0] == VICTIM for p in healthy)

    wait_until(moved, 90, "the failed dir's leaderships to move and broker 0 to leave their ISRs")


def test_a_failed_log_dir_goes_offline_and_its_leaderships_move(
    jbod_cluster: tuple[LocalCluster, Path],
) -> None:
    cluster, failing = jbod_cluster
    in_failing, healthy = _led_by_victim(cluster, failing)

    writer = _Writer(cluster.bootstrap)
    try:
        wait_until(lambda: writer.count() >= 300, 60, "the first acknowledged records")
        fill(failing / "filler", TMPFS_BYTES)
        _wait_moved(cluster, in_failing, healthy)
        assert dir_error(cluster.brokers[VICTIM].bootstrap, VICTIM, failing) == ErrorCode.KAFKA_STORAGE_ERROR
        after_move = writer.count()
        wait_until(lambda: writer.count() >= after_move + 300, 60, "more acknowledged records after the move")
    finally:
        acked = writer.stop()
    assert acked <= _read_back(cluster.bootstrap, acked)

    # The dir healthy again, a restart brings it back: broker 0 rejoins every ISR.
    (failing / "filler").unlink()
    victim = cluster.brokers[VICTIM]
    victim.stop(timeout_s=30)
    victim.start()
    wait_until(
        lambda: all(VICTIM in isr for _, _, isr in partitions_of(cluster.bootstrap, TOPIC).values()),
        90,
        "broker 0 back in every ISR",
    )
    assert dir_error(victim.bootstrap, VICTIM, failing) == ErrorCode.NONE


def test_a_failed_checkpoint_of_an_idle_broker_takes_the_dir_offline(
    checkpointing_jbod_cluster: tuple[LocalCluster, Path],
) -> None:
    cluster, failing = checkpointing_jbod_cluster
    in_failing, healthy = _led_by_victim(cluster, failing)
    with read_only(failing):
        _wait_moved(cluster, in_failing, healthy)
        assert dir_error(cluster.brokers[VICTIM].bootstrap, VICTIM, failing) == ErrorCode.KAFKA_STORAGE_ERROR
        writer = _Writer(cluster.bootstrap)
        try:
            wait_until(lambda: writer.count() >= 300, 60, "acknowledged records on every partition")
        finally:
            acked = writer.stop()
        assert {int(v) % PARTITIONS for v in acked} == set(range(PARTITIONS))
        assert acked <= _read_back(cluster.bootstrap, acked)


def test_a_failed_segment_roll_answers_storage_error_and_the_leaderships_move(
    jbod_cluster: tuple[LocalCluster, Path],
) -> None:
    cluster, failing = jbod_cluster
    in_failing, healthy = _led_by_victim(cluster, failing, **{"segment.bytes": "2000"})
    partition = min(in_failing)
    # No retries: each delivery report carries the broker's answer to that very produce.
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "retries": 0, "linger.ms": 0})
    errors: list[int] = []

    def delivered(err: KafkaError | None, _msg: Message) -> None:
        errors.append(KafkaError.NO_ERROR if err is None else err.code())

    def produce_one() -> int:
        errors.clear()
        producer.produce(TOPIC, b"x" * 300, partition=partition, on_delivery=delivered)
        assert producer.flush(30) == 0
        return errors[0]

    with read_only(failing):
        wait_until(lambda: produce_one() != KafkaError.NO_ERROR, 60, "a produce that needs a new segment")
        assert errors == [KafkaError.KAFKA_STORAGE_ERROR]
        _wait_moved(cluster, in_failing, healthy)
        wait_until(
            lambda: produce_one() == KafkaError.NO_ERROR, 60, "a produce acknowledged by the new leader"
        )
