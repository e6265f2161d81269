"""The controller keeps a failed log dir's replicas offline across the broker's new registrations
(KIP-112), on a 3-broker cluster with a real ZooKeeper.

Every broker has two log dirs. A topic's partitions all have the replicas [victim, partner] (two brokers
other than the controller), with unclean leader election on: a live replica outside the ISR may be
elected, so nothing but the controller's knowledge of the failed dir keeps the victim from leading a
partition whose log it lost. The victim's second dir is made read-only under it (a read-only bind
mount); its next offset checkpoint fails, the dir goes offline and the leaderships of its partitions
move to the partner. The partner then stops: those partitions have no replica left that can lead
(leader -1), while the victim leads the ones in its healthy dir. Then:

1. the victim's ZooKeeper session expires (the process is stopped until the controller sees it gone)
   and it registers again: the controller, which forgets what it knew of a broker's dirs at a new
   registration, may elect it, and learns from its LeaderAndIsr answer (KAFKA_STORAGE_ERROR) that those
   replicas are offline: the partitions go back to no leader;
2. the victim restarts with the dir still read-only: it starts with that dir offline (the lock cannot be
   taken), serves the other, answers KAFKA_STORAGE_ERROR for the replicas it finds in the failed dir,
   and the controller keeps them offline the same way; DescribeLogDirs reports the dir failed.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from strom.protocol.errors import ErrorCode
from strom.testing.cluster import LocalCluster
from tests.cluster.conftest import FAST, partitions_of, wait_until
from tests.cluster.jbod import dir_error, place, two_dirs
from tests.prerequisites import require_zookeeper
from tests.tmpfs import read_only

TOPIC = "kept"
PARTITIONS = 4


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    require_zookeeper()
    settings = {**FAST, "log.flush.offset.checkpoint.interval.ms": "300"}
    cluster = LocalCluster(tmp_path / "cluster", 3, 0, settings, broker_factory=two_dirs)
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


def _brokers(bootstrap: str) -> set[int]:
    return set(AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10).brokers)


def test_a_failed_dirs_replicas_stay_offline_across_session_expiry_and_restart(cluster: LocalCluster) -> None:
    controller = AdminClient({"bootstrap.servers": cluster.bootstrap}).list_topics(timeout=10).controller_id
    victim, partner = sorted(b for b in range(3) if b != controller)
    ask = cluster.brokers[controller].bootstrap  # never paused nor stopped below
    admin = AdminClient({"bootstrap.servers": ask})
    topic = NewTopic(
        TOPIC,
        PARTITIONS,
        replica_assignment=[[victim, partner]] * PARTITIONS,
        config={"unclean.leader.election.enable": "true", "min.insync.replicas": "1"},
    )
    failing = cluster.brokers[victim].data_dir / "logs-b"
    in_failing, healthy = {0, 1}, {2, 3}
    dirs = {p: failing if p in in_failing else failing.parent / "logs-a" for p in range(PARTITIONS)}
    place(cluster.brokers[victim].bootstrap, victim, TOPIC, dirs)
    admin.create_topics([topic])[TOPIC].result(30)
    wait_until(
        lambda: all(s[0] == victim and len(s[2]) == 2 for s in partitions_of(ask, TOPIC).values()),
        60,
        "the victim to lead every partition with a full ISR",
    )
    assert {p for p in range(PARTITIONS) if (failing / f"{TOPIC}-{p}").is_dir()} == in_failing

    def leaders(partitions: set[int]) -> set[int]:
        states = partitions_of(ask, TOPIC)
        return {states[p][0] for p in partitions}

    with read_only(failing):
        wait_until(lambda: leaders(in_failing) == {partner}, 60, "the failed dir's leaderships to move")
        cluster.brokers[partner].stop(timeout_s=30)
        wait_until(
            lambda: leaders(in_failing) == {-1} and leaders(healthy) == {victim},
            60,
            "no leader for the failed dir's partitions, the victim leading the others",
        )

        # 1. A ZooKeeper session expiry: the victim registers again.
        cluster.brokers[victim].signal(signal.SIGSTOP)
        try:
            wait_until(
                lambda: victim not in _brokers(ask), 60, "the controller to see the victim's session end"
            )
        finally:
            cluster.brokers[victim].signal(signal.SIGCONT)
        wait_until(lambda: leaders(healthy) == {victim}, 60, "the victim registered again and leading")
        wait_until(lambda: leaders(in_failing) == {-1}, 60, "the failed dir's partitions without a leader")

        # 2. A restart with the dir still failed.
        cluster.brokers[victim].stop(timeout_s=30)
        wait_until(lambda: victim not in _brokers(ask), 60, "the controller to see the victim stopped")
        cluster.brokers[victim].start()
        wait_until(lambda: leaders(healthy) == {victim}, 60, "the restarted victim leading its healthy dir")
        wait_until(lambda: leaders(in_failing) == {-1}, 60, "the failed dir's partitions without a leader")
        victim_bootstrap = cluster.brokers[victim].bootstrap
        assert dir_error(victim_bootstrap, victim, failing) == ErrorCode.KAFKA_STORAGE_ERROR
        assert dir_error(victim_bootstrap, victim, failing.parent / "logs-a") == ErrorCode.NONE

        producer = Producer({"bootstrap.servers": ask, "acks": "all"})
        for p in sorted(healthy):
            producer.produce(TOPIC, b"after the restart", partition=p)
        assert producer.flush(60) == 0
        cluster.brokers[victim].stop(timeout_s=30)  # before the mount goes: it holds the dir
