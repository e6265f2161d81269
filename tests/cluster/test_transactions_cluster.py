"""Transactions on a 3-broker ZooKeeper cluster: the transaction coordinator writes markers to partitions
led by other brokers (WriteTxnMarkers), transactional offsets reach a group coordinator on another
broker, and a transaction coordinator killed with SIGKILL is replaced by the new leader of its
``__transaction_state`` partition, which loads the replicated state and keeps serving the producer."""

from __future__ import annotations

import os
import random
import time
import uuid
from pathlib import Path
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from strom.protocol.api import ApiKey
from strom.testing.cluster import LocalCluster
from tests.integration.eos import CtpApp, assert_exactly_once, consume_all, feed_inputs
from tests.integration.rawclient import RawClient

TXN = {"transaction.state.log.num.partitions": "3"}
STALL_S = 90  # no sink progress for longer than transaction.timeout.ms (60 s): restart the loop


def create_topic(bootstrap: str, name: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(name, partitions, 3, config={"min.insync.replicas": "2"})])
    futures[name].result(30)


def transaction_coordinator(bootstrap: str, txn_id: str, timeout_s: float = 30.0) -> int:
    """The broker id FindCoordinator (key type TRANSACTION) names, once one is available."""
    deadline = time.monotonic() + timeout_s
    while True:
        with RawClient(bootstrap.split(",", maxsplit=1)[0]) as raw:
            found = raw.call(ApiKey.FIND_COORDINATOR, 1, {"key": txn_id, "key_type": 1})
        if found["error_code"] == 0:
            return int(found["node_id"])
        assert time.monotonic() < deadline, found
        time.sleep(0.2)


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

    committed = consume_all(cluster.bootstrap, "out", "read_committed", 3)
    assert sorted(committed) == sorted(b"out-" + m.value() for m in got)
    assert len(consume_all(cluster.bootstrap, "out", "read_uncommitted", 3)) == 33
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
    committed = consume_all(cluster.bootstrap, "out", "read_committed", 3)
    assert sorted(committed) == sorted(
        [f"a-{i}".encode() for i in range(30)] + [f"b-{i}".encode() for i in range(30)]
    )


def wait_for_full_isr(cluster: LocalCluster, topics: list[str], timeout_s: float = 60.0) -> None:
    """Until every partition of ``topics`` has a leader and all three replicas in sync again."""
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            md = admin.list_topics(timeout=5).topics
            if all(p.leader >= 0 and len(p.isrs) == 3 for t in topics for p in md[t].partitions.values()):
                return
        except (KafkaException, KeyError):
            pass
        assert time.monotonic() < deadline, f"the ISRs of {topics} did not fill up again"
        time.sleep(0.3)


def test_consume_transform_produce_while_the_coordinator_is_killed(make_cluster: Any, tmp_path: Path) -> None:
    """Issue 13's exactly-once check on a cluster: a confluent-kafka consume-transform-produce process
    runs (restarted whenever a failure is fatal to it) while the broker that coordinates its
    transactional id (found with FindCoordinator) is killed with SIGKILL at a random point and
    restarted, ``TXN_KILLS`` times (2 in the suite; ``make eos-long`` runs 20), and every second time
    the loop is killed with SIGKILL too; every input reaches the output exactly once, in order, for
    read_committed, with the group's offsets at the input's end."""
    kills = int(os.environ.get("TXN_KILLS", "2"))
    rng = random.Random(int(os.environ.get("TXN_SEED", "13")))
    cluster: LocalCluster = make_cluster(3, **TXN)
    create_topic(cluster.bootstrap, "src", 1)
    create_topic(cluster.bootstrap, "dst", 1)
    chunk = 300  # outputs between two kills
    total = chunk * (kills + 1)
    feed_inputs(cluster.bootstrap, "src", total)
    txn_id, group = f"ctp-{uuid.uuid4().hex[:6]}", "ctp-group"
    app = CtpApp(cluster.bootstrap, "src", "dst", group, txn_id, total, tmp_path / "ctp.log")
    internal = ["src", "dst", "__consumer_offsets", "__transaction_state"]

    def sink_end() -> int:
        """The sink's high watermark, from whichever live broker leads it (-1 if none answers)."""
        for broker in list(cluster.brokers.values()):
            if broker.proc is None:
                continue
            try:
                with RawClient(broker.bootstrap) as raw:
                    answer = raw.list_offset("dst", 0, -1)
            except OSError:
                continue
            if answer["error_code"] == 0:
                return int(answer["offset"])
        return -1

    killed: list[int] = []
    app_kills = stall_restarts = 0
    try:
        app.start()
        for k in range(kills):
            deadline = time.monotonic() + 240
            last_end, last_move = sink_end(), time.monotonic()
            while (end := sink_end()) < (k + 1) * chunk:  # markers count too: about a tenth more
                assert not app.keep_alive(), "the loop finished before the kills were done"
                if end != last_end:
                    last_end, last_move = end, time.monotonic()
                elif time.monotonic() - last_move > STALL_S:
                    # A supervisor's liveness restart: the new instance fences the stalled one, and
                    # exactly-once must hold across that too. Stalls are counted and printed: one was
                    # seen in CI after a coordinator restart (the loop's transaction hung until the
                    # new coordinator timed it out), and is still to be explained.
                    app.kill()
                    app.start()
                    stall_restarts += 1
                    last_move = time.monotonic()
                if time.monotonic() > deadline:
                    logs = "\n".join(f"broker {i}:\n{b.log_tail(15)}" for i, b in cluster.brokers.items())
                    raise AssertionError(
                        f"no progress before kill {k + 1} (killed {killed}), sink at {sink_end()}\n"
                        f"loop:\n{app.log_tail()}\n{logs}"
                    )
                time.sleep(0.05)
            time.sleep(rng.uniform(0, 0.5))  # a random point: inside or between transactions
            coordinator = transaction_coordinator(cluster.bootstrap, txn_id)
            cluster.brokers[coordinator].kill()
            killed.append(coordinator)
            time.sleep(rng.uniform(1, 4))  # the loop meets the dead coordinator (and, maybe, leader)
            if k % 2:  # every second time the loop dies too, in whatever state the failover left it
                app.kill()
                app.start()
                app_kills += 1
            cluster.brokers[coordinator].start()
            cluster.wait_for_brokers(3)
            wait_for_full_isr(cluster, internal)
        app.finish(300)
    finally:
        app.kill()
    assert len(killed) == kills
    assert_exactly_once(cluster.bootstrap, "src", "dst", group, total)
    print(
        f"\n{total} inputs; coordinators killed: {killed}; loop killed {app_kills} times; "
        f"loop restarts after fatal errors: {app.restarts}; restarts of a stalled loop: {stall_restarts}"
    )
