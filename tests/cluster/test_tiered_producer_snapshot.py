"""An idempotent producer's dedup survives a follower rebuilt from remote storage, for segments copied
long after their roll (KAFKA-15195).

On a 3-broker cluster (ZooKeeper, SeaweedFS), a tiered topic starts with copying off
(``remote.log.copy.disable``). An idempotent producer (confluent-kafka) writes, then a plain one writes
many segments more, so the log's producer snapshots of the early segments are long deleted (it keeps
its two newest). Copying is then turned on with a small local retention: every segment is copied
late, and its producer snapshot must be regenerated. A follower is wiped and restarted: it rebuilds
from the remote segment ending at the leader's local log start (OFFSET_MOVED_TO_TIERED_STORAGE), whose
snapshot must carry the idempotent producer. Once it is the only broker left, a retry of that
producer's last batch (its exact bytes, as the client resends them) is answered with the original
offsets and not appended, and a sequence gap is refused: the producer state came from the snapshot.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from typing import Any

from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource

from strom.protocol.errors import ErrorCode
from strom.protocol.records.batch import iter_headers
from strom.protocol.records.builder import build_batch
from strom.testing.seaweedfs_process import SeaweedS3Process
from tests.cluster.conftest import partitions_of, wait_until
from tests.cluster.tiered import (
    create_tiered_topic,
    in_every_isr,
    local_start,
    produce,
    seaweedfs,
    tiered_settings,
)
from tests.integration.rawclient import RawClient, as_retry

__all__ = ["seaweedfs"]

TOPIC = "tiered-snapshot"
SEGMENT_BYTES = 16384
LATEST = -1


def _last_batch(bootstrap: str) -> bytes:
    """The partition's last batch, as stored (read from its leader)."""
    with RawClient(bootstrap) as raw:
        end = int(raw.list_offset(TOPIC, 0, LATEST)["offset"])
        records = raw.fetch(TOPIC, 0, end - 1)["records"]
    position, header = list(iter_headers(records))[-1]
    assert header.last_offset == end - 1
    return bytes(records[position : position + header.size])


def test_a_rebuilt_follower_keeps_an_idempotent_producers_dedup(
    make_cluster: Callable[..., Any], seaweedfs: SeaweedS3Process
) -> None:
    cluster = make_cluster(3, **tiered_settings(seaweedfs, metadata_partitions=2))
    create_tiered_topic(
        cluster.bootstrap,
        TOPIC,
        1,
        SEGMENT_BYTES,
        local_retention_bytes=-2,
        replicas=[0, 1, 2],
        remote_log_copy_disable="true",
    )
    produce(cluster.bootstrap, TOPIC, [b"p%06d:" % i + b"x" * 90 for i in range(300)], idempotent=True)
    leader = cluster.brokers[0]
    stored = _last_batch(leader.bootstrap)
    (_, header), *_ = iter_headers(stored)
    assert header.producer_id >= 0
    produce(cluster.bootstrap, TOPIC, [b"q%06d:" % i + b"y" * 90 for i in range(2400)])
    end = 2700

    copy_on = [
        ConfigEntry("remote.log.copy.disable", "false", incremental_operation=AlterConfigOpType.SET),
        ConfigEntry(
            "local.retention.bytes", str(4 * SEGMENT_BYTES), incremental_operation=AlterConfigOpType.SET
        ),
    ]
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    resource = ConfigResource("TOPIC", TOPIC, incremental_configs=copy_on)
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(30)
    wait_until(lambda: local_start(leader, TOPIC) > 1500, 90, "the leader's local retention")

    wiped_id = 1
    wiped = cluster.brokers[wiped_id]
    wiped.stop()
    shutil.rmtree(wiped.data_dir / "logs")
    wiped.start()
    wait_until(
        lambda: in_every_isr(cluster.bootstrap, TOPIC, wiped_id), 90, "the wiped broker back in the ISR"
    )
    assert local_start(wiped, TOPIC) > header.last_offset  # the producer's batches are remote only
    assert "a producer snapshot of 1" in wiped.log_path.read_text()

    for broker_id in (0, 2):
        cluster.brokers[broker_id].kill()
    wait_until(
        lambda: partitions_of(wiped.bootstrap, TOPIC)[0][0] == wiped_id, 60, "the wiped broker to lead"
    )
    with RawClient(wiped.bootstrap) as raw:
        resp = raw.produce(TOPIC, 0, as_retry(stored), acks=1)  # alone in the ISR: min.insync is 2
        assert (resp["error_code"], resp["base_offset"]) == (0, header.base_offset)
        assert raw.list_offset(TOPIC, 0, LATEST)["offset"] == end  # acknowledged, not appended
        gap = build_batch(
            [(None, b"gap", (), 0)],
            producer_id=header.producer_id,
            producer_epoch=header.producer_epoch,
            base_sequence=header.last_sequence + 2,
        )
        assert raw.produce(TOPIC, 0, gap, acks=1)["error_code"] == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
