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

from strom.storage.checkpoint import parse_leader_epochs
from strom.testing.seaweedfs_process import SeaweedS3Process
from tests.cluster.conftest import partitions_of, wait_until
from tests.cluster.tiered import (
    create_tiered_topic,
    in_every_isr,
    local_segments,
    local_start,
    produce,
    seaweedfs,
    tiered_settings,
)
from tests.integration.clients import make_client

__all__ = ["seaweedfs"]

TOPIC = "tiered-rejoin"
SEGMENT_BYTES = 16384


def test_a_wiped_follower_rejoins_from_the_leaders_local_start(
    make_cluster: Callable[..., Any], seaweedfs: SeaweedS3Process
) -> None:
    cluster = make_cluster(3, **tiered_settings(seaweedfs, metadata_partitions=2))
    create_tiered_topic(cluster.bootstrap, TOPIC, 1, SEGMENT_BYTES, local_retention_bytes=SEGMENT_BYTES)
    first = [b"a%06d:" % i + b"x" * 90 for i in range(1200)]
    produce(cluster.bootstrap, TOPIC, first, idempotent=True)
    leader = partitions_of(cluster.bootstrap, TOPIC)[0][0]
    wait_until(lambda: local_start(cluster.brokers[leader], TOPIC) > 500, 60, "the leader's local retention")

    wiped_id = next(i for i in cluster.brokers if i != leader)
    wiped = cluster.brokers[wiped_id]
    wiped.stop()
    shutil.rmtree(wiped.data_dir / "logs")
    wait_until(lambda: wiped_id not in partitions_of(cluster.bootstrap, TOPIC)[0][2], 60, "the ISR to shrink")
    second = [b"b%06d:" % i + b"y" * 90 for i in range(1200)]
    produce(cluster.bootstrap, TOPIC, second, idempotent=True)
    wait_until(lambda: local_start(cluster.brokers[leader], TOPIC) > 1700, 60, "the leader's local retention")
    leader_start = local_start(cluster.brokers[leader], TOPIC)

    wiped.start()
    wait_until(
        lambda: in_every_isr(cluster.bootstrap, TOPIC, wiped_id), 90, "the wiped broker back in the ISR"
    )
    assert (
        local_start(wiped, TOPIC) >= leader_start
    )  # no history copied: it started at the leader's local start
    wait_until(  # then its own local retention: a few segments, not 2400 records
        lambda: sum(local_segments(wiped, TOPIC).values()) <= 3 * SEGMENT_BYTES,
        30,
        "the follower's local retention",
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
