"""``/metrics`` across a 3-broker ZooKeeper cluster: messages in summed over brokers, under-replicated
partitions while a follower is stopped (SIGSTOP) and after it resumes (SIGCONT)."""

from __future__ import annotations

import signal
import time
from typing import Any

import pytest
from confluent_kafka import Producer

from strom.testing.cluster import LocalCluster
from strom.testing.metrics import scrape, value

from .conftest import wait_until
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
