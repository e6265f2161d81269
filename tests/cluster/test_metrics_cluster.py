"""``/metrics`` across a 3-broker ZooKeeper cluster: messages in summed over brokers, under-replicated
partitions while a follower is stopped (SIGSTOP) and after it resumes (SIGCONT)."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from strom.testing.cluster import LocalCluster
from strom.testing.metrics import scrape, value

from .conftest import partitions_of, wait_until
from .test_cluster import create_topic

pytestmark = pytest.mark.cluster

LAG_MS = 1000


def _urls(cluster: LocalCluster) -> dict[int, str]:
    urls = {b: proc.http_url for b, proc in cluster.brokers.items()}
    assert all(urls.values())
    return {b: str(u) for b, u in urls.items()}


def test_messages_in_and_under_replicated_partitions(make_cluster: Any) -> None:
    # A long ZooKeeper session: the ISR shrink must come from the leaders' own lag check, not from the
    # controller noticing an expired session.
    cluster: LocalCluster = make_cluster(
        3, replica_lag_time_max_ms=str(LAG_MS), zookeeper_session_timeout_ms="20000"
    )
    create_topic(cluster.bootstrap, "metered", 3, 3)
    urls = _urls(cluster)
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "linger.ms": 5})
    for i in range(300):
        producer.produce("metered", str(i).encode(), key=str(i).encode())
    assert producer.flush(30) == 0

    def messages_in() -> float:
        name = "kafka_server_brokertopicmetrics_messagesin_total"
        return sum(value(scrape(url), name, topic="metered") for url in urls.values())

    assert messages_in() == 300  # counted once, by each partition's leader
    wait_until(
        lambda: all(
            value(scrape(u), "kafka_server_replicamanager_underreplicatedpartitions") == 0
            for u in urls.values()
        ),
        what="every ISR complete",
    )

    samples = {b: scrape(u) for b, u in urls.items()}
    controller = [
        b for b, s in samples.items() if value(s, "kafka_controller_kafkacontroller_activecontrollercount")
    ]
    assert len(controller) == 1
    stopped = next(b for b in urls if b != controller[0])
    others = [b for b in urls if b != stopped]
    shrinks_before = sum(value(samples[b], "kafka_server_replicamanager_isrshrinks_total") for b in others)

    def under_replicated() -> float:
        return sum(
            value(scrape(urls[b]), "kafka_server_replicamanager_underreplicatedpartitions") for b in others
        )

    cluster.brokers[stopped].signal(signal.SIGSTOP)
    started = time.monotonic()
    try:
        # The leaders check every lag/2; allow the check period and scraping on a loaded machine.
        wait_until(lambda: under_replicated() > 0, 3 * LAG_MS / 1000 + 2, "under-replicated partitions")
        noticed_s = time.monotonic() - started
        shrinks = sum(value(scrape(urls[b]), "kafka_server_replicamanager_isrshrinks_total") for b in others)
        assert shrinks > shrinks_before
    finally:
        cluster.brokers[stopped].signal(signal.SIGCONT)
    assert noticed_s < 3 * LAG_MS / 1000 + 2
    wait_until(lambda: under_replicated() == 0, 30, "the follower back in every ISR")
    assert sum(value(scrape(urls[b]), "kafka_server_replicamanager_isrexpands_total") for b in others) > 0


def test_consumer_lag_of_every_committed_partition_on_the_coordinator(make_cluster: Any) -> None:
    """A group's lag series come from its coordinator alone, one per committed partition (as
    kafka_exporter's), equal to `strom groups describe`'s LAG: also for partitions of an RF 1 topic
    that the coordinator holds no replica of (their high watermarks are asked of the leaders in the
    background), and they follow new records there within a refresh interval."""
    cluster: LocalCluster = make_cluster(3)
    create_topic(cluster.bootstrap, "lag-rf3", 3, 3)  # a replica of every partition on every broker
    create_topic(cluster.bootstrap, "lag-rf1", 3, 1)  # one broker per partition
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
    for topic in ("lag-rf3", "lag-rf1"):
        for partition, count in enumerate((30, 20, 10)):
            for i in range(count):
                producer.produce(topic, str(i).encode(), partition=partition)
    assert producer.flush(30) == 0
    group = "lag-group"
    consumer = Consumer(
        {"bootstrap.servers": cluster.bootstrap, "group.id": group, "enable.auto.commit": False}
    )
    committed = [TopicPartition(t, p, o) for t in ("lag-rf3", "lag-rf1") for p, o in enumerate((5, 20, 0))]
    consumer.commit(offsets=committed, asynchronous=False)
    consumer.close()

    def described_lag() -> dict[tuple[str, int], float]:
        described = subprocess.run(
            [
                sys.executable,
                "-m",
                "strom.cli.main",
                "--bootstrap-server",
                cluster.bootstrap,
                "groups",
                "describe",
                group,
            ],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        ).stdout
        rows = [line.split() for line in described.splitlines()[2:] if line.strip()]
        return {(cols[0], int(cols[1])): float(cols[4]) for cols in rows}

    expected = described_lag()
    assert expected == {
        (t, p): lag for t in ("lag-rf3", "lag-rf1") for p, lag in enumerate((25.0, 0.0, 10.0))
    }

    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    (future,) = admin.describe_consumer_groups([group]).values()
    coordinator = future.result(10).coordinator.id
    remote = sorted(
        p
        for p, (_, replicas, _) in partitions_of(cluster.bootstrap, "lag-rf1").items()
        if coordinator not in replicas
    )
    assert len(remote) == 2  # RF 1 over three brokers: two partitions have no replica on the coordinator

    def exported() -> dict[int, dict[tuple[str, int], float]]:
        by_broker: dict[int, dict[tuple[str, int], float]] = {}
        for broker, url in _urls(cluster).items():
            series = scrape(url).get("kafka_consumergroup_lag", {})
            for labels, lag in series.items():
                label = dict(labels)
                if label["consumergroup"] == group:
                    by_broker.setdefault(broker, {})[(label["topic"], int(label["partition"]))] = lag
        return by_broker

    # The first scrape starts the background refresh; a follower's high watermark trails the leader's
    # by at most a fetch.
    wait_until(lambda: exported() == {coordinator: expected}, 30, "the coordinator's lag series")

    for _ in range(7):
        producer.produce("lag-rf1", b"more", partition=remote[0])
    assert producer.flush(30) == 0
    producer.close()
    expected = described_lag()
    assert expected[("lag-rf1", remote[0])] == (25.0, 0.0, 10.0)[remote[0]] + 7
    wait_until(lambda: exported() == {coordinator: expected}, 20, "lag following the remote leader")
