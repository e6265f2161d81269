"""CreateTopics / CreatePartitions with client-given replica lists on a 3-broker ZooKeeper cluster."""

from __future__ import annotations

from typing import Any

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic

from .conftest import partitions_of, wait_until


def _error(future: Any) -> int | None:
    try:
        future.result(timeout=30)
    except KafkaException as exc:
        return int(exc.args[0].code())
    return None


def test_manual_replica_assignment_is_kept_in_order(make_cluster: Any) -> None:
    cluster = make_cluster(3)
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    futures = admin.create_topics(
        [
            NewTopic("placed", 2, replica_assignment=[[2, 0, 1], [1, 2, 0]]),
            NewTopic("nowhere", 1, replica_assignment=[[0, 5, 1]]),
            NewTopic("uneven", 2, replica_assignment=[[0, 1], [2]]),
        ]
    )
    assert _error(futures["placed"]) is None
    assert _error(futures["nowhere"]) == KafkaError.INVALID_REPLICA_ASSIGNMENT
    assert _error(futures["uneven"]) == KafkaError.INVALID_REPLICA_ASSIGNMENT
    # The first replica is the preferred leader, and the order is kept.
    wait_until(
        lambda: (
            partitions_of(cluster.bootstrap, "placed")
            == {0: (2, [2, 0, 1], [2, 0, 1]), 1: (1, [1, 2, 0], [1, 2, 0])}
        ),
        30,
        "the assignment in Metadata",
    )
    grown = admin.create_partitions([NewPartitions("placed", 3, replica_assignment=[[0, 2, 1]])])
    assert _error(grown["placed"]) is None
    wait_until(lambda: partitions_of(cluster.bootstrap, "placed").get(2, (0, []))[:2] == (0, [0, 2, 1]), 30)
