"""Cluster-mode gaps closed: coordinator durability and leadership moves, topic deletion and config
propagation, ListOffsets leader epochs. Real ZooKeeper, real broker processes, real clients."""

from __future__ import annotations

import signal
import socket
import struct
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    OffsetSpec,
)
from kazoo.client import KazooClient

from strom._util.clock import ManualClock
from strom.coordinator import GroupConfig, GroupCoordinator
from strom.coordinator.messages import OffsetAndMetadata
from strom.coordinator.messages import TopicPartition as GroupTp
from strom.coordinator.ports import ManualScheduler
from strom.coordinator.records import OffsetCommitKey, OffsetCommitValue, encode_key, encode_value
from strom.protocol.api import ApiKey
from strom.protocol.codec import decode_response, encode_request
from strom.testing.cluster import LocalCluster

from .conftest import partitions_of, wait_until

pytestmark = pytest.mark.cluster

NOT_COORDINATOR = 16
OFFSETS_TOPIC = "__consumer_offsets"


def _call(address: str, api_key: int, version: int, body: dict[str, Any]) -> dict[str, Any]:
    host, port = address.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=30) as s:
        s.sendall(encode_request(api_key, version, 1, "gaps-test", body))
        size = struct.unpack(">i", s.recv(4, socket.MSG_WAITALL))[0]
        payload = b""
        while len(payload) < size:
            chunk = s.recv(size - len(payload))
            assert chunk, "connection closed mid-response"
            payload += chunk
    return decode_response(api_key, version, payload)[1]


def _metadata(address: str) -> dict[str, Any]:
    body = {
        "topics": None,
        "allow_auto_topic_creation": False,
        "include_cluster_authorized_operations": False,
        "include_topic_authorized_operations": False,
    }
    return _call(address, ApiKey.METADATA, 8, body)


def _leader_epoch(address: str, topic: str, partition: int) -> int:
    for t in _metadata(address)["topics"]:
        if t["name"] == topic:
            for p in t["partitions"]:
                if p["partition_index"] == partition:
                    return int(p["leader_epoch"])
    raise AssertionError(f"{topic}-{partition} not in metadata")


def _create(bootstrap: str, name: str, partitions: int, rf: int, **configs: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for fut in admin.create_topics([NewTopic(name, partitions, rf, config=configs)]).values():
        fut.result(timeout=30)
    wait_until(lambda: all(p[0] >= 0 for p in partitions_of(bootstrap, name).values()), what="leaders")


def _java_hash_partition(group_id: str, partitions: int) -> int:
    from strom.coordinator import partition_for

    return int(partition_for(group_id, partitions))


def _coordinator(bootstrap: str, group_id: str) -> int:
    """The leader of the group's __consumer_offsets partition, as Metadata reports it."""
    partition = _java_hash_partition(group_id, 3)
    return partitions_of(bootstrap, OFFSETS_TOPIC)[partition][0]


def _committed(bootstrap: str, group_id: str, tps: list[TopicPartition]) -> dict[int, int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group_id, "enable.auto.commit": False})
    try:
        return {tp.partition: tp.offset for tp in consumer.committed(tps, timeout=20)}
    finally:
        consumer.close()


# --- 1. OffsetCommit waits for the ISR; kill -9 of the coordinator loses no acknowledged commit ----------


def test_commit_waits_for_isr_and_survives_coordinator_kill9(make_cluster: Any) -> None:
    cluster: LocalCluster = make_cluster(3)
    _create(cluster.bootstrap, "paid", 3, 3)
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
    for p in range(3):
        for i in range(10):
            producer.produce("paid", value=f"{p}-{i}", partition=p)
    assert producer.flush(30) == 0
    group_conf = {
        "bootstrap.servers": cluster.bootstrap,
        "group.id": "durable",
        "enable.auto.commit": False,
        "auto.offset.reset": "latest",
        "session.timeout.ms": 6000,
    }
    consumer = Consumer(group_conf)
    consumer.subscribe(["paid"])
    wait_until(lambda: consumer.poll(0.2) is None and len(consumer.assignment()) == 3, 30, "an assignment")
    coordinator = _coordinator(cluster.bootstrap, "durable")
    followers = [b for b in cluster.brokers if b != coordinator]
    tps = [TopicPartition("paid", p, 5) for p in range(3)]

    # With both followers of the group's __consumer_offsets partition stopped, the commit cannot reach
    # the ISR: it must not be acknowledged until they resume (acks=-1 semantics).
    done = threading.Event()
    failure: list[BaseException] = []

    def commit() -> None:
        try:
            consumer.commit(offsets=tps, asynchronous=False)
        except BaseException as exc:  # reported below
            failure.append(exc)
        done.set()

    for b in followers:
        cluster.brokers[b].signal(signal.SIGSTOP)
    try:
        thread = threading.Thread(target=commit, daemon=True)
        thread.start()
        assert not done.wait(1.5), "the commit was acknowledged before any follower had it"
    finally:
        for b in followers:
            cluster.brokers[b].signal(signal.SIGCONT)
    assert done.wait(20), "the commit never completed after the followers resumed"
    assert not failure, failure
    cluster.brokers[coordinator].kill()  # immediately after the acknowledgement

    wait_until(lambda: _coordinator(cluster.bootstrap, "durable") not in (-1, coordinator), 30, "failover")
    closer = threading.Thread(target=consumer.close, daemon=True)
    closer.start()
    closer.join(30)
    assert _committed(cluster.bootstrap, "durable", [TopicPartition("paid", p) for p in range(3)]) == {
        0: 5,
        1: 5,
        2: 5,
    }
    # The restarted consumer resumes at the committed offsets (auto.offset.reset=latest would skip them).
    resumed = Consumer(group_conf)
    resumed.subscribe(["paid"])
    got: dict[int, list[str]] = {}
    deadline = time.monotonic() + 60
    while sum(len(v) for v in got.values()) < 15 and time.monotonic() < deadline:
        msg = resumed.poll(0.5)
        if msg is not None and not msg.error():
            got.setdefault(msg.partition(), []).append(msg.value().decode())
    resumed.close()
    assert got == {p: [f"{p}-{i}" for i in range(5, 10)] for p in range(3)}


# --- 2. Losing leadership unloads the partition's groups; regaining it reloads from the log ---------


def test_coordinator_moves_away_and_back_unloads_and_reloads(make_cluster: Any) -> None:
    cluster: LocalCluster = make_cluster(3, leader_imbalance_check_interval_seconds="2")
    _create(cluster.bootstrap, "moves", 1, 3)
    tp = [TopicPartition("moves", 0)]

    def commit(offset: int) -> None:
        c = Consumer(
            {"bootstrap.servers": cluster.bootstrap, "group.id": "mover", "enable.auto.commit": False}
        )
        try:
            c.commit(offsets=[TopicPartition("moves", 0, offset)], asynchronous=False)
        finally:
            c.close()

    commit(1)
    first = _coordinator(cluster.bootstrap, "mover")
    preferred = partitions_of(cluster.bootstrap, OFFSETS_TOPIC)[_java_hash_partition("mover", 3)][1][0]
    assert first == preferred
    cluster.brokers[first].kill()
    second = wait_until(
        lambda: (c := _coordinator(cluster.bootstrap, "mover")) not in (-1, first) and c, 30, "failover"
    )
    assert isinstance(second, int)
    commit(2)
    assert _committed(cluster.bootstrap, "mover", tp) == {0: 2}
    second_addr = cluster.brokers[second].bootstrap
    assert "mover" in [g["group_id"] for g in _call(second_addr, ApiKey.LIST_GROUPS, 0, {})["groups"]]

    cluster.brokers[first].start()  # comes back as follower, then the preferred leader again
    wait_until(lambda: _coordinator(cluster.bootstrap, "mover") == first, 60, "preferred leader back")
    # The former coordinator no longer holds or answers for the group.
    wait_until(
        lambda: (
            "mover" not in [g["group_id"] for g in _call(second_addr, ApiKey.LIST_GROUPS, 0, {})["groups"]]
        ),
        10,
        "the group unloaded from the former coordinator",
    )
    described = _call(second_addr, ApiKey.DESCRIBE_GROUPS, 0, {"groups": ["mover"]})["groups"][0]
    assert described["error_code"] == NOT_COORDINATOR
    assert _committed(cluster.bootstrap, "mover", tp) == {0: 2}

    # And back again to the second broker: it reloads from the log (latest commit), not stale memory.
    commit(3)
    cluster.brokers[first].kill()
    wait_until(lambda: _coordinator(cluster.bootstrap, "mover") not in (-1, first), 30, "failover again")
    assert _committed(cluster.bootstrap, "mover", tp) == {0: 3}
    commit(4)
    assert _committed(cluster.bootstrap, "mover", tp) == {0: 4}


def test_load_partition_replaces_memory_with_the_log() -> None:
    """Sans-I/O: reloading a partition drops what memory held (e.g. a commit truncated from the log)."""

    class Writer:
        def append(self, partition: int, records: Any) -> None:
            del partition, records

    clock = ManualClock()
    coordinator = GroupCoordinator(GroupConfig(), clock, ManualScheduler(clock), Writer(), 3)
    gid = "stale"
    p = coordinator.partition_for(gid)
    coordinator.commit_offsets(gid, -1, "", None, {GroupTp("t", 0): OffsetAndMetadata(9, -1, "")})
    coordinator.commit_offsets(gid, -1, "", None, {GroupTp("t", 1): OffsetAndMetadata(7, -1, "")})
    log_records = [
        (encode_key(OffsetCommitKey(gid, "t", 0)), encode_value(OffsetCommitValue(4, -1, "", 0))),
    ]
    assert coordinator.load_partition(p, log_records) == 1
    assert coordinator.fetch_offsets(gid, None) == {GroupTp("t", 0): OffsetAndMetadata(4, -1, "", 0)}
    assert coordinator.unload_partition(p) == 1
    assert coordinator.fetch_offsets(gid, None) == {}


# --- 3. DeleteTopics and topic configs in the cluster ----------------------------------------------------


def test_delete_topic_everywhere_and_recreate(make_cluster: Any) -> None:
    cluster: LocalCluster = make_cluster(3)
    _create(cluster.bootstrap, "doomed", 3, 3)
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
    for i in range(30):
        producer.produce("doomed", value=f"old-{i}", partition=i % 3)
    assert producer.flush(30) == 0
    for b in cluster.brokers.values():
        wait_until(lambda b=b: len(list(b.data_dir.rglob("doomed-*"))) == 3, 20, "replicas on disk")

    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.delete_topics(["doomed"])["doomed"].result(timeout=30)

    def gone_everywhere() -> bool:
        return all(
            "doomed" not in [t["name"] for t in _metadata(b.bootstrap)["topics"]]
            for b in cluster.brokers.values()
        )

    wait_until(gone_everywhere, 20, "every broker's Metadata to drop the topic")
    for b in cluster.brokers.values():
        wait_until(lambda b=b: not list(b.data_dir.rglob("doomed-*")), 20, "replica directories removed")
    zk = KazooClient(hosts=cluster.zookeeper.connect)
    zk.start(timeout=15)
    try:
        for path in ("/brokers/topics/doomed", "/config/topics/doomed", "/admin/delete_topics/doomed"):
            assert zk.exists(path) is None, path
    finally:
        zk.stop()
        zk.close()

    # The name can be reused; the new topic starts empty on every replica.
    _create(cluster.bootstrap, "doomed", 3, 3)
    for p in range(3):
        low, high = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "x"}).get_watermark_offsets(
            TopicPartition("doomed", p), timeout=10
        )
        assert (low, high) == (0, 0)


def _describe_on(address: str, topic: str, key: str) -> str | None:
    body = {
        "resources": [{"resource_type": 2, "resource_name": topic, "configuration_keys": [key]}],
        "include_synonyms": False,
    }
    result = _call(address, ApiKey.DESCRIBE_CONFIGS, 1, body)["results"][0]
    assert result["error_code"] == 0, result
    return next((c["value"] for c in result["configs"] if c["name"] == key), None)


def test_topic_configs_reach_every_replica(make_cluster: Any) -> None:
    cluster: LocalCluster = make_cluster(3, log_retention_check_interval_ms="500")
    _create(cluster.bootstrap, "tuned", 1, 3, **{"segment.bytes": "2048"})
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "linger.ms": 0})
    for _ in range(60):
        producer.produce("tuned", value=b"x" * 200)
        producer.flush(10)
    leader, replicas, _ = partitions_of(cluster.bootstrap, "tuned")[0]

    def segments(broker: int) -> list[Path]:
        return sorted(cluster.brokers[broker].data_dir.rglob("tuned-0/*.log"))

    for b in replicas:
        wait_until(lambda b=b: len(segments(b)) >= 3, 20, f"several segments on broker {b}")

    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    resource = ConfigResource(
        "topic",
        "tuned",
        incremental_configs=[
            ConfigEntry("retention.ms", "1000", incremental_operation=AlterConfigOpType.SET)
        ],
    )
    for fut in admin.incremental_alter_configs([resource]).values():
        fut.result(timeout=30)
    for b in replicas:
        wait_until(lambda b=b: _describe_on(cluster.brokers[b].bootstrap, "tuned", "retention.ms") == "1000")
    # Retention runs on the leader and on both followers: old segments go everywhere.
    for b in replicas:
        wait_until(
            lambda b=b: len(segments(b)) <= 1, 30, f"retention applied on broker {b} (leader {leader})"
        )
    low, high = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "x"}).get_watermark_offsets(
        TopicPartition("tuned", 0), timeout=10
    )
    assert high == 60 and low > 0

    # The non-incremental AlterConfigs replaces the topic's overrides on every broker too.
    legacy = ConfigResource("topic", "tuned", set_config={"retention.ms": "86400000"})
    with pytest.warns(DeprecationWarning):  # confluent-kafka deprecates it; Kafka still serves it
        futures = admin.alter_configs([legacy])
    for fut in futures.values():
        fut.result(timeout=30)
    for b in replicas:
        wait_until(
            lambda b=b: (
                _describe_on(cluster.brokers[b].bootstrap, "tuned", "retention.ms") == "86400000"
                and _describe_on(cluster.brokers[b].bootstrap, "tuned", "segment.bytes") != "2048"
            )
        )


# --- 4. ListOffsets reports leader epochs ------------------------------------------------------------


def test_list_offsets_reports_leader_epochs(make_cluster: Any) -> None:
    cluster: LocalCluster = make_cluster(3)
    _create(cluster.bootstrap, "epochs", 1, 3, **{"min.insync.replicas": "2"})
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
    first_ts = int(time.time() * 1000) - 60_000
    for i in range(5):
        producer.produce("epochs", value=str(i), timestamp=first_ts + i)
    assert producer.flush(30) == 0
    tp = TopicPartition("epochs", 0)

    def list_offset(spec: OffsetSpec) -> tuple[int, int]:
        # A fresh client each time: librdkafka's admin keeps waiting for a cached (dead) leader.
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        info = admin.list_offsets({tp: spec})[tp].result(timeout=20)
        return info.offset, info.leader_epoch

    leader = partitions_of(cluster.bootstrap, "epochs")[0][0]
    epoch0 = _leader_epoch(cluster.brokers[leader].bootstrap, "epochs", 0)
    assert list_offset(OffsetSpec.latest()) == (5, epoch0)
    assert list_offset(OffsetSpec.earliest()) == (0, epoch0)

    cluster.brokers[leader].kill()
    new_leader = wait_until(
        lambda: (n := partitions_of(cluster.bootstrap, "epochs")[0][0]) not in (-1, leader) and n,
        30,
        "a new leader",
    )
    assert isinstance(new_leader, int)
    epoch1 = _leader_epoch(cluster.brokers[new_leader].bootstrap, "epochs", 0)
    assert epoch1 > epoch0
    second_ts = int(time.time() * 1000)
    for i in range(5, 10):
        producer.produce("epochs", value=str(i), timestamp=second_ts + i)
    assert producer.flush(60) == 0
    assert list_offset(OffsetSpec.latest()) == (10, epoch1)
    assert list_offset(OffsetSpec.earliest()) == (0, epoch0)
    assert list_offset(OffsetSpec.for_timestamp(first_ts + 2)) == (2, epoch0)  # batch of the old epoch
    assert list_offset(OffsetSpec.for_timestamp(second_ts)) == (5, epoch1)
