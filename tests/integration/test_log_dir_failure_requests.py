"""A log dir failing under a single broker with two log dirs (KIP-112), driven from outside with real
clients. The second dir is made read-only under the broker (a read-only bind mount: open segments keep
taking appends; creating, renaming and removing files fails):

* a DeleteRecords there (its leader-epoch checkpoint cannot be rewritten) answers confluent-kafka's
  admin client KAFKA_STORAGE_ERROR, and the dir goes offline;
* retention there (a segment cannot be removed), with no client writing, takes the dir offline.

Either way DescribeLogDirs reports the dir failed, and the other dir keeps serving: a produce and a
DeleteRecords there succeed.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, KafkaException, Message, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic

from strom.protocol.errors import ErrorCode
from strom.testing import BrokerProcess
from tests.cluster.conftest import wait_until
from tests.cluster.jbod import dir_error, place, two_dirs
from tests.tmpfs import read_only

HEALTHY, FAILING = 0, 1  # partitions: one in each log dir


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    proc = two_dirs(0, tmp_path / "data", {"log.retention.check.interval.ms": "200"})
    proc.start()
    try:
        yield proc
    finally:
        proc.stop()


def _topic(broker: BrokerProcess, name: str) -> AdminClient:
    """``name`` with a partition in each dir, small segments, and 40 records in each partition."""
    data = broker.data_dir
    place(broker.bootstrap, 0, name, {HEALTHY: data / "logs-a", FAILING: data / "logs-b"})
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(name, 2, 1, config={"segment.bytes": "1000"})])[name].result(30)
    _produce(broker, name, FAILING, 40)
    _produce(broker, name, HEALTHY, 40)
    return admin


def _produce(broker: BrokerProcess, topic: str, partition: int, count: int) -> None:
    # One record a batch: a batch must fit in a segment (segment.bytes).
    producer = Producer({"bootstrap.servers": broker.bootstrap, "batch.num.messages": 1})
    failed: list[KafkaError] = []

    def delivered(err: KafkaError | None, _msg: Message) -> None:
        if err is not None:
            failed.append(err)

    for _ in range(count):
        producer.produce(topic, b"x" * 100, partition=partition, on_delivery=delivered)
    assert producer.flush(30) == 0
    assert failed == []


def _serves_the_healthy_dir(broker: BrokerProcess, admin: AdminClient, topic: str) -> None:
    failing = broker.data_dir / "logs-b"
    wait_until(
        lambda: dir_error(broker.bootstrap, 0, failing) == ErrorCode.KAFKA_STORAGE_ERROR,
        30,
        "DescribeLogDirs to report the dir failed",
    )
    assert dir_error(broker.bootstrap, 0, broker.data_dir / "logs-a") == ErrorCode.NONE
    _produce(broker, topic, HEALTHY, 5)
    (deleted,) = admin.delete_records([TopicPartition(topic, HEALTHY, 45)]).values()  # all 45 records
    assert deleted.result(30).low_watermark == 45


def test_a_delete_records_the_disk_refuses_answers_storage_error(broker: BrokerProcess) -> None:
    admin = _topic(broker, "deleted")
    with read_only(broker.data_dir / "logs-b"):
        (refused,) = admin.delete_records([TopicPartition("deleted", FAILING, 20)]).values()
        with pytest.raises(KafkaException) as raised:
            refused.result(30)
        assert raised.value.args[0].code() == KafkaError.KAFKA_STORAGE_ERROR
        _serves_the_healthy_dir(broker, admin, "deleted")
        broker.stop()  # before the mount goes: the broker holds files under it


def test_retention_the_disk_refuses_takes_the_dir_offline(broker: BrokerProcess) -> None:
    admin = _topic(broker, "retained")
    with read_only(broker.data_dir / "logs-b"):
        entry = ConfigEntry("retention.ms", "1", incremental_operation=AlterConfigOpType.SET)
        resource = ConfigResource("topic", "retained", incremental_configs=[entry])
        admin.incremental_alter_configs([resource])[resource].result(30)
        _serves_the_healthy_dir(broker, admin, "retained")
        broker.stop()
