"""A replaced broker rejoins a tiered partition without copying its history (KIP-405's follower path).

On a 3-broker cluster (ZooKeeper, SeaweedFS), a tiered topic is produced to until the leader keeps only
its local retention. One follower is stopped and its log dir wiped, more is produced, and it starts
again empty: the leader answers its fetch from offset 0 OFFSET_MOVED_TO_TIERED_STORAGE, the follower
asks the leader's local log start (ListOffsets -4), reads the leader-epoch checkpoint and producer
snapshot of the remote segment ending there, starts its log at that offset and catches up into the ISR
with only the local retention on its disk. Then the two other brokers are killed: the rejoined broker
leads and serves every record from offset 0 (remote, then local), byte for byte, none lost or repeated.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from typing import Any

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from strom.storage.checkpoint import parse_leader_epochs
from strom.testing import BrokerProcess
from strom.testing.seaweedfs_process import SeaweedS3Process
from tests.cluster.conftest import partitions_of, wait_until
from tests.integration.clients import make_client
from tests.object_stores import new_bucket, seaweedfs

__all__ = ["seaweedfs"]

TOPIC = "tiered-rejoin"
METADATA_TOPIC = "__remote_log_metadata"
SEGMENT_BYTES = 16384


def _produce(bootstrap: str, values: list[bytes]) -> None:
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "enable.idempotence": True,
            "linger.ms": 5,
            "batch.num.messages": 20,
        }
    )
    for value in values:
        producer.produce(TOPIC, value, partition=0)
    assert producer.flush(60) == 0


def _segments(broker: BrokerProcess) -> dict[int, int]:
    """base offset -> size of the partition's local segments on ``broker``'s disk."""
    directory = broker.data_dir / "logs" / f"{TOPIC}-0"
    return {int(p.name.split(".")[0]): p.stat().st_size for p in directory.glob("*.log")}


def _in_every_isr(bootstrap: str, broker_id: int) -> bool:
    views = [partitions_of(bootstrap, TOPIC), partitions_of(bootstrap, METADATA_TOPIC)]
    return all(broker_id in isr for view in views for _, _, isr in view.values())


def test_a_wiped_follower_rejoins_from_the_leaders_local_start(
    make_cluster: Callable[..., Any], seaweedfs: SeaweedS3Process
) -> None:
    settings = {
        "remote.log.storage.system.enable": "true",
        "remote.log.manager.task.interval.ms": "300",
        "log.retention.check.interval.ms": "300",
        "rlmm.config.remote.log.metadata.topic.num.partitions": "2",
        **seaweedfs.rsm_config(new_bucket(seaweedfs)),
    }
    cluster = make_cluster(3, **settings)
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    configs = {
        "remote.storage.enable": "true",
        "segment.bytes": str(SEGMENT_BYTES),
        "local.retention.bytes": str(SEGMENT_BYTES),
        "min.insync.replicas": "2",
    }
    for future in admin.create_topics([NewTopic(TOPIC, 1, 3, config=configs)]).values():
        future.result(30)
    first = [b"a%06d:" % i + b"x" * 90 for i in range(1200)]
    _produce(cluster.bootstrap, first)
    leader = partitions_of(cluster.bootstrap, TOPIC)[0][0]
    wait_until(lambda: min(_segments(cluster.brokers[leader])) > 500, 60, "the leader's local retention")

    wiped_id = next(i for i in cluster.brokers if i != leader)
    wiped = cluster.brokers[wiped_id]
    wiped.stop()
    shutil.rmtree(wiped.data_dir / "logs")
    wait_until(lambda: wiped_id not in partitions_of(cluster.bootstrap, TOPIC)[0][2], 60, "the ISR to shrink")
    second = [b"b%06d:" % i + b"y" * 90 for i in range(1200)]
    _produce(cluster.bootstrap, second)
    wait_until(lambda: min(_segments(cluster.brokers[leader])) > 1700, 60, "the leader's local retention")
    leader_start = min(_segments(cluster.brokers[leader]))

    wiped.start()
    wait_until(lambda: _in_every_isr(cluster.bootstrap, wiped_id), 90, "the wiped broker back in the ISR")
    assert min(_segments(wiped)) >= leader_start  # no history copied: it started at the leader's local start
    wait_until(  # then its own local retention: a few segments, not 2400 records
        lambda: sum(_segments(wiped).values()) <= 3 * SEGMENT_BYTES, 30, "the follower's local retention"
    )
    log_text = wiped.log_path.read_text()
    assert "starting the log at the leader's local log start" in log_text
    assert "from remote segment" in log_text  # its epochs and producer snapshot read from S3
    checkpoint = wiped.data_dir / "logs" / f"{TOPIC}-0" / "leader-epoch-checkpoint"
    epochs = parse_leader_epochs(checkpoint.read_text())
    assert epochs and epochs[0].start_offset >= leader_start

    for broker_id in [i for i in cluster.brokers if i != wiped_id]:
        cluster.brokers[broker_id].kill()
    wait_until(
        lambda: partitions_of(wiped.bootstrap, TOPIC)[0][0] == wiped_id, 60, "the wiped broker to lead"
    )
    got = make_client("confluent-kafka", wiped.bootstrap).consume(TOPIC, 0, 0, 2400, timeout_s=90)
    assert [r.offset for r in got] == list(range(2400))
    assert [r.value for r in got] == first + second
