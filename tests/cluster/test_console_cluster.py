"""The console's topic page on the reference cluster (6 brokers, racks R1 = {0,1,2}, R2 = {3,4,5}) in
headless Chromium: topic Invoice (10 partitions, RF 3) draws the reference table, and the open page follows
a broker's death (kill -9) without a reload: the broker is marked down, its replicas out of sync and its
partitions led by their first followers; once it is back, the leader's cluster page charts the ISR
expansions."""

from __future__ import annotations

import time
from typing import Any

import pytest
from selenium.webdriver.common.by import By

from strom.testing.cluster import LocalCluster
from strom.web.console.charts import COLOURS
from tests.browser import chromium, screenshot

from .conftest import partitions_of, wait_until
from .test_cluster import create_topic

pytestmark = pytest.mark.cluster

SEEDS_ROWS = [
    "Brokers Leaders Followers Followers",
    "R1-B0 P0 P6 P5 P4",
    "R2-B3 P1 P7 P0 P6 P5",
    "R1-B1 P2 P8 P1 P7 P0 P6",
    "R2-B4 P3 P9 P2 P8 P1 P7",
    "R1-B2 P4 P3 P9 P2 P8",
    "R2-B5 P5 P4 P3 P9",
]


def test_topic_page_draws_the_seeds_table_and_follows_a_broker_death(make_cluster: Any) -> None:
    cluster: LocalCluster = make_cluster(6, racks=2, http_console_history_interval_ms="1000")
    create_topic(cluster.bootstrap, "Invoice", 10, 3)
    url = cluster.brokers[0].http_url
    assert url is not None
    with chromium() as driver:
        driver.get(f"{url}/ui/topics/Invoice")  # type: ignore[attr-defined]
        table = driver.find_element(By.ID, "seeds-table")  # type: ignore[attr-defined]
        assert table.text.splitlines() == SEEDS_ROWS
        screenshot(driver, "invoice-healthy")

        cluster.brokers[3].kill()
        wait_until(lambda: 3 not in {p[0] for p in partitions_of(cluster.bootstrap, "Invoice").values()}, 30)

        def row(label: str) -> Any:
            box = driver.find_element(By.ID, "broker-table")  # type: ignore[attr-defined]
            return next(r for r in box.find_elements(By.TAG_NAME, "tr") if r.text.startswith(label))

        started = time.monotonic()
        wait_until(lambda: "(down)" in row("R2-B3").text, 20, "the page to mark R2-B3 down")
        assert time.monotonic() - started < 20
        dead = row("R2-B3")
        assert len(dead.find_elements(By.CSS_SELECTOR, ".outofsync")) == 5  # P1 P7 | P0 P6 | P5
        moved = [e.text for e in row("R1-B1").find_elements(By.CSS_SELECTOR, ".moved")]
        assert moved == ["P1", "P7"]  # the first followers of B3's partitions lead them now
        screenshot(driver, "invoice-broker-3-killed")

        # B3 back: B0, leading P0 and P6, takes it into their ISRs again; its cluster page charts that.
        def expansions_charted() -> bool:
            """The chart's "expands" line (its second colour) rises above zero in some bucket."""
            driver.get(f"{url}/ui/")  # type: ignore[attr-defined]
            chart = driver.find_element(By.ID, "chart-isr")  # type: ignore[attr-defined]
            zero = float(chart.find_element(By.TAG_NAME, "line").get_attribute("y1"))  # the time axis
            ys = [
                float(xy.split(",")[1])
                for line in chart.find_elements(By.CSS_SELECTOR, f"polyline[stroke='{COLOURS[1]}']")
                for xy in line.get_attribute("points").split()
            ]
            ys += [
                float(dot.get_attribute("cy"))
                for dot in chart.find_elements(By.CSS_SELECTOR, f"circle[fill='{COLOURS[1]}']")
            ]
            return any(y < zero for y in ys)

        assert not expansions_charted()  # the controller took B3 out: no expansion yet
        cluster.brokers[3].start()
        wait_until(expansions_charted, 60, "broker 0's ISR expansions on its cluster chart")
        driver.execute_script("document.getElementById('chart-isr').scrollIntoView()")  # type: ignore[attr-defined]
        screenshot(driver, "cluster-isr-expanded")
