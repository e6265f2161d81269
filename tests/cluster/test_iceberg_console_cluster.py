"""The console's Iceberg translation lag on a 2-broker cluster (ZooKeeper, two broker processes, one
SQL catalog they share): a topic's partition 0 is led by broker 0 and partition 1 by broker 1, each
translated by its leader. With the next commits ten minutes away, records produced after the first
rounds wait; broker 0's topic page (over HTTP, and in headless Chromium) shows both partitions' lag:
its own from its translator (with the rows it appended) and partition 1's asked of broker 1, as
``strom topics describe`` asks (ListOffsets with Strom's table timestamp)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from selenium.webdriver.common.by import By

from strom.testing.cluster import LocalCluster
from tests.browser import chromium, screenshot
from tests.cluster.conftest import wait_until
from tests.cluster.test_iceberg_cluster import lake_cluster, lake_rows
from tests.integration.test_iceberg_maintenance import console_lag

TOPIC = "lake-lag-everywhere"


def _produce(cluster: LocalCluster, per_partition: int, tag: str) -> None:
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "enable.idempotence": True})
    for partition in (0, 1):
        for i in range(per_partition):
            producer.produce(TOPIC, f"{tag}-{i}".encode(), partition=partition)
    assert producer.flush(60) == 0


def test_every_partitions_lag_on_the_console_of_one_broker(
    make_cluster: Callable[..., Any], tmp_path: Path
) -> None:
    cluster, catalog_dir = lake_cluster(make_cluster, tmp_path, 2)
    configs = {"strom.iceberg.mode": "key_value", "strom.iceberg.target.lag.ms": "600000"}
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    topic = NewTopic(TOPIC, 2, replica_assignment=[[0], [1]], config=configs)
    for future in admin.create_topics([topic]).values():
        future.result(30)

    def table_rows() -> int:
        return len(lake_rows(catalog_dir, TOPIC, []))

    _produce(cluster, 2, "first")  # each partition's first round commits at once
    wait_until(lambda: table_rows() == 4, 90, "the first rounds' commits")
    _produce(cluster, 3, "waiting")  # the next commits are ten minutes away
    url = cluster.brokers[0].http_url

    def shown() -> dict[int, list[str]]:
        return {p: cells[:1] + cells[2:] for p, cells in console_lag(url, TOPIC).items()}

    # records not in the table, the next offset in the table, rows, dead letters, translated by
    expected = {0: ["3", "2", "2", "0", "0"], 1: ["3", "2", "-", "-", "1"]}
    wait_until(lambda: shown() == expected, 60, "both partitions' lag on broker 0's page")
    wait_until(lambda: float(console_lag(url, TOPIC)[1][1]) >= 1.0, 60, "partition 1's wait in seconds")
    assert table_rows() == 4  # nothing more was committed meanwhile

    with chromium() as driver:  # as a person sees it
        d: Any = driver
        d.get(f"{url}/ui/topics/{TOPIC}")
        rows = [r.text.split() for r in d.find_elements(By.CSS_SELECTOR, "#lake-lag tbody tr")]
        assert [r[:2] + r[3:] for r in rows] == [["0", *expected[0]], ["1", *expected[1]]], rows
        d.execute_script("arguments[0].scrollIntoView()", d.find_element(By.ID, "lake-lag"))
        screenshot(d, "topic-lake-lag-cluster")
