"""``/metrics`` of a real broker process, driven by confluent-kafka and the strom CLI over TCP."""

from __future__ import annotations

import subprocess
import sys
import urllib.error
import urllib.request
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from strom.testing import BrokerProcess
from strom.testing.metrics import scrape, scrape_text, total, value

STROM = [sys.executable, "-m", "strom.cli.main"]


def _create(bootstrap: str, topic: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(timeout=30)


def _produce(bootstrap: str, topic: str, count: int, partition: int = 0) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(count):
        producer.produce(topic, f"value-{i}".encode(), partition=partition)
    assert producer.flush(30) == 0


def test_produce_consume_counts_and_request_times(broker: BrokerProcess) -> None:
    assert broker.http_url is not None
    topic = f"m-{uuid.uuid4().hex[:8]}"
    _create(broker.bootstrap, topic, 2)
    before = scrape(broker.http_url)
    _produce(broker.bootstrap, topic, 250, partition=0)
    _produce(broker.bootstrap, topic, 50, partition=1)
    after = scrape(broker.http_url)
    grown = value(after, "kafka_server_brokertopicmetrics_messagesin_total") - value(
        before, "kafka_server_brokertopicmetrics_messagesin_total"
    )
    assert grown == 300
    assert value(after, "kafka_server_brokertopicmetrics_messagesin_total", topic=topic) == 300
    assert value(after, "kafka_server_brokertopicmetrics_bytesin_total", topic=topic) > 300 * 7
    assert value(after, "kafka_log_log_logendoffset", topic=topic, partition="0") == 250
    assert value(after, "kafka_log_log_logendoffset", topic=topic, partition="1") == 50
    assert value(after, "kafka_log_log_numlogsegments", topic=topic, partition="0") == 1
    assert value(after, "kafka_log_log_size", topic=topic, partition="0") > 250 * 7
    assert value(after, "kafka_server_replicamanager_leadercount") >= 2
    assert value(after, "kafka_server_replicamanager_underreplicatedpartitions") == 0
    assert value(after, "kafka_controller_kafkacontroller_activecontrollercount") == 1
    assert value(after, "kafka_controller_kafkacontroller_offlinepartitionscount") == 0
    assert value(after, "kafka_network_requestmetrics_totaltimems_count", request="Produce") >= 2
    assert total(after, "kafka_network_requestmetrics_requests_total", request="Produce") >= 2
    p99 = value(after, "kafka_network_requestmetrics_totaltimems", request="Produce", quantile="0.99")
    assert 0 < p99 < 60_000
    assert value(after, "process_resident_memory_bytes") > 0

    consumer = Consumer(
        {"bootstrap.servers": broker.bootstrap, "group.id": f"g-{topic}", "auto.offset.reset": "earliest"}
    )
    consumer.assign([TopicPartition(topic, 0, 0)])
    got = 0
    while got < 250:
        msg = consumer.poll(10)
        assert msg is not None and msg.error() is None
        got += 1
    consumer.close()
    fetched = scrape(broker.http_url)
    assert value(fetched, "kafka_server_brokertopicmetrics_bytesout_total", topic=topic) > 250 * 7
    assert value(fetched, "kafka_network_requestmetrics_totaltimems_count", request="Fetch") >= 1
    assert "kafka_server_socket_server_metrics_connection_count" in fetched


def test_consumer_lag_matches_groups_describe(broker: BrokerProcess) -> None:
    assert broker.http_url is not None
    topic, group = f"lag-{uuid.uuid4().hex[:8]}", f"lag-g-{uuid.uuid4().hex[:8]}"
    _create(broker.bootstrap, topic, 2)
    _produce(broker.bootstrap, topic, 40, partition=0)
    _produce(broker.bootstrap, topic, 10, partition=1)
    consumer = Consumer(
        {"bootstrap.servers": broker.bootstrap, "group.id": group, "enable.auto.commit": False}
    )
    consumer.commit(offsets=[TopicPartition(topic, 0, 15), TopicPartition(topic, 1, 10)], asynchronous=False)
    consumer.close()
    described = subprocess.run(
        [*STROM, "--bootstrap-server", broker.bootstrap, "groups", "describe", group],
        capture_output=True,
        timeout=120,
        check=True,
    ).stdout.decode()
    lags = {int(cols[1]): float(cols[4]) for cols in (ln.split() for ln in described.splitlines()[2:])}
    assert lags == {0: 25.0, 1: 0.0}
    samples = scrape(broker.http_url)
    for partition, lag in lags.items():
        labels = {"consumergroup": group, "topic": topic, "partition": str(partition)}
        assert value(samples, "kafka_consumergroup_lag", **labels) == lag


def test_metrics_off(tmp_path: Path) -> None:
    with BrokerProcess(tmp_path / "data", {"metrics.enabled": "false"}) as off:
        assert off.http_url is not None
        with pytest.raises(urllib.error.HTTPError) as err:
            scrape_text(off.http_url)
        assert err.value.code == 404
