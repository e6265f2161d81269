"""The rack-aware ``uniform`` assignor over TCP: three brokers in racks R1, R2 and R3 (``broker.rack``),
a topic whose partitions each have one replica, two per broker, and three confluent-kafka consumers
with ``group.protocol=consumer`` and ``client.rack`` R1, R2 and R3: each ends up with the two
partitions whose replica is in its own rack, however they joined."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from strom.testing.cluster import LocalCluster, rack_of
from tests.cluster.conftest import partitions_of, wait_until
from tests.integration.kip848_clients import Consumer

BROKERS = 3
PARTITIONS = 6


@pytest.fixture
def consumers() -> Iterator[list[Consumer]]:
    started: list[Consumer] = []
    yield started
    for consumer in started:
        consumer.kill()


def test_members_get_the_partitions_of_their_rack(
    make_cluster: Any, consumers: list[Consumer], tmp_path: Path
) -> None:
    cluster: LocalCluster = make_cluster(BROKERS, racks=BROKERS)
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    assignment = [[p % BROKERS] for p in range(PARTITIONS)]
    topic = NewTopic("racked", PARTITIONS, replica_assignment=assignment)  # the count: a client-side need
    admin.create_topics([topic])["racked"].result(30)
    wait_until(
        lambda: all(leader >= 0 for leader, _, _ in partitions_of(cluster.bootstrap, "racked").values()),
        60,
        "every partition to have a leader",
    )
    expected: dict[str, set[int]] = {}
    for broker in range(BROKERS):
        rack = rack_of(broker, BROKERS, BROKERS)
        assert rack is not None
        expected[rack] = {p for p in range(PARTITIONS) if assignment[p] == [broker]}
    for rack in sorted(expected):
        cfg = {
            "bootstrap": cluster.bootstrap,
            "topics": ["racked"],
            "group": "racks",
            "extra": {"client.rack": rack},
        }
        consumers.append(Consumer(tmp_path, rack, cfg))

    def placed() -> bool:
        return all(c.partitions == expected[c.name] for c in consumers)

    wait_until(placed, 90, "each consumer to own the partitions of its rack")
    described = admin.describe_consumer_groups(["racks"])["racks"].result(15)
    assert described.state.name == "STABLE"
    owned = [frozenset(tp.partition for tp in m.assignment.topic_partitions) for m in described.members]
    assert sorted(owned, key=min) == sorted(map(frozenset, expected.values()), key=min)
