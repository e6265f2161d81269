"""Tiered storage on a 3-broker cluster (ZooKeeper, three broker processes, one SeaweedFS bucket): the
leader copies and deletes locally, it is killed with SIGKILL, the new leader loads what is remote from
``__remote_log_metadata`` (written to its partitions' leaders over the network) and carries on copying
from there; every record reads back from offset 0 through the new leader, byte for byte."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from strom.testing import BrokerProcess
from strom.testing.seaweedfs_process import SeaweedS3Process
from tests.cluster.conftest import partitions_of, wait_until
from tests.integration.clients import make_client
from tests.object_stores import new_bucket, seaweedfs

__all__ = ["seaweedfs"]

TOPIC = "tiered-cluster"


def _produce(bootstrap: str, values: list[bytes]) -> None:
    producer = Producer(
        {"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5, "batch.num.messages": 20}
    )
    for value in values:
        producer.produce(TOPIC, value, partition=0)
    assert producer.flush(60) == 0


def _local_start(broker: BrokerProcess) -> int:
    bases = [int(p.name.split(".")[0]) for p in (broker.data_dir / "logs" / f"{TOPIC}-0").glob("*.log")]
    return min(bases, default=0)


def test_a_new_leader_carries_on_from_the_remote_metadata(
    make_cluster: Callable[..., Any], seaweedfs: SeaweedS3Process
) -> None:
    settings = {
        "remote.log.storage.system.enable": "true",
        "remote.log.manager.task.interval.ms": "300",
        "log.retention.check.interval.ms": "300",
        "rlmm.config.remote.log.metadata.topic.num.partitions": "3",
        **seaweedfs.rsm_config(new_bucket(seaweedfs)),
    }
    cluster = make_cluster(3, **settings)
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    configs = {
        "remote.storage.enable": "true",
        "segment.bytes": "16384",
        "local.retention.bytes": "16384",
        "min.insync.replicas": "2",
    }
    for future in admin.create_topics([NewTopic(TOPIC, 1, 3, config=configs)]).values():
        future.result(30)
    first = [b"a%06d:" % i + b"x" * 90 for i in range(1200)]
    _produce(cluster.bootstrap, first)
    leader = partitions_of(cluster.bootstrap, TOPIC)[0][0]
    wait_until(lambda: _local_start(cluster.brokers[leader]) > 500, 60, "the leader's first copies")

    cluster.brokers[leader].kill()
    new_leader = wait_until(
        lambda: (lead := partitions_of(cluster.bootstrap, TOPIC)[0][0]) not in (-1, leader) and lead,
        60,
        "a new leader",
    )
    assert isinstance(new_leader, int)
    second = [b"b%06d:" % i + b"y" * 90 for i in range(1200)]
    _produce(cluster.bootstrap, second)
    wait_until(lambda: _local_start(cluster.brokers[new_leader]) > 1800, 90, "the new leader's copies")

    got = make_client("confluent-kafka", cluster.bootstrap).consume(TOPIC, 0, 0, 2400, timeout_s=90)
    assert [r.offset for r in got] == list(range(2400))
    assert [r.value for r in got] == first + second
