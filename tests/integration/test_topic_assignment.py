"""CreateTopics / CreatePartitions with a client-given replica assignment, as Kafka accepts them.

Kafka accepts any assignment whose partitions are numbered from 0, all with the same number of distinct
replicas, each a live broker; anything else is INVALID_REPLICA_ASSIGNMENT. On a single node the only
live broker is 0, so ``[[0]]`` is valid and ``[[1]]`` is not. (The cluster form is in
tests/cluster/test_cluster_admin.py.)
"""

from __future__ import annotations

import itertools

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic
from kafka.admin import KafkaAdminClient
from kafka.admin import NewPartitions as KpNewPartitions
from kafka.admin import NewTopic as KpNewTopic
from kafka.errors import InvalidReplicationAssignmentError

from strom.testing.broker_process import BrokerProcess

_names = itertools.count()


def _error(future: object) -> int | None:
    try:
        future.result(timeout=15)  # type: ignore[attr-defined]
    except KafkaException as exc:
        return int(exc.args[0].code())
    return None


def _partitions(admin: AdminClient, topic: str) -> dict[int, tuple[int, list[int]]]:
    md = admin.list_topics(topic, timeout=10).topics[topic]
    return {p.id: (p.leader, list(p.replicas)) for p in md.partitions.values()}


def test_confluent_kafka_manual_assignment_on_a_single_node(broker: BrokerProcess) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    good, unknown, twice = (f"assign-{k}-{next(_names)}" for k in ("good", "unknown", "twice"))
    futures = admin.create_topics(
        [
            # confluent-kafka wants the partition count beside the assignment; on the wire it is -1.
            NewTopic(good, 3, replica_assignment=[[0], [0], [0]]),
            NewTopic(unknown, 1, replica_assignment=[[1]]),
            NewTopic(twice, 1, replica_assignment=[[0, 0]]),
        ]
    )
    assert _error(futures[good]) is None
    assert _error(futures[unknown]) == KafkaError.INVALID_REPLICA_ASSIGNMENT
    assert _error(futures[twice]) == KafkaError.INVALID_REPLICA_ASSIGNMENT
    assert _partitions(admin, good) == {0: (0, [0]), 1: (0, [0]), 2: (0, [0])}
    topics = admin.list_topics(timeout=10).topics
    assert good in topics and unknown not in topics
    # CreatePartitions with an assignment for the new partitions.
    grown = admin.create_partitions([NewPartitions(good, 5, replica_assignment=[[0], [0]])])
    assert _error(grown[good]) is None
    assert sorted(_partitions(admin, good)) == [0, 1, 2, 3, 4]
    bad = admin.create_partitions([NewPartitions(good, 6, replica_assignment=[[7]])])
    assert _error(bad[good]) == KafkaError.INVALID_REPLICA_ASSIGNMENT


def test_kafka_python_manual_assignment_on_a_single_node(broker: BrokerProcess) -> None:
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        name = f"assign-kp-{next(_names)}"
        admin.create_topics([KpNewTopic(name, -1, -1, replica_assignments={0: [0], 1: [0]})])
        described = admin.describe_topics([name])[0]["partitions"]
        assert sorted((p["partition_index"], p["replica_nodes"]) for p in described) == [(0, [0]), (1, [0])]
        with pytest.raises(InvalidReplicationAssignmentError):
            wrong = KpNewTopic(f"assign-kp-{next(_names)}", -1, -1, replica_assignments={0: [3]})
            admin.create_topics([wrong])
        admin.create_partitions({name: KpNewPartitions(3, [[0]])})
        assert len(admin.describe_topics([name])[0]["partitions"]) == 3
    finally:
        admin.close()
