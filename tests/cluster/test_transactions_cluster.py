"""Transactions on a 3-broker ZooKeeper cluster: the transaction coordinator writes markers to partitions
led by other brokers (WriteTxnMarkers), transactional offsets reach a group coordinator on another
broker, and a transaction coordinator killed with SIGKILL is replaced by the new leader of its
``__transaction_state`` partition, which loads the replicated state and keeps serving the producer."""

from __future__ import annotations

import time
import uuid
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from strom.protocol.api import ApiKey
from strom.testing.cluster import LocalCluster
from tests.integration.rawclient import RawClient

from .conftest import partitions_of

TXN = {"transaction.state.log.num.partitions": "3"}


def create_topic(bootstrap: str, name: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(name, partitions, 3, config={"min.insync.replicas": "2"})])
    futures[name].result(30)


def read_all(bootstrap: str, topic: str, isolation: str, partitions: int, idle_s: float = 3.0) -> list[bytes]:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"r-{uuid.uuid4().hex[:6]}",
            "isolation.level": isolation,
            "enable.auto.commit": False,
        }
    )
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    out: list[bytes] = []
    deadline = time.monotonic() + idle_s
    try:
        while time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is None:
                continue
            if msg.error():
                if msg.error().code() == KafkaError._PARTITION_EOF:
                    continue
                raise KafkaException(msg.error())
            out.append(msg.value())
            deadline = time.monotonic() + idle_s
    finally:
        consumer.close()
    return out


def transaction_coordinator(bootstrap: str, txn_id: str) -> int:
    with RawClient(bootstrap.split(",", maxsplit=1)[0]) as raw:
        found = raw.call(ApiKey.FIND_COORDINATOR, 1, {"key": txn_id, "key_type": 1})
    assert found["error_code"] == 0, found
    return int(found["node_id"])


def test_markers_and_offsets_reach_other_brokers(make_cluster: Any) -> None:
    cluster: LocalCluster = make_cluster(3, **TXN)
    create_topic(cluster.bootstrap, "in", 3)
    create_topic(cluster.bootstrap, "out", 3)
    feeder = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
    for i in range(30):
        feeder.produce("in", value=f"{i}".encode(), partition=i % 3)
    assert feeder.flush(30) == 0
    consumer = Consumer(
        {
            "bootstrap.servers": cluster.bootstrap,
            "group.id": "eos",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "isolation.level": "read_committed",
        }
    )
    consumer.assign([TopicPartition("in", p, OFFSET_BEGINNING) for p in range(3)])
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "transactional.id": "eos-app"})
    producer.init_transactions(60)
    got: list[Any] = []
    deadline = time.monotonic() + 30
    while len(got) < 30 and time.monotonic() < deadline:
        got += [m for m in consumer.consume(30, timeout=1) if not m.error()]
    assert len(got) == 30
    producer.begin_transaction()
    for m in got:  # every output partition: at least two are led by brokers other than the coordinator
        producer.produce("out", value=b"out-" + m.value(), partition=m.partition())
    producer.send_offsets_to_transaction(
        consumer.position(consumer.assignment()), consumer.consumer_group_metadata(), 60
    )
    producer.commit_transaction(60)
    producer.begin_transaction()
    for p in range(3):
        producer.produce("out", value=b"aborted", partition=p)
    producer.flush(30)
    producer.abort_transaction(60)

    committed = read_all(cluster.bootstrap, "out", "read_committed", 3)
    assert sorted(committed) == sorted(b"out-" + m.value() for m in got)
    assert len(read_all(cluster.bootstrap, "out", "read_uncommitted", 3)) == 33
    offsets = consumer.committed([TopicPartition("in", p) for p in range(3)], timeout=10)
    assert sorted(tp.offset for tp in offsets) == [10, 10, 10]
    consumer.close()


def test_transaction_coordinator_kill9_fails_over(make_cluster: Any) -> None:
    cluster: LocalCluster = make_cluster(3, **TXN)
    create_topic(cluster.bootstrap, "out", 3)
    txn_id = f"failover-{uuid.uuid4().hex[:6]}"
    producer = Producer(
        {"bootstrap.servers": cluster.bootstrap, "transactional.id": txn_id, "message.timeout.ms": 60_000}
    )
    producer.init_transactions(60)
    producer.begin_transaction()
    for i in range(30):
        producer.produce("out", value=f"a-{i}".encode(), partition=i % 3)
    producer.commit_transaction(60)
    coordinator = transaction_coordinator(cluster.bootstrap, txn_id)
    cluster.brokers[coordinator].kill()
    producer.begin_transaction()
    for i in range(30):
        producer.produce("out", value=f"b-{i}".encode(), partition=i % 3)
    producer.commit_transaction(120)
    assert transaction_coordinator(cluster.bootstrap, txn_id) != coordinator
    committed = read_all(cluster.bootstrap, "out", "read_committed", 3)
    assert sorted(committed) == sorted(
        [f"a-{i}".encode() for i in range(30)] + [f"b-{i}".encode() for i in range(30)]
    )


def test_consume_transform_produce_survives_coordinator_kill9(make_cluster: Any) -> None:
    """Issue 13 on a cluster: a confluent-kafka consume-transform-produce process keeps going (restarted
    if the failure was fatal for it) while the broker coordinating its transactional id is killed
    with SIGKILL; every input reaches the output exactly once, in order, for read_committed."""
    import subprocess
    import sys

    from tests.integration.test_transactions import CTP_APP

    cluster: LocalCluster = make_cluster(3, **TXN)
    create_topic(cluster.bootstrap, "src", 1)
    create_topic(cluster.bootstrap, "dst", 1)
    total = 4000
    feeder = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "linger.ms": 5})
    for i in range(total):
        feeder.produce("src", f"in-{i}".encode(), partition=0)
    assert feeder.flush(30) == 0
    txn_id = f"ctp-{uuid.uuid4().hex[:6]}"
    args = [sys.executable, "-c", CTP_APP, cluster.bootstrap, "src", "dst", "ctp-group", txn_id, str(total)]
    app = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        leader = partitions_of(cluster.bootstrap, "dst")[0][0]
        with RawClient(cluster.brokers[leader].bootstrap) as raw:
            deadline = time.monotonic() + 60
            while int(raw.list_offset("dst", 0, -1)["offset"]) < total // 4:  # the loop got going
                assert time.monotonic() < deadline and app.poll() is None
                time.sleep(0.01)
        coordinator = transaction_coordinator(cluster.bootstrap, txn_id)
        assert app.poll() is None  # still working: the kill lands mid-stream
        cluster.brokers[coordinator].kill()
        for _ in range(5):  # a failure fatal to the process (e.g. a fenced epoch) means a restart
            out, err = app.communicate(timeout=180)
            if app.returncode == 0:
                break
            app = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        assert app.returncode == 0, err.decode()[-2000:]
        assert out.strip() == b"done"
    finally:
        if app.poll() is None:
            app.kill()
            app.communicate(timeout=10)
    # (cluster.bootstrap now names the live brokers only)
    assert read_all(cluster.bootstrap, "dst", "read_committed", 1) == [
        f"out-{i}".encode() for i in range(total)
    ]
