"""A share group (KIP-932, confluent-kafka ``ShareConsumer``) on three brokers and a real ZooKeeper: the
group's coordinator is killed with SIGKILL while two consumers share a partition led by another
broker. The members rejoin at the new coordinator (share-group membership is kept in memory), the
leader's share-partition state is untouched, and every record is delivered and acknowledged: the
leader's share-partition start offset (``/metrics``) reaches the end of the partition."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from strom.protocol.api import ApiKey
from strom.testing.cluster import LocalCluster
from strom.testing.metrics import scrape, value
from tests.cluster.conftest import wait_until
from tests.integration.rawclient import RawClient
from tests.integration.share_clients import ShareConsumerProcess, share_consumers  # noqa: F401

GROUP, TOPIC = "workers", "jobs"
SETTINGS = {
    "offsets_topic_replication_factor": "3",
    "share_auto_offset_reset": "earliest",
    "group_share_heartbeat_interval_ms": "500",
    "group_share_session_timeout_ms": "6000",
    "group_share_record_lock_duration_ms": "5000",
}


def produce(bootstrap: str, start: int, count: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 1})
    for i in range(start, start + count):
        producer.produce(TOPIC, value=str(i).encode(), partition=0)
        if i % 10 == 9:
            producer.flush(30)
    assert producer.flush(60) == 0


def coordinator_of(bootstrap: str, group: str) -> int:
    with RawClient(bootstrap.split(",", maxsplit=1)[0]) as raw:
        answer = raw.call(ApiKey.FIND_COORDINATOR, 4, {"key_type": 0, "coordinator_keys": [group]})
    (found,) = answer["coordinators"]
    assert found["error_code"] == 0, found
    return int(found["node_id"])


def test_share_group_survives_a_coordinator_kill(
    make_cluster: Any,
    share_consumers: list[ShareConsumerProcess],  # noqa: F811
    tmp_path: Path,
) -> None:
    cluster: LocalCluster = make_cluster(3, **SETTINGS)
    found = wait_until(lambda: [coordinator_of(cluster.bootstrap, GROUP)], 30, "the group's coordinator")
    assert isinstance(found, list)
    coordinator = int(found[0])
    # The partition's leader (first replica) is another broker, so the kill leaves its state alone.
    leader = (coordinator + 1) % 3
    replicas = [leader, coordinator, (coordinator + 2) % 3]
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics(
        [NewTopic(TOPIC, 1, replica_assignment=[replicas], config={"min.insync.replicas": "2"})]
    )[TOPIC].result(30)
    produce(cluster.bootstrap, 0, 100)
    for name in ("a", "b"):
        config = {"bootstrap": cluster.bootstrap, "topics": [TOPIC], "group": GROUP, "max_poll_records": 10}
        share_consumers.append(ShareConsumerProcess(tmp_path, name, config))

    def seen() -> set[int]:
        return {o for c in share_consumers for o in c.offsets()}

    wait_until(lambda: seen() >= set(range(100)), 60, "the first 100 records")
    cluster.brokers[coordinator].kill()
    produce(cluster.bootstrap, 100, 100)
    wait_until(lambda: seen() >= set(range(200)), 90, "the next 100 records")
    http_url = cluster.brokers[leader].http_url
    assert http_url is not None
    labels = {"sharegroup": GROUP, "topic": TOPIC, "partition": "0"}

    def all_acknowledged() -> bool:
        return value(scrape(http_url), "kafka_sharegroup_start_offset", **labels) == 200

    wait_until(all_acknowledged, 30, "every record acknowledged at the leader")
    wait_until(lambda: coordinator_of(cluster.bootstrap, GROUP) != coordinator, 30, "a new coordinator")
    for consumer in share_consumers:
        consumer.terminate()
