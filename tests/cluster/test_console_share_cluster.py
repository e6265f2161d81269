"""A share group (KIP-932) in the console of a broker that does not coordinate it, on a 2-broker
ZooKeeper cluster in headless Chromium: the group list asks the other broker (ListGroups v5 names the
type, ShareGroupDescribe the members) and shows it as ``share`` and ``Stable``, not Dead; its page there
names the coordinator and the member's assignment."""

from __future__ import annotations

import re
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from selenium.webdriver.common.by import By

from strom.testing.cluster import LocalCluster
from tests.browser import chromium, screenshot
from tests.integration.kip848_clients import wait_until
from tests.integration.share_clients import ShareConsumerProcess

pytestmark = pytest.mark.cluster

TOPIC, GROUP = "jobs", "workers"


def _page(url: str) -> str:
    with urllib.request.urlopen(url, timeout=30) as answer:
        return str(answer.read().decode())


def test_a_share_group_seen_from_another_broker(make_cluster: Any, tmp_path: Path) -> None:
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
    try:
        assert wait_until(lambda: len(consumer.offsets()) >= 20, 60), consumer.snapshot()[-3:]
        urls = {i: str(b.http_url) for i, b in cluster.brokers.items()}
        found = re.search(r"Coordinated by broker (\d+)", _page(f"{urls[0]}/ui/groups/{GROUP}"))
        assert found is not None
        other = 1 - int(found[1])
        with chromium() as driver:
            d: Any = driver
            d.get(f"{urls[other]}/ui/groups")
            rows = [r.text.split() for r in d.find_elements(By.CSS_SELECTOR, "#groups tbody tr")]
            assert [GROUP, "share", "Stable", "1", "-"] in rows, rows
            d.get(f"{urls[other]}/ui/groups/{GROUP}")
            facts = [c.text for c in d.find_elements(By.CSS_SELECTOR, "#group-facts tbody td")]
            assert facts[:2] == ["share", "Stable"], facts
            assert d.find_element(By.ID, "coordinator").text.startswith(f"Coordinated by broker {found[1]}")
            member = [c.text for c in d.find_elements(By.CSS_SELECTOR, "#members tbody td")]
            assert member[3] == f"{TOPIC}: 0,1", member
            screenshot(d, "group-share-other-broker")
    finally:
        consumer.kill()
