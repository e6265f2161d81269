"""Three brokers on ZooKeeper whose inter-broker listener is SASL_SSL, and the check both secured-cluster
tests make of them: acks=all writes replicate to a full ISR, the leader is killed with -9, writes go on,
and a consumer reads every record back."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from strom.testing.broker_process import BrokerProcess
from strom.testing.zookeeper_process import ZooKeeperProcess
from tests.cluster.conftest import FAST, wait_until
from tests.integration.certs import Pki


@contextmanager
def sasl_ssl_brokers(
    zk: ZooKeeperProcess, tmp_path: Path, pki: Pki, settings: dict[str, str]
) -> Iterator[list[BrokerProcess]]:
    """Brokers 0-2 on `zk` with the broker PEM files, `settings` (listeners, SASL) on top; stopped after."""
    brokers: list[BrokerProcess] = []
    try:
        for broker_id in range(3):
            proc = BrokerProcess(
                tmp_path / f"broker-{broker_id}",
                {
                    **FAST,
                    "broker.id": str(broker_id),
                    "zookeeper.connect": zk.connect,
                    "inter.broker.listener.name": "SASL_SSL",
                    "ssl.keystore.location": str(pki.broker),
                    "ssl.truststore.location": str(pki.ca),
                    **settings,
                },
            )
            brokers.append(proc)
            proc.start()
        yield brokers
    finally:
        for proc in brokers:
            proc.stop(timeout_s=20)


def replicate_fail_over_read_back(
    brokers: list[BrokerProcess],
    client: dict[str, Any],
    topic: str,
    before_kill: Callable[[], None] = lambda: None,
) -> int:
    """200 acks=all records around a kill -9 of the leader of `topic` (1 partition, RF 3, min ISR 2),
    all read back; `before_kill` runs once the ISR is full. Returns the killed leader's id."""
    admin = AdminClient(client)
    admin.create_topics([NewTopic(topic, 1, 3, config={"min.insync.replicas": "2"})])[topic].result(30)

    def partition() -> Any:
        return admin.list_topics(topic, timeout=5).topics[topic].partitions[0]

    producer = Producer({**client, "acks": "all", "enable.idempotence": True})
    for i in range(100):
        producer.produce(topic, f"m{i}".encode())
    assert producer.flush(30) == 0
    wait_until(lambda: len(partition().isrs) == 3, 30, "followers in the ISR over SASL_SSL")
    before_kill()
    leader = int(partition().leader)
    brokers[leader].kill()  # kill -9
    wait_until(lambda: partition().leader not in (leader, -1), 30, "a new leader elected")
    for i in range(100, 200):
        producer.produce(topic, f"m{i}".encode())
    assert producer.flush(60) == 0
    consumer = Consumer({**client, "group.id": "g", "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    got: list[bytes] = []
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and len(got) < 200:
            msg = consumer.poll(0.5)
            if msg is not None and not msg.error():
                got.append(msg.value())
    finally:
        consumer.close()
    assert sorted(got) == sorted(f"m{i}".encode() for i in range(200))
    return leader
