"""The web console of a single broker in headless Chromium: every page, the message browser (text and
Avro through the registry), 404 pages; screenshots in test-artifacts/console/."""

from __future__ import annotations

import json
import struct
import urllib.request
import uuid

import fastavro
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from selenium.webdriver.common.by import By

from strom.testing import BrokerProcess
from tests.browser import chromium, screenshot

SCHEMA = {
    "type": "record",
    "name": "Click",
    "fields": [{"name": "user", "type": "string"}, {"name": "n", "type": "int"}],
}


def _register(http_url: str, subject: str) -> int:
    body = json.dumps({"schema": json.dumps(SCHEMA)}).encode()
    request = urllib.request.Request(
        f"{http_url}/subjects/{subject}/versions",
        data=body,
        headers={"Content-Type": "application/vnd.schemaregistry.v1+json"},
    )
    with urllib.request.urlopen(request, timeout=30) as answer:
        return int(json.loads(answer.read())["id"])


def _avro(schema_id: int, value: dict[str, object]) -> bytes:
    import io

    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(SCHEMA), value)
    return b"\x00" + struct.pack(">I", schema_id) + out.getvalue()


def test_console_pages_in_chromium(broker: BrokerProcess) -> None:
    assert broker.http_url is not None
    topic, group = f"ui-{uuid.uuid4().hex[:6]}", f"ui-g-{uuid.uuid4().hex[:6]}"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic, 2, 1, config={"retention.ms": "3600000"})])[topic].result(30)
    schema_id = _register(broker.http_url, f"{topic}-value")
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(12):
        producer.produce(
            topic, f"text-{i}".encode(), key=f"k{i}".encode(), partition=0, headers=[("src", b"ui")]
        )
    producer.produce(topic, _avro(schema_id, {"user": "ada", "n": 7}), partition=1)
    assert producer.flush(30) == 0
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group})
    consumer.commit(offsets=[TopicPartition(topic, 0, 4)], asynchronous=False)
    consumer.close()

    base = broker.http_url
    with chromium() as driver:
        driver.get(f"{base}/ui/")  # type: ignore[attr-defined]
        brokers = driver.find_element(By.ID, "brokers").text  # type: ignore[attr-defined]
        assert "alive" in brokers and "controller" in brokers
        assert driver.find_element(By.ID, "urp").text == "0"  # type: ignore[attr-defined]
        screenshot(driver, "cluster")

        driver.get(f"{base}/ui/topics")  # type: ignore[attr-defined]
        assert topic in driver.find_element(By.ID, "topics").text  # type: ignore[attr-defined]
        screenshot(driver, "topics")

        driver.get(f"{base}/ui/topics/{topic}")  # type: ignore[attr-defined]
        seeds = driver.find_element(By.ID, "seeds-table").text  # type: ignore[attr-defined]
        assert "B0 P0 P1" in seeds
        assert "retention.ms 3600000" in driver.find_element(By.ID, "configs").text  # type: ignore[attr-defined]
        screenshot(driver, "topic")

        driver.get(f"{base}/ui/topics/{topic}/0?n=5")  # type: ignore[attr-defined]
        rows = driver.find_elements(By.CSS_SELECTOR, "#messages tbody tr")  # type: ignore[attr-defined]
        assert [r.text.split()[0] for r in rows] == ["7", "8", "9", "10", "11"]
        assert "k11" in rows[-1].text and "text-11" in rows[-1].text and "src=ui" in rows[-1].text
        assert "12" in driver.find_element(By.ID, "offsets").text  # type: ignore[attr-defined]
        screenshot(driver, "partition")

        driver.get(f"{base}/ui/topics/{topic}/1")  # type: ignore[attr-defined]
        avro = driver.find_element(By.CSS_SELECTOR, "#messages tbody tr").text  # type: ignore[attr-defined]
        assert f"(schema {schema_id})" in avro and '"user": "ada"' in avro and '"n": 7' in avro

        driver.get(f"{base}/ui/groups/{group}")  # type: ignore[attr-defined]
        lag = driver.find_element(By.ID, "lag").text  # type: ignore[attr-defined]
        assert f"{topic} 0 4 12 8" in lag
        screenshot(driver, "group")

        for path, words in (
            ("/ui/no/such/page", "No console page"),
            ("/ui/topics/no-such-topic", "does not exist"),
            ("/ui/groups/no-such-group", "does not exist"),
        ):
            driver.get(base + path)  # type: ignore[attr-defined]
            assert "Not found" in driver.title and words in driver.page_source  # type: ignore[attr-defined]


def test_console_answers_404_status(tmp_path: object, broker: BrokerProcess) -> None:
    import urllib.error

    for path in ("/ui/no/such/page", "/ui/topics/none-here", "/ui/topics/none-here/0"):
        try:
            urllib.request.urlopen(f"{broker.http_url}{path}", timeout=10)
        except urllib.error.HTTPError as err:
            assert err.code == 404 and "text/html" in err.headers["Content-Type"]
        else:
            raise AssertionError(f"{path} did not answer 404")
