"""Followers learn DeleteRecords' offset (KIP-107) from the leader's log start in every FetchResponse, on
a 3-broker cluster (ZooKeeper, three broker processes), so that after the leader is killed the new
leader's log starts where DeleteRecords put it.

Untiered: DeleteRecords (kafka-python's admin client) inside the log; each follower then refuses a
consumer's read just below the offset (OFFSET_OUT_OF_RANGE, read from the follower itself: KIP-392 lets
any replica serve a v11 fetch), which is the condition it must meet before the leader dies; the leader is
killed with SIGKILL and the new one answers ListOffsets earliest (-2) with the offset, OFFSET_OUT_OF_RANGE
below it, and every record from it on. Then both followers are stopped and started again with the old
leader still down: the one elected answers the offset from its checkpoint.

Tiered (SeaweedFS): the same with the offset inside the remote log, below every broker's local log
start: the followers keep it although no local segment of theirs lies below it, and the new leader does
not serve the remote segments below it either.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from confluent_kafka.admin import AdminClient, NewTopic

from strom.testing.cluster import LocalCluster
from strom.testing.seaweedfs_process import SeaweedS3Process
from tests.cluster.conftest import new_leader, partitions_of, wait_until
from tests.cluster.tiered import create_tiered_topic, local_start, produce, seaweedfs, tiered_settings
from tests.integration.clients import make_client
from tests.integration.rawclient import RawClient

__all__ = ["seaweedfs"]

RECORDS = 1200
OFFSET_OUT_OF_RANGE = 1
EARLIEST = -2


def _fetch_error(bootstrap: str, topic: str, offset: int) -> int:
    with RawClient(bootstrap) as raw:
        return int(raw.fetch(topic, 0, offset)["error_code"])


def _earliest(bootstrap: str, topic: str) -> int:
    with RawClient(bootstrap) as raw:
        return int(raw.list_offset(topic, 0, EARLIEST)["offset"])


def _delete_then_kill_the_leader(cluster: LocalCluster, topic: str, before: int, values: list[bytes]) -> None:
    """DeleteRecords before ``before``; once every follower refuses a read below it, the leader is killed;
    then the new leader's log starts there, and still does once the followers have restarted."""
    leader, replicas, _ = partitions_of(cluster.bootstrap, topic)[0]
    assert make_client("kafka-python", cluster.bootstrap).delete_records(topic, 0, before) == before
    for follower in [b for b in replicas if b != leader]:
        address = cluster.brokers[follower].bootstrap
        wait_until(
            lambda a=address: _fetch_error(a, topic, before - 1) == OFFSET_OUT_OF_RANGE,
            60,
            f"broker {follower} to learn the log start {before}",
        )
        assert _fetch_error(address, topic, before) == 0

    cluster.brokers[leader].kill()
    survivor = cluster.brokers[new_leader(cluster.bootstrap, topic, leader)].bootstrap
    wait_until(lambda: _earliest(survivor, topic) >= 0, 60, "the new leader's ListOffsets")
    assert _earliest(survivor, topic) == before
    assert _fetch_error(survivor, topic, before - 1) == OFFSET_OUT_OF_RANGE
    assert _fetch_error(survivor, topic, 0) == OFFSET_OUT_OF_RANGE
    got = make_client("confluent-kafka", survivor).consume(topic, 0, before, RECORDS - before, timeout_s=60)
    assert [r.offset for r in got] == list(range(before, RECORDS))
    assert [r.value for r in got] == values[before:]

    # The followers checkpointed it: both stopped and started again (the old leader stays down), the
    # one elected still starts its log there.
    followers = [b for b in replicas if b != leader]
    for b in followers:
        cluster.brokers[b].stop()
    for b in followers:
        cluster.brokers[b].start()
    restarted = cluster.brokers[new_leader(cluster.bootstrap, topic, leader, timeout_s=90)].bootstrap
    wait_until(lambda: _earliest(restarted, topic) == before, 90, f"the log start {before} after a restart")
    assert _fetch_error(restarted, topic, before - 1) == OFFSET_OUT_OF_RANGE


def test_followers_take_the_deleted_to_offset_without_tiering(make_cluster: Callable[..., Any]) -> None:
    cluster = make_cluster(3)
    topic = "deleted-untiered"
    new = NewTopic(topic, 1, 3, config={"segment.bytes": "16384", "min.insync.replicas": "2"})
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})  # outlives its futures
    for future in admin.create_topics([new]).values():
        future.result(30)
    values = [b"u%06d:" % i + b"x" * 90 for i in range(RECORDS)]
    produce(cluster.bootstrap, topic, values)
    _delete_then_kill_the_leader(cluster, topic, 700, values)


def test_followers_take_the_deleted_to_offset_across_the_remote_tier(
    make_cluster: Callable[..., Any], seaweedfs: SeaweedS3Process
) -> None:
    cluster = make_cluster(3, **tiered_settings(seaweedfs, metadata_partitions=3))
    topic = "deleted-tiered"
    create_tiered_topic(cluster.bootstrap, topic, 1, segment_bytes=16384, local_retention_bytes=16384)
    values = [b"t%06d:" % i + b"y" * 90 for i in range(RECORDS)]
    produce(cluster.bootstrap, topic, values)
    # Every broker's local log starts past offset 500: below it the log is only remote.
    wait_until(
        lambda: all(local_start(b, topic) > 500 for b in cluster.brokers.values()),
        90,
        "the first segments only in remote storage",
    )
    _delete_then_kill_the_leader(cluster, topic, 300, values)
