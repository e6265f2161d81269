"""kill -9 of a tiered partition's leader in the middle of a copy and in the middle of a remote deletion
(3 brokers, ZooKeeper, SeaweedFS behind a fault proxy that holds the leader's object-store calls).

Mid-copy: the proxy stalls, the leader rolls a segment and records COPY_SEGMENT_STARTED, its upload
hangs, and it is killed. The new leader finds the unfinished copy in ``__remote_log_metadata``, deletes
its objects (DELETE_SEGMENT_STARTED, DELETE_SEGMENT_FINISHED: it was never visible) and copies on;
every record reads back from offset 0. Mid-delete: with a small ``retention.bytes`` the (new) leader
records DELETE_SEGMENT_STARTED for an expired remote segment while the proxy stalls, and is killed; the
next leader finishes the deletion, and the log read from its earliest offset is the produced tail.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource

from strom.testing.cluster import LocalCluster
from strom.testing.fault_proxy import FaultProxy
from strom.testing.seaweedfs_process import SeaweedS3Process
from tests.cluster.conftest import partitions_of, wait_until
from tests.cluster.tiered import METADATA_TOPIC, create_tiered_topic, produce, seaweedfs, tiered_settings
from tests.integration.clients import make_client
from tests.object_stores import new_bucket, object_keys

__all__ = ["seaweedfs"]

TOPIC = "tiered-kill"


@pytest.fixture
def proxy(seaweedfs: SeaweedS3Process) -> Iterator[FaultProxy]:
    with FaultProxy(("127.0.0.1", int(seaweedfs.endpoint_url.rsplit(":", 1)[1]))) as running:
        yield running


def _events(bootstrap: str) -> dict[str, list[str]]:
    """segment id -> its states, in order, as ``__remote_log_metadata`` holds them for the partition."""
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "rlmm-reader", "enable.auto.commit": False}
    )
    try:
        meta = consumer.list_topics(METADATA_TOPIC, timeout=10).topics[METADATA_TOPIC]
        parts = [TopicPartition(METADATA_TOPIC, p, 0) for p in meta.partitions]
        highs = {p.partition: consumer.get_watermark_offsets(p, timeout=10)[1] for p in parts}
        consumer.assign(parts)
        out: dict[str, list[str]] = {}
        done = {p for p, high in highs.items() if high == 0}
        deadline = time.monotonic() + 20
        while len(done) < len(parts) and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None or msg.error():
                continue
            if msg.key() == f"{TOPIC}-0".encode():
                event = json.loads(msg.value())
                out.setdefault(str(event["segmentId"]), []).append(str(event["state"]))
            if msg.offset() + 1 >= highs[msg.partition()]:
                done.add(msg.partition())
        return out
    finally:
        consumer.close()


def _in_state(bootstrap: str, last: str) -> list[str]:
    return [segment for segment, states in _events(bootstrap).items() if states[-1] == last]


def _leader(cluster: LocalCluster, not_in: tuple[int, ...] = ()) -> int:
    found = wait_until(  # a list: broker 0 is a leader too
        lambda: (lead := partitions_of(cluster.bootstrap, TOPIC)[0][0]) not in (-1, *not_in) and [lead],
        60,
        "a leader",
    )
    assert isinstance(found, list)
    return int(found[0])


def test_kill_the_leader_mid_copy_and_mid_delete(
    make_cluster: Callable[..., Any], seaweedfs: SeaweedS3Process, proxy: FaultProxy
) -> None:
    bucket = new_bucket(seaweedfs)
    settings = {
        **tiered_settings(seaweedfs, metadata_partitions=2, bucket=bucket),
        "rsm.config.storage.s3.endpoint.url": proxy.url,
        "rsm.config.storage.s3.api.call.attempt.timeout": "60000",  # a stalled call stays in flight
    }
    cluster = make_cluster(3, **settings)
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    create_tiered_topic(cluster.bootstrap, TOPIC, 1, segment_bytes=16384, local_retention_bytes=16384)
    first = [b"a%06d:" % i + b"x" * 90 for i in range(600)]
    produce(cluster.bootstrap, TOPIC, first)
    wait_until(lambda: _in_state(cluster.bootstrap, "COPY_SEGMENT_FINISHED"), 60, "the first copies")

    # Mid-copy: the upload hangs after COPY_SEGMENT_STARTED; the leader dies there.
    leader = _leader(cluster)
    with proxy.stalled():
        second = [b"b%06d:" % i + b"y" * 90 for i in range(600)]
        produce(cluster.bootstrap, TOPIC, second)
        started = wait_until(
            lambda: _in_state(cluster.bootstrap, "COPY_SEGMENT_STARTED"), 60, "a copy in flight"
        )
        cluster.brokers[leader].kill()
    assert isinstance(started, list)
    orphan = started[0]
    second_leader = _leader(cluster, (leader,))
    wait_until(
        lambda: _events(cluster.bootstrap)[orphan][-1] == "DELETE_SEGMENT_FINISHED", 90, "the orphan deleted"
    )
    assert _events(cluster.bootstrap)[orphan] == [
        "COPY_SEGMENT_STARTED",
        "DELETE_SEGMENT_STARTED",
        "DELETE_SEGMENT_FINISHED",
    ]
    assert not [
        key for key in object_keys(seaweedfs, bucket, f"{TOPIC}-") if orphan in key
    ]  # nothing half visible
    cluster.brokers[leader].start()
    got = make_client("confluent-kafka", cluster.bootstrap).consume(TOPIC, 0, 0, 1200, timeout_s=90)
    assert [r.value for r in got] == first + second  # nothing lost, nothing twice
    wait_until(lambda: len(_in_state(cluster.bootstrap, "COPY_SEGMENT_FINISHED")) >= 5, 90, "copying resumed")

    # Mid-delete: expiry records DELETE_SEGMENT_STARTED, the deletion hangs, the leader dies there.
    retention = [ConfigEntry("retention.bytes", "40000", incremental_operation=AlterConfigOpType.SET)]
    with proxy.stalled():
        resource = ConfigResource("TOPIC", TOPIC, incremental_configs=retention)
        for future in admin.incremental_alter_configs([resource]).values():
            future.result(30)
        deleting = wait_until(
            lambda: _in_state(cluster.bootstrap, "DELETE_SEGMENT_STARTED"), 60, "a deletion in flight"
        )
        cluster.brokers[second_leader].kill()
    assert isinstance(deleting, list)
    _leader(cluster, (second_leader,))
    for segment in deleting:
        wait_until(
            lambda s=segment: _events(cluster.bootstrap)[s][-1] == "DELETE_SEGMENT_FINISHED",
            90,
            "the deletion finished by the next leader",
        )
        assert not [key for key in object_keys(seaweedfs, bucket, f"{TOPIC}-") if segment in key]
    earliest = _earliest(cluster.bootstrap)
    assert earliest > 0  # the expired segments are gone
    tail = (first + second)[earliest:]
    got = make_client("confluent-kafka", cluster.bootstrap).consume(
        TOPIC, 0, earliest, len(tail), timeout_s=90
    )
    assert [r.value for r in got] == tail


def _earliest(bootstrap: str) -> int:
    """The partition's log start as a consumer sees it (ListOffsets earliest, through the leader)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "earliest", "enable.auto.commit": False})
    try:
        low, _ = consumer.get_watermark_offsets(TopicPartition(TOPIC, 0), timeout=30)
        return int(low)
    finally:
        consumer.close()
