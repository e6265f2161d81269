"""Replicated Strom cluster: real ZooKeeper, 3..6 broker processes, real clients (issue 4's list)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from strom.protocol.api import ApiKey
from strom.testing.cluster import LocalCluster
from tests.integration.rawclient import RawClient

from .conftest import partitions_of, wait_until

pytestmark = pytest.mark.cluster

# docs/design.md#rack-aware-assignment
SEEDS_TABLE = {  # broker -> (leads, first follower of, second follower of)
    0: ([0, 6], [5], [4]),
    3: ([1, 7], [0, 6], [5]),
    1: ([2, 8], [1, 7], [0, 6]),
    4: ([3, 9], [2, 8], [1, 7]),
    2: ([4], [3, 9], [2, 8]),
    5: ([5], [4], [3, 9]),
}


def create_topic(bootstrap: str, name: str, partitions: int, rf: int, **configs: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for fut in admin.create_topics([NewTopic(name, partitions, rf, config=configs)]).values():
        fut.result(timeout=30)
    wait_until(lambda: all(p[0] >= 0 for p in partitions_of(bootstrap, name).values()), what="leaders")


def strom_cli(*args: str) -> str:
    out = subprocess.run(
        [sys.executable, "-m", "strom.cli.main", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return out.stdout


def test_seeds_table_on_six_brokers_two_racks(make_cluster: Any) -> None:
    cluster: LocalCluster = make_cluster(6, racks=2)
    assert [cluster.broker_overrides(b)["broker.rack"] for b in range(6)] == ["R1"] * 3 + ["R2"] * 3
    strom_cli(
        "topics",
        "create",
        "--bootstrap-server",
        cluster.bootstrap,
        "Invoice",
        "--partitions",
        "10",
        "--replication-factor",
        "3",
    )
    wait_until(lambda: all(p[0] >= 0 for p in partitions_of(cluster.bootstrap, "Invoice").values()))
    text = strom_cli("topics", "describe", "--bootstrap-server", cluster.bootstrap, "Invoice")
    replicas: dict[int, list[int]] = {}
    for line in text.splitlines():
        if "Partition:" in line:
            fields = dict(part.split(": ", 1) for part in line.strip().split("\t") if ": " in part)
            replicas[int(fields["Partition"])] = [int(b) for b in fields["Replicas"].split(",")]
            assert int(fields["Leader"]) == replicas[int(fields["Partition"])][0]
    assert len(replicas) == 10
    for broker, (leads, first, second) in SEEDS_TABLE.items():
        assert [p for p in range(10) if replicas[p][0] == broker] == leads
        assert [p for p in range(10) if replicas[p][1] == broker] == first
        assert [p for p in range(10) if replicas[p][2] == broker] == second
    table = strom_cli("cluster", "describe", "--bootstrap-server", cluster.bootstrap, "--topic", "Invoice")
    assert "R1-B0" in table and "P0 P6" in table


def _produce_with_failures(
    cluster: LocalCluster, topic: str, victims: list[str], total: int
) -> dict[int, list[int]]:
    """Send `total` numbered messages (acks=all, idempotent); kill -9 victims along the way."""
    acked: dict[int, list[int]] = {}
    errors: list[str] = []

    def delivered(err: Any, msg: Any) -> None:
        if err is None:
            acked.setdefault(msg.partition(), []).append(int(msg.value()))
        else:
            errors.append(str(err))

    producer = Producer(
        {
            "bootstrap.servers": cluster.bootstrap,
            "acks": "all",
            "enable.idempotence": True,
            "message.timeout.ms": 60000,
            "linger.ms": 5,
        }
    )
    step = total // (len(victims) + 1)
    killed: list[int] = []
    for i in range(total):
        while True:
            try:
                producer.produce(topic, key=str(i % 7), value=str(i), on_delivery=delivered)
                break
            except BufferError:
                producer.poll(0.1)
        producer.poll(0)
        if i and i % step == 0 and len(killed) < len(victims):
            if killed:  # the previous victim rejoins before the next one dies
                cluster.brokers[killed[-1]].start()
                wait_until(
                    lambda: all(len(p[2]) == 3 for p in partitions_of(cluster.bootstrap, topic).values()),
                    60,
                    "the restarted broker back in every ISR",
                )
            victim = _pick(cluster, topic, victims[len(killed)])
            cluster.brokers[victim].kill()
            killed.append(victim)
        if i % 50 == 0:
            time.sleep(0.02)
    assert producer.flush(90) == 0
    assert not errors, errors[:5]
    cluster.brokers[killed[-1]].start()
    return acked


def _pick(cluster: LocalCluster, topic: str, kind: str) -> int:
    # Right after a restart librdkafka may answer a metadata call with _PARTIAL (a bootstrap connection
    # dropped mid-request); a client retries, and so does this helper, for a bounded time.
    deadline = time.monotonic() + 60
    while True:
        try:
            md = AdminClient({"bootstrap.servers": cluster.bootstrap}).list_topics(timeout=10)
            break
        except KafkaException:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)
    if kind == "controller":
        return int(md.controller_id)
    return int(md.topics[topic].partitions[0].leader)


def _read_all(bootstrap: str, topic: str, partitions: int) -> dict[int, list[int]]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "verify", "enable.auto.commit": False})
    found: dict[int, list[int]] = {}
    ends = {}
    for p in range(partitions):
        ends[p] = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and any(len(found.get(p, [])) < ends[p] for p in ends):
        msg = consumer.poll(0.5)
        if msg is not None and not msg.error():
            found.setdefault(msg.partition(), []).append(int(msg.value()))
    consumer.close()
    return found


def test_leader_kill9_acked_messages_exactly_once_in_order(make_cluster: Any) -> None:
    cluster: LocalCluster = make_cluster(3)
    create_topic(cluster.bootstrap, "orders", 3, 3, **{"min.insync.replicas": "2"})
    acked = _produce_with_failures(cluster, "orders", ["leader", "controller"], 3000)
    cluster.wait_for_brokers(3)
    wait_until(
        lambda: all(len(p[2]) == 3 for p in partitions_of(cluster.bootstrap, "orders").values()),
        60,
        "full ISRs after restarts",
    )
    stored = _read_all(cluster.bootstrap, "orders", 3)
    total = 0
    for p, values in acked.items():
        log_values = stored.get(p, [])
        assert len(log_values) == len(set(log_values)), f"duplicates in partition {p}"
        positions = {v: i for i, v in enumerate(log_values)}
        missing = [v for v in values if v not in positions]
        assert not missing, f"acknowledged messages lost in partition {p}: {missing[:10]}"
        order = [positions[v] for v in values]
        assert order == sorted(order), f"acknowledged messages out of order in partition {p}"
        total += len(values)
    assert total == 3000


def test_stopped_follower_leaves_isr_and_rejoins(make_cluster: Any) -> None:
    cluster: LocalCluster = make_cluster(
        3, zookeeper_session_timeout_ms="30000", replica_lag_time_max_ms="1500"
    )
    create_topic(cluster.bootstrap, "isr", 1, 3, **{"min.insync.replicas": "2"})
    leader, replicas, _ = partitions_of(cluster.bootstrap, "isr")[0]
    followers = [b for b in replicas if b != leader]
    producer = Producer(
        {
            "bootstrap.servers": cluster.bootstrap,
            "acks": "all",
            "retries": 0,
            "enable.idempotence": False,
            "message.timeout.ms": 5000,
        }
    )
    results: list[Any] = []

    def send(value: str) -> Any:
        results.clear()
        producer.produce("isr", value=value, on_delivery=lambda err, msg: results.append(err))
        producer.flush(10)
        return results[0]

    assert send("before") is None
    cluster.brokers[followers[0]].signal(signal.SIGSTOP)
    try:
        wait_until(
            lambda: (
                partitions_of(cluster.bootstrap, "isr")[0][2] == [leader, followers[1]]
                or sorted(partitions_of(cluster.bootstrap, "isr")[0][2]) == sorted([leader, followers[1]])
            ),
            20,
            "the stopped follower to leave the ISR",
        )
        assert send("two in sync") is None
        cluster.brokers[followers[1]].signal(signal.SIGSTOP)
        try:
            wait_until(lambda: partitions_of(cluster.bootstrap, "isr")[0][2] == [leader], 20, "ISR = leader")
            err = send("too few")
            assert err is not None and err.code() == KafkaError.NOT_ENOUGH_REPLICAS, err
        finally:
            cluster.brokers[followers[1]].signal(signal.SIGCONT)
    finally:
        cluster.brokers[followers[0]].signal(signal.SIGCONT)
    wait_until(lambda: len(partitions_of(cluster.bootstrap, "isr")[0][2]) == 3, 30, "followers to rejoin")
    assert send("after") is None


def test_consumer_group_survives_coordinator_failure(make_cluster: Any) -> None:
    cluster: LocalCluster = make_cluster(3)
    create_topic(cluster.bootstrap, "events", 3, 3, **{"min.insync.replicas": "2"})
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
    for i in range(300):
        producer.produce("events", key=str(i), value=str(i))
    assert producer.flush(30) == 0
    consumer = Consumer(
        {
            "bootstrap.servers": cluster.bootstrap,
            "group.id": "survivors",
            "auto.offset.reset": "earliest",
            "session.timeout.ms": 6000,
            "enable.auto.commit": True,
            "auto.commit.interval.ms": 200,
        }
    )
    consumer.subscribe(["events"])
    seen: set[int] = set()
    deadline = time.monotonic() + 60
    while len(seen) < 300 and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None and not msg.error():
            seen.add(int(msg.value()))
    assert len(seen) == 300
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    group = admin.describe_consumer_groups(["survivors"])["survivors"].result(timeout=10)
    coordinator = group.coordinator.id
    cluster.brokers[coordinator].kill()
    for i in range(300, 600):
        producer.produce("events", key=str(i), value=str(i))
    assert producer.flush(60) == 0
    deadline = time.monotonic() + 90
    while len(seen) < 600 and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None and not msg.error():
            seen.add(int(msg.value()))
    consumer.close()
    assert seen == set(range(600))
    group = admin.describe_consumer_groups(["survivors"])["survivors"].result(timeout=10)
    assert group.coordinator.id != coordinator


def test_restarted_broker_catches_up_and_preferred_leadership_returns(make_cluster: Any) -> None:
    cluster: LocalCluster = make_cluster(3, leader_imbalance_check_interval_seconds="2")
    create_topic(cluster.bootstrap, "pref", 3, 3, **{"min.insync.replicas": "2"})
    cluster.brokers[1].kill()
    wait_until(
        lambda: all(p[0] != 1 for p in partitions_of(cluster.bootstrap, "pref").values()), 30, "failover"
    )
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
    for i in range(200):
        producer.produce("pref", value=str(i))
    assert producer.flush(30) == 0
    cluster.brokers[1].start()
    wait_until(
        lambda: all(
            p[0] == p[1][0] and len(p[2]) == 3 for p in partitions_of(cluster.bootstrap, "pref").values()
        ),
        60,
        "preferred leaders back with full ISRs",
    )
    assert sum(len(v) for v in _read_all(cluster.bootstrap, "pref", 3).values()) == 200
    if os.environ.get("STROM_DEBUG"):
        print(partitions_of(cluster.bootstrap, "pref"))


def test_a_restarted_broker_answers_metadata_once_it_knows_the_cluster(make_cluster: Any) -> None:
    """A broker killed with SIGKILL and started again at once listens while ZooKeeper still holds
    its previous session's registration (for the session timeout, 6 s here). In that time its
    metadata cache is empty. Its Metadata answer must wait until the controller's view lists it.
    An answer without brokers made librdkafka decommission every broker it knew: the cluster EOS
    test's transactional producer was left with none, and stuck."""
    cluster: LocalCluster = make_cluster(3, zookeeper_session_timeout_ms="6000")
    create_topic(cluster.bootstrap, "known", 1, 3)
    restarted = cluster.brokers[2]
    restarted.kill()
    restarted.start()  # returns once it listens; its registration waits for the old session to end
    with RawClient(restarted.bootstrap) as raw:
        answer = raw.call(ApiKey.METADATA, 8, {"topics": [{"name": "known"}]}, timeout_s=30)
    assert "waiting to register broker 2" in restarted.log_path.read_text(), "asked after registration"
    assert sorted(b["node_id"] for b in answer["brokers"]) == [0, 1, 2]
    assert answer["controller_id"] >= 0
    assert [(t["name"], t["error_code"]) for t in answer["topics"]] == [("known", 0)]
