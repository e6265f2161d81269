"""A share group (KIP-932) and a consumer group (KIP-848) in the console of a broker that does not
coordinate them, on a 2-broker ZooKeeper cluster in headless Chromium: the group list asks the other
broker (ListGroups v5 names the type, ShareGroupDescribe and ConsumerGroupDescribe the members) and shows
them as ``share`` and ``consumer``, ``Stable``, not Dead or unknown; their pages there name the
coordinator and the member's assignment, and the consumer group's lag per partition."""

from __future__ import annotations

import re
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from selenium.webdriver.common.by import By

from strom.testing.cluster import LocalCluster
from tests.browser import chromium, screenshot
from tests.integration.kip848_clients import wait_until
from tests.integration.share_clients import ShareConsumerProcess

pytestmark = pytest.mark.cluster

TOPIC, GROUP, CONSUMER_GROUP = "jobs", "workers", "billing"


def _page(url: str) -> str:
    with urllib.request.urlopen(url, timeout=30) as answer:
        return str(answer.read().decode())


def _seen_from_another_broker(d: Any, urls: dict[int, str], row: list[str]) -> tuple[list[str], list[str]]:
    """Group ``row[0]`` at the broker that does not coordinate it: its row in the group list is ``row``,
    its page names the coordinator; the page's facts and first member's cells."""
    group = row[0]
    found = re.search(r"Coordinated by broker (\d+)", _page(f"{urls[0]}/ui/groups/{group}"))
    assert found is not None, group
    other = urls[1 - int(found[1])]
    d.get(f"{other}/ui/groups")
    rows = [r.text.split() for r in d.find_elements(By.CSS_SELECTOR, "#groups tbody tr")]
    assert row in rows, rows
    d.get(f"{other}/ui/groups/{group}")
    assert d.find_element(By.ID, "coordinator").text.startswith(f"Coordinated by broker {found[1]}")
    facts = [c.text for c in d.find_elements(By.CSS_SELECTOR, "#group-facts tbody td")]
    return facts, [c.text for c in d.find_elements(By.CSS_SELECTOR, "#members tbody td")]


def test_share_and_kip848_groups_seen_from_another_broker(make_cluster: Any, tmp_path: Path) -> None:
    cluster: LocalCluster = make_cluster(
        2,
        offsets_topic_replication_factor="1",
        share_auto_offset_reset="earliest",
        group_share_heartbeat_interval_ms="500",
    )
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(TOPIC, 2, 1)])[TOPIC].result(30)
    producer = Producer({"bootstrap.servers": cluster.bootstrap})
    for i in range(20):
        producer.produce(TOPIC, f"job-{i}".encode(), partition=i % 2)
    assert producer.flush(30) == 0
    consumer = ShareConsumerProcess(
        tmp_path, "share-cluster", {"bootstrap": cluster.bootstrap, "topics": [TOPIC], "group": GROUP}
    )
    # A KIP-848 member (ConsumerGroupHeartbeat), its group's offsets committed at 4 and 3 of 10.
    member = Consumer(
        {"bootstrap.servers": cluster.bootstrap, "group.id": CONSUMER_GROUP, "group.protocol": "consumer",
         "enable.auto.commit": False}
    )  # fmt: skip
    try:
        member.subscribe([TOPIC])

        def assigned() -> bool:
            member.poll(0.2)  # the assignment is applied within poll
            return len(member.assignment()) == 2

        assert wait_until(assigned, 60), member.assignment()
        member.commit(offsets=[TopicPartition(TOPIC, 0, 4), TopicPartition(TOPIC, 1, 3)], asynchronous=False)
        assert wait_until(lambda: len(consumer.offsets()) >= 20, 60), consumer.snapshot()[-3:]
        urls = {i: str(b.http_url) for i, b in cluster.brokers.items()}
        with chromium() as driver:
            d: Any = driver
            facts, shown = _seen_from_another_broker(d, urls, [GROUP, "share", "Stable", "1", "-"])
            assert facts[:2] == ["share", "Stable"], facts
            assert shown[3] == f"{TOPIC}: 0,1", shown
            screenshot(d, "group-share-other-broker")

            facts, shown = _seen_from_another_broker(
                d, urls, [CONSUMER_GROUP, "consumer", "Stable", "1", "-"]
            )
            assert facts[:3] == ["consumer", "Stable", "consumer"], facts
            assert shown[3] == f"{TOPIC}: 0,1", shown
            lag = d.find_element(By.ID, "lag").text
            assert f"{TOPIC} 0 4 10 6 {shown[0]}" in lag and f"{TOPIC} 1 3 10 7 {shown[0]}" in lag, lag
            screenshot(d, "group-kip848-other-broker")
    finally:
        member.close()
        consumer.kill()
