"""Admin APIs of the Kafka 3/4 generation through the clients' own admin calls, against a broker process.

confluent-kafka's AdminClient (librdkafka 2.16) negotiates the newest version it knows of each API, so
these scenarios cover what a current client sends: ListOffsets v7+ with ``OffsetSpec.max_timestamp``
(KIP-734), DescribeCluster, DescribeTopicPartitions (with topic ids, KIP-516). kafka-python covers
what confluent-kafka lacks: topics described by id (Metadata v12) and DescribeLogDirs. The paging of
DescribeTopicPartitions is checked over raw TCP.
"""

from __future__ import annotations

import os
import time
import uuid
import warnings
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Producer, TopicCollection, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic, OffsetSpec

from strom.protocol.api import ApiKey
from strom.protocol.uuid_text import parse_uuid
from strom.testing import BrokerProcess

from .rawclient import RawClient

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka import KafkaAdminClient


@pytest.fixture
def kafka_python_admin(broker: BrokerProcess) -> Iterator[Any]:
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    yield admin
    admin.close()


def _admin(broker: BrokerProcess) -> AdminClient:
    return AdminClient({"bootstrap.servers": broker.bootstrap})


def _create(admin: AdminClient, topic: str, partitions: int = 1) -> None:
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(20)


def test_list_offsets_max_timestamp(broker: BrokerProcess, topic_name: str) -> None:
    admin = _admin(broker)
    _create(admin, topic_name)
    now_ms = int(time.time() * 1000)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
    # the newest timestamp is on the second record of five, not the last one
    for i, ts in enumerate((now_ms - 5000, now_ms, now_ms - 4000, now_ms - 3000, now_ms - 2000)):
        producer.produce(topic_name, value=b"%d" % i, timestamp=ts)
        producer.flush(20)
    tp = TopicPartition(topic_name, 0)

    def lookup(spec: OffsetSpec) -> tuple[int, int]:
        info = admin.list_offsets({tp: spec})[tp].result(20)
        return info.offset, info.timestamp

    assert lookup(OffsetSpec.max_timestamp()) == (1, now_ms)
    assert lookup(OffsetSpec.earliest())[0] == 0
    assert lookup(OffsetSpec.latest())[0] == 5
    assert lookup(OffsetSpec.for_timestamp(now_ms - 4500)) == (1, now_ms)  # the first at or after it


def test_describe_cluster(broker: BrokerProcess) -> None:
    admin = _admin(broker)
    cluster = admin.describe_cluster(include_authorized_operations=True).result(20)
    assert cluster.cluster_id
    assert cluster.controller is not None and cluster.controller.id == 0
    assert [(n.id, n.host, n.port) for n in cluster.nodes] == [(0, "127.0.0.1", broker.port)]
    assert cluster.authorized_operations  # no authorizer: everything is allowed


def test_describe_topics_with_topic_ids(
    broker: BrokerProcess, topic_name: str, kafka_python_admin: Any
) -> None:
    admin = _admin(broker)
    _create(admin, topic_name, 3)
    (described,) = admin.describe_topics(TopicCollection([topic_name])).values()
    topic = described.result(20)
    assert topic.name == topic_name and not topic.is_internal
    assert [(p.id, p.leader.id, [r.id for r in p.replicas]) for p in topic.partitions] == [
        (0, 0, [0]),
        (1, 0, [0]),
        (2, 0, [0]),
    ]
    topic_id = uuid.UUID(bytes=parse_uuid(str(topic.topic_id)))  # Kafka's text form
    assert topic_id.int != 0
    # kafka-python names the topic by its id (Metadata v12) and gets the same topic back
    (by_id,) = kafka_python_admin.describe_topics([topic_id])
    assert (by_id["name"], by_id["error_code"], len(by_id["partitions"])) == (topic_name, 0, 3)
    assert by_id["topic_id"] == str(topic_id)


def test_describe_topic_partitions_pages_with_its_cursor(broker: BrokerProcess, topic_name: str) -> None:
    admin = _admin(broker)
    first, second = f"{topic_name}-a", f"{topic_name}-b"
    _create(admin, first, 3)
    _create(admin, second, 2)
    pages: list[list[tuple[str, list[int]]]] = []
    cursor: dict[str, Any] | None = None
    with RawClient(broker.bootstrap) as raw:
        while True:
            body = {
                "topics": [{"name": second}, {"name": first}],
                "response_partition_limit": 2,
                "cursor": cursor,
            }
            resp = raw.call(ApiKey.DESCRIBE_TOPIC_PARTITIONS, 0, body)
            pages.append(
                [(t["name"], [p["partition_index"] for p in t["partitions"]]) for t in resp["topics"]]
            )
            cursor = resp["next_cursor"]
            if cursor is None:
                break
        missing = raw.call(ApiKey.DESCRIBE_TOPIC_PARTITIONS, 0, {"topics": [{"name": f"{topic_name}-none"}]})
    assert pages == [[(first, [0, 1])], [(first, [2]), (second, [0])], [(second, [1])]]
    assert missing["topics"][0]["error_code"] == 3  # UNKNOWN_TOPIC_OR_PARTITION


def test_describe_log_dirs(broker: BrokerProcess, topic_name: str, kafka_python_admin: Any) -> None:
    admin = _admin(broker)
    _create(admin, topic_name, 2)
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(20):
        producer.produce(topic_name, value=b"x" * 100, partition=i % 2)
    assert producer.flush(20) == 0
    (answer,) = kafka_python_admin.describe_log_dirs()
    assert answer["broker"] == 0
    (log_dir,) = answer["log_dirs"]
    assert log_dir["error_code"] == 0 and log_dir["log_dir"] == os.path.abspath(broker.data_dir / "logs")
    assert log_dir["total_bytes"] >= log_dir["usable_bytes"] > 0
    (topic,) = [t for t in log_dir["topics"] if t["name"] == topic_name]
    sizes = {p["partition_index"]: (p["partition_size"], p["offset_lag"]) for p in topic["partitions"]}
    assert sorted(sizes) == [0, 1]
    assert all(size > 1000 and lag == 0 for size, lag in sizes.values())
    only = kafka_python_admin.describe_log_dirs({topic_name: [1]})[0]["log_dirs"][0]["topics"]
    assert [(t["name"], [p["partition_index"] for p in t["partitions"]]) for t in only] == [(topic_name, [1])]


@pytest.mark.parametrize("version", range(3))
def test_describe_cluster_versions(broker: BrokerProcess, version: int) -> None:
    with RawClient(broker.bootstrap) as raw:
        body = {"include_cluster_authorized_operations": False, "endpoint_type": 1}
        resp = raw.call(ApiKey.DESCRIBE_CLUSTER, version, body)
        assert (resp["error_code"], resp["controller_id"]) == (0, 0)
        assert [(b["broker_id"], b["port"]) for b in resp["brokers"]] == [(0, broker.port)]
        assert resp["cluster_authorized_operations"] == -2147483648  # not asked for
        if version >= 1:  # controllers are KRaft's: a broker refuses to describe them
            refused = raw.call(ApiKey.DESCRIBE_CLUSTER, version, {**body, "endpoint_type": 2})
            assert refused["error_code"] == 115  # UNSUPPORTED_ENDPOINT_TYPE
        if version >= 2:
            assert resp["brokers"][0]["is_fenced"] is False


@pytest.mark.parametrize("version", range(6))
def test_describe_log_dirs_versions(broker: BrokerProcess, topic_name: str, version: int) -> None:
    with RawClient(broker.bootstrap) as raw:
        assert raw.create_topic(topic_name, 1) == 0
        body = {"topics": [{"topic": topic_name, "partitions": [0]}]}
        resp = raw.call(ApiKey.DESCRIBE_LOG_DIRS, version, body)
    (result,) = resp["results"]
    assert result["error_code"] == 0 and result["log_dir"] == os.path.abspath(broker.data_dir / "logs")
    assert [(t["name"], [p["partition_index"] for p in t["partitions"]]) for t in result["topics"]] == [
        (topic_name, [0])
    ]
    if version >= 3:
        assert resp["error_code"] == 0
    if version >= 4:
        assert result["total_bytes"] >= result["usable_bytes"] > 0
