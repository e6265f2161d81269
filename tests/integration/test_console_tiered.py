"""The console's partition page of a tiered topic in headless Chromium: beside the local log, the remote
log as the broker's remote log manager has it (its first and highest offsets, size and segments), once
segments were copied to the object store and local retention removed them from the disk."""

from __future__ import annotations

import re
import time
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

TOPIC = "tiered"


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    overrides = {
        "remote.log.storage.system.enable": "true",
        "remote.log.manager.task.interval.ms": "200",
        "log.retention.check.interval.ms": "200",
        "rlmm.config.remote.log.metadata.topic.num.partitions": "1",
    }
    with BrokerProcess(tmp_path / "data", overrides) as proc:
        yield proc


def _remote_row(page: str) -> list[int] | None:
    found = re.search(r'id="remote-log">.*?<tbody><tr>(.*?)</tr>', page)
    if found is None:
        return None
    return [int(cell.replace(",", "").removesuffix(" B")) for cell in re.findall(r"<td>(.*?)</td>", found[1])]


def test_a_tiered_partitions_page_shows_its_remote_log(broker: BrokerProcess) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    configs = {"remote.storage.enable": "true", "segment.bytes": "16384", "local.retention.bytes": "20000"}
    admin.create_topics([NewTopic(TOPIC, 1, 1, config=configs)])[TOPIC].result(30)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5, "batch.num.messages": 20})
    for i in range(1500):
        producer.produce(TOPIC, b"%06d:" % i + b"x" * 94, partition=0)
    assert producer.flush(30) == 0

    url = f"{broker.http_url}/ui/topics/{TOPIC}/0"

    def remote_below_local() -> list[int] | None:
        with urllib.request.urlopen(url, timeout=30) as answer:
            row = _remote_row(answer.read().decode())
        # remote start, highest remote offset, local start, bytes, segments
        return row if row is not None and row[2] > 0 and row[0] == 0 else None

    deadline = time.monotonic() + 60
    while (row := remote_below_local()) is None:
        assert time.monotonic() < deadline, "segments copied and removed locally within 60 s"
        time.sleep(0.3)
    _, highest, local_start, size, segments = row
    assert local_start <= highest + 1 and size > 0 and segments >= 1

    with chromium() as driver:
        d: Any = driver
        d.get(url)
        cells = [c.text for c in d.find_elements(By.CSS_SELECTOR, "#remote-log tbody td")]
        assert cells[0] == "0" and int(cells[1]) >= highest and int(cells[2]) >= local_start
        screenshot(d, "partition-tiered")
