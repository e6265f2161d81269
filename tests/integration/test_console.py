"""The web console of a single broker in headless Chromium: every page, the charts of the metric history,
the message browser (newest first, from an offset, from a time, by key, "continue"; text, Avro, JSON
Schema and Protobuf through the registry; a compacted topic's gaps), a live group's members, assignment,
lag and lag chart, 404 pages; screenshots in test-artifacts/console/."""

from __future__ import annotations

import io
import json
import struct
import time
import urllib.request
import uuid
from collections.abc import Iterator
from typing import Any

import fastavro
import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from selenium.webdriver.common.by import By

from strom.testing import BrokerProcess
from tests.browser import chromium, click_and_wait, screenshot
from tests.spark.kafka_helpers import consume_all

SCHEMA = {
    "type": "record",
    "name": "Click",
    "fields": [{"name": "user", "type": "string"}, {"name": "n", "type": "int"}],
}
PROTO = 'syntax = "proto3";\npackage shop;\nmessage Order { string user = 1; int32 n = 2; }\n'
JSON_SCHEMA = {"type": "object", "properties": {"sku": {"type": "string"}}}


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """History buckets of one second, so that charts have points within the test; a cleaner that looks
    for work every 200 ms, so that a compacted topic is cleaned within the test."""
    overrides = {
        "group.initial.rebalance.delay.ms": "0",
        "http.console.history.interval.ms": "1000",
        "log.cleaner.backoff.ms": "200",
    }
    with BrokerProcess(tmp_path_factory.mktemp("console") / "data", overrides) as proc:
        yield proc


def _register(http_url: str, subject: str, schema: str, schema_type: str = "AVRO") -> int:
    body = json.dumps({"schema": schema, "schemaType": schema_type}).encode()
    request = urllib.request.Request(
        f"{http_url}/subjects/{subject}/versions",
        data=body,
        headers={"Content-Type": "application/vnd.schemaregistry.v1+json"},
    )
    with urllib.request.urlopen(request, timeout=60) as answer:
        return int(json.loads(answer.read())["id"])


def _framed(schema_id: int, payload: bytes) -> bytes:
    return b"\x00" + struct.pack(">I", schema_id) + payload


def _avro(schema_id: int, value: dict[str, object]) -> bytes:
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(SCHEMA), value)
    return _framed(schema_id, out.getvalue())


def _points(driver: Any, chart_id: str) -> int:
    return int(driver.find_element(By.ID, chart_id).get_attribute("data-points"))


def _wait(check: Any, seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.3)


def test_console_pages_in_chromium(broker: BrokerProcess) -> None:
    assert broker.http_url is not None
    topic, group = f"ui-{uuid.uuid4().hex[:6]}", f"ui-g-{uuid.uuid4().hex[:6]}"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic, 2, 1, config={"retention.ms": "3600000"})])[topic].result(30)
    avro_id = _register(broker.http_url, f"{topic}-value", json.dumps(SCHEMA))
    proto_id = _register(broker.http_url, f"{topic}-proto", PROTO, "PROTOBUF")
    json_id = _register(broker.http_url, f"{topic}-json", json.dumps(JSON_SCHEMA), "JSON")
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    start_ms = int(time.time() * 1000)
    for i in range(12):
        producer.produce(
            topic, f"text-{i}".encode(), key=f"k{i % 3}".encode(), partition=0, headers=[("src", b"ui")],
            timestamp=start_ms + 1000 * i,
        )  # fmt: skip
    producer.produce(topic, _avro(avro_id, {"user": "ada", "n": 7}), partition=1)
    producer.produce(topic, _framed(proto_id, b"\x00\x0a\x03bob\x10\x05"), partition=1)
    producer.produce(topic, _framed(json_id, b'{"sku": "x-1"}'), partition=1)
    producer.produce(topic, b"\x07raw\x00", key=b"\x01\x02", partition=1)  # binary: shown as hex
    assert producer.flush(30) == 0
    # A live member: the group page shows it, its assignment and its lag.
    consumer = Consumer(
        {"bootstrap.servers": broker.bootstrap, "group.id": group, "enable.auto.commit": False,
         "auto.offset.reset": "earliest"}
    )  # fmt: skip
    consumer.subscribe([topic])
    _wait(lambda: consumer.poll(0.5) is not None or bool(consumer.assignment()), 30, "an assignment")
    consumer.commit(offsets=[TopicPartition(topic, 0, 4), TopicPartition(topic, 1, 0)], asynchronous=False)

    base = broker.http_url
    try:
        with chromium() as driver:
            driver.get(f"{base}/ui/")
            assert "alive" in driver.find_element(By.ID, "brokers").text
            assert driver.find_element(By.ID, "urp").text == "0"
            assert driver.find_element(By.ID, "answered-by").text.startswith("Answered by broker 0")

            def cluster_chart_has_points() -> bool:
                driver.get(f"{base}/ui/")
                charts = ("chart-throughput", "chart-records", "chart-latency", "chart-health")
                return all(_points(driver, chart) > 0 for chart in charts)

            _wait(cluster_chart_has_points, 20, "the throughput chart's first points")
            screenshot(driver, "cluster")

            driver.get(f"{base}/ui/topics")
            assert topic in driver.find_element(By.ID, "topics").text
            screenshot(driver, "topics")

            driver.get(f"{base}/ui/topics/{topic}")
            assert "B0 P0 P1" in driver.find_element(By.ID, "seeds-table").text
            assert "retention.ms 3600000" in driver.find_element(By.ID, "configs").text
            assert _points(driver, "chart-topic-bytes") > 0
            screenshot(driver, "topic")

            # Newest first, then "continue" to the older ones.
            driver.get(f"{base}/ui/topics/{topic}/0?n=5")
            rows = driver.find_elements(By.CSS_SELECTOR, "#messages tbody tr")
            assert [r.text.split()[0] for r in rows] == ["11", "10", "9", "8", "7"]
            assert "k2" in rows[0].text and "text-11" in rows[0].text and "src=ui" in rows[0].text
            assert "12" in driver.find_element(By.ID, "offsets").text
            assert "Scanned 5 records" in driver.find_element(By.ID, "scan-summary").text
            screenshot(driver, "partition")
            click_and_wait(driver, driver.find_element(By.ID, "continue"))
            rows = driver.find_elements(By.CSS_SELECTOR, "#messages tbody tr")
            assert [r.text.split()[0] for r in rows] == ["6", "5", "4", "3", "2"]

            driver.get(f"{base}/ui/topics/{topic}/0?mode=offset&offset=3&n=2")
            rows = driver.find_elements(By.CSS_SELECTOR, "#messages tbody tr")
            assert [r.text.split()[0] for r in rows] == ["3", "4"]

            driver.get(f"{base}/ui/topics/{topic}/0?mode=timestamp&timestamp={start_ms + 9500}&n=10")
            rows = driver.find_elements(By.CSS_SELECTOR, "#messages tbody tr")
            assert [r.text.split()[0] for r in rows] == ["10", "11"]

            # By key, through the form.
            driver.get(f"{base}/ui/topics/{topic}/0")
            driver.find_element(By.CSS_SELECTOR, "select[name=mode] option[value=key]").click()
            driver.find_element(By.NAME, "key").send_keys("k1")
            click_and_wait(driver, driver.find_element(By.CSS_SELECTOR, "#browse button"))
            rows = driver.find_elements(By.CSS_SELECTOR, "#messages tbody tr")
            assert [r.text.split()[0] for r in rows] == ["10", "7", "4", "1"]
            screenshot(driver, "partition-by-key")

            driver.get(f"{base}/ui/topics/{topic}/1?mode=offset&offset=0")
            rows = [r.text for r in driver.find_elements(By.CSS_SELECTOR, "#messages tbody tr")]
            assert f"avro · schema {avro_id}" in rows[0] and '"user": "ada"' in rows[0]
            assert f"protobuf · schema {proto_id}" in rows[1] and '"user": "bob"' in rows[1]
            assert f"json · schema {json_id}" in rows[2] and '"sku": "x-1"' in rows[2]
            assert "0x0102" in rows[3] and "0x0772617700" in rows[3]
            screenshot(driver, "partition-decoded")
            driver.get(f"{base}/ui/topics/{topic}/1?mode=key&key=0x0102")  # the key as shown finds it
            rows = driver.find_elements(By.CSS_SELECTOR, "#messages tbody tr")
            assert [r.text.split()[0] for r in rows] == ["3"]

            driver.get(f"{base}/ui/topics/{topic}/0?mode=timestamp&timestamp=yesterday")
            assert "neither milliseconds nor ISO 8601" in driver.find_element(By.ID, "scan-error").text

            driver.get(f"{base}/ui/groups")
            listed = driver.find_element(By.ID, "groups").text
            assert f"{group} classic Stable 1 12" in listed  # (12 - 4) + (4 - 0)
            screenshot(driver, "groups")

            def group_has_lag_points() -> bool:
                driver.get(f"{base}/ui/groups/{group}")
                return _points(driver, "chart-lag") > 0

            _wait(group_has_lag_points, 20, "the lag chart's first points")
            assert "classic Stable" in driver.find_element(By.ID, "group-facts").text
            lag = driver.find_element(By.ID, "lag").text
            assert f"{topic} 0 4 12 8" in lag and f"{topic} 1 0 4 4" in lag
            assert f"{topic}: 0,1" in driver.find_element(By.ID, "members").text
            screenshot(driver, "group")

            for path, words in (
                ("/ui/no/such/page", "No console page"),
                ("/ui/topics/no-such-topic", "does not exist"),
                ("/ui/groups/no-such-group", "does not exist"),
            ):
                driver.get(base + path)
                assert "Not found" in driver.title and words in driver.page_source
    finally:
        consumer.close()


def _offsets(driver: Any) -> list[int]:
    return [int(r.text.split()[0]) for r in driver.find_elements(By.CSS_SELECTOR, "#messages tbody tr")]


def test_browsing_a_compacted_topic_by_key_and_by_time(broker: BrokerProcess) -> None:
    """Once the cleaner kept only each key's latest record below the active segment, the browser skips the
    gaps: by key it pages ("continue") through exactly the records a consumer sees with that key, newest
    first, looking at no offset the cleaner removed; from a removed record's time it starts at the first
    record kept after it."""
    topic = f"ui-compact-{uuid.uuid4().hex[:6]}"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    configs = {"cleanup.policy": "compact", "segment.bytes": "16384", "min.cleanable.dirty.ratio": "0.01"}
    admin.create_topics([NewTopic(topic, 1, 1, config=configs)])[topic].result(30)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "batch.size": 4096, "linger.ms": 5})
    start_ms = int(time.time() * 1000) - 1_000_000
    for i in range(3000):
        producer.produce(topic, f"v{i}".encode(), key=f"user-{i % 10}".encode(), timestamp=start_ms + 100 * i)
    assert producer.flush(30) == 0
    base = f"{broker.http_url}/ui/topics/{topic}/0"
    with chromium() as driver:

        def cleaned() -> list[dict[str, Any]] | None:
            """What a consumer sees (the oracle), once the cleaner is done: below the active segment only
            the last record of each key is left, the 10 just below it."""
            kept = consume_all(broker.bootstrap, topic, 1)
            driver.get(base)
            active = int(driver.find_elements(By.CSS_SELECTOR, "#segments tbody tr")[-1].text.split()[0])
            return kept if [r["offset"] for r in kept] == list(range(active - 10, 3000)) else None

        deadline = time.monotonic() + 90
        while (kept := cleaned()) is None:
            assert time.monotonic() < deadline, "the cleaner compacted the topic within 90 s"
            time.sleep(0.3)
        assert kept[0]["offset"] > 0

        expected = [r["offset"] for r in reversed(kept) if r["key"] == b"user-3"]
        driver.get(f"{base}?mode=key&key=user-3&n=500")
        assert _offsets(driver) == expected
        summary = driver.find_element(By.ID, "scan-summary").text
        # The gaps cost nothing: the one request looked at exactly the records the cleaner kept.
        assert summary.startswith(f"Scanned {len(kept):,} records") and "Nothing further" in summary, summary
        screenshot(driver, "partition-compacted-by-key")

        driver.get(f"{base}?mode=key&key=user-3&n=10")  # ten at a time, "continue" across the gaps
        found = _offsets(driver)
        while driver.find_elements(By.ID, "continue"):
            click_and_wait(driver, driver.find_element(By.ID, "continue"))
            found += _offsets(driver)
        assert found == expected

        removed = kept[0]["offset"] // 2  # below the first record kept, the cleaner removed every offset
        driver.get(f"{base}?mode=timestamp&timestamp={start_ms + 100 * removed}&n=3")
        assert _offsets(driver) == [r["offset"] for r in kept[:3]]
        assert kept[0]["value"].decode() in driver.find_element(By.CSS_SELECTOR, "#messages tbody tr").text


def test_console_answers_404_status(broker: BrokerProcess) -> None:
    import urllib.error

    for path in ("/ui/no/such/page", "/ui/topics/none-here", "/ui/topics/none-here/0"):
        try:
            urllib.request.urlopen(f"{broker.http_url}{path}", timeout=10)
        except urllib.error.HTTPError as err:
            assert err.code == 404 and "text/html" in err.headers["Content-Type"]
        else:
            raise AssertionError(f"{path} did not answer 404")
