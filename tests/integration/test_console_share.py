"""A share group (KIP-932) in the console, in headless Chromium: listed as type ``share`` (not Dead or
unknown), and its page with the member confluent-kafka's ShareConsumer joined as, its assignment, and per
partition the share-partition start offset and the backlog, which falls to 0 once every record was
acknowledged."""

from __future__ import annotations

import re
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from selenium.webdriver.common.by import By

from strom.testing import BrokerProcess
from tests.browser import chromium, screenshot
from tests.integration.kip848_clients import wait_until
from tests.integration.share_clients import ShareConsumerProcess

TOPIC, GROUP = "jobs", "workers"
CONFIGS = {
    "share.auto.offset.reset": "earliest",
    "group.share.heartbeat.interval.ms": "500",
    "group.share.session.timeout.ms": "6000",
}


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    with BrokerProcess(tmp_path / "data", CONFIGS) as proc:
        yield proc


def _page(url: str) -> str:
    with urllib.request.urlopen(url, timeout=30) as answer:
        return str(answer.read().decode())


def test_a_share_groups_pages(broker: BrokerProcess, tmp_path: Path) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})  # kept: its futures need the handle
    admin.create_topics([NewTopic(TOPIC, 1, 1)])[TOPIC].result(30)
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(30):
        producer.produce(TOPIC, f"job-{i}".encode(), partition=0)
    assert producer.flush(30) == 0
    consumer = ShareConsumerProcess(
        tmp_path, "share-console", {"bootstrap": broker.bootstrap, "topics": [TOPIC], "group": GROUP}
    )
    try:
        assert wait_until(lambda: len(set(consumer.offsets())) == 30, 60), consumer.snapshot()[-3:]
        url = f"{broker.http_url}/ui/groups/{GROUP}"
        # The client acknowledges each poll's records on its next poll: the backlog drains to 0.
        assert wait_until(lambda: re.search(r"<td>0</td><td>30</td><td>30</td><td>0</td>", _page(url)), 30)
        with chromium() as driver:
            d: Any = driver
            d.get(f"{broker.http_url}/ui/groups")
            rows = [r.text.split() for r in d.find_elements(By.CSS_SELECTOR, "#groups tbody tr")]
            assert [GROUP, "share", "Stable", "1", "0"] in rows, rows
            d.get(url)
            facts = [c.text for c in d.find_elements(By.CSS_SELECTOR, "#group-facts tbody td")]
            assert facts[:4] == ["share", "Stable", "share", "simple"] and facts[5:] == ["1", "0"], facts
            member = [c.text for c in d.find_elements(By.CSS_SELECTOR, "#members tbody td")]
            assert member[3] == f"{TOPIC}: 0", member
            offsets = [c.text for c in d.find_elements(By.CSS_SELECTOR, "#lag tbody td")]
            assert offsets == [TOPIC, "0", "30", "30", "0", member[0]], offsets
            assert d.find_element(By.ID, "share-note").text.startswith("A share group (KIP-932)")
            assert "reset offsets" not in d.page_source
            screenshot(d, "group-share")
    finally:
        consumer.kill()
