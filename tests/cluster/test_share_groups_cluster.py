"""A share group (KIP-932, confluent-kafka ``ShareConsumer``) on three brokers and a real ZooKeeper: the
group's coordinator is killed with SIGKILL while two consumers share a partition led by another
broker. Share-group membership is kept as records in `__consumer_offsets`, so the new coordinator
carries on with the same members and the same group epoch (a third member joined and left before,
so a group rebuilt from rejoins would be at a lower epoch), the leader's share-partition state is
untouched, and every record is accepted exactly once: each consumer reports the acceptances the
broker confirmed, and the leader's share-partition start offset (``/metrics``) reaches the end of the
partition. Once both consumers closed, the new coordinator keeps the group, Empty, two epochs on."""

from __future__ import annotations

from collections import Counter
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


def described(address: str) -> Any:
    """ShareGroupDescribe of the group at the broker at ``address``."""
    with RawClient(address) as raw:
        (group,) = raw.call(ApiKey.SHARE_GROUP_DESCRIBE, 1, {"group_ids": [GROUP]})["groups"]
    return group


def stable(address: str, members: int) -> Any:
    """The group as the broker at ``address`` describes it, once it has ``members`` members (else
    None)."""
    group = described(address)
    return group if group["error_code"] == 0 and len(group["members"]) == members else None


def members_of(group: Any) -> set[str]:
    return {m["member_id"] for m in group["members"]}


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
    config = {"bootstrap": cluster.bootstrap, "topics": [TOPIC], "group": GROUP, "max_poll_records": 10}
    for name in ("a", "b", "c"):
        share_consumers.append(ShareConsumerProcess(tmp_path, name, {**config, "mode": "verdicts"}))
    at = cluster.brokers[coordinator].bootstrap
    wait_until(lambda: stable(at, 3), 60, "three members")
    share_consumers[2].terminate()  # "c" leaves: a new group epoch
    before = wait_until(lambda: stable(at, 2), 60, "two members after the leave")
    assert isinstance(before, dict)

    def accepted() -> list[int]:
        """Every acceptance the broker confirmed to a consumer."""
        return [
            o for c in share_consumers for e in c.snapshot() if e["ev"] == "committed" for o in e["accepted"]
        ]

    wait_until(lambda: set(accepted()) >= set(range(100)), 90, "the first 100 records accepted")
    cluster.brokers[coordinator].kill()
    produce(cluster.bootstrap, 100, 100)
    wait_until(lambda: set(accepted()) >= set(range(200)), 120, "the next 100 records accepted")
    twice = [o for o, n in Counter(accepted()).items() if n > 1]
    assert not twice, f"accepted twice: {twice}"
    http_url = cluster.brokers[leader].http_url
    assert http_url is not None
    labels = {"sharegroup": GROUP, "topic": TOPIC, "partition": "0"}

    def all_acknowledged() -> bool:
        return value(scrape(http_url), "kafka_sharegroup_start_offset", **labels) == 200

    wait_until(all_acknowledged, 30, "every record acknowledged at the leader")
    found = wait_until(lambda: [coordinator_of(cluster.bootstrap, GROUP)], 30, "the new coordinator")
    assert isinstance(found, list) and found[0] != coordinator
    at = cluster.brokers[int(found[0])].bootstrap
    after = wait_until(lambda: stable(at, 2), 30, "the members at the new coordinator")
    assert isinstance(after, dict)
    # The same members, at the group epoch they had: nobody joined again.
    assert after["group_epoch"] >= before["group_epoch"] >= 4, (before, after)
    assert members_of(after) == members_of(before)
    for consumer in share_consumers:
        consumer.terminate()
    # Both left: the group stays at the new coordinator, Empty, two epochs on (as Kafka keeps it).
    empty = wait_until(lambda: stable(at, 0), 60, "the group without members")
    assert isinstance(empty, dict)
    assert (empty["group_state"], empty["group_epoch"]) == ("Empty", after["group_epoch"] + 2), empty
