"""The Spark source over a tiered topic (KIP-405; a real local SparkSession, a broker tiering to a real
SeaweedFS): a batch read of format ``strom`` from the earliest offsets gets every record of every
partition exactly once, byte for byte, though the first half of each partition exists only in the
object store (the source's consumers read it as one continuous log, read_committed by default).

The suite's short form; the acceptance run (tests/cluster/test_tiered_acceptance.py) reads its
3-broker topic the same way when ``STROM_TIERED_ACCEPTANCE_SPARK`` is set (``make tiered-acceptance``).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from strom.testing import BrokerProcess
from strom.testing.seaweedfs_process import SeaweedS3Process
from tests.integration.clients import Rec, make_client
from tests.object_stores import seaweedfs, tiered_settings

pytestmark = pytest.mark.spark

__all__ = ["seaweedfs"]

TOPIC = "tiered-spark"
PARTITIONS = 3
PER_PARTITION = 600


@pytest.fixture
def tiered_broker(seaweedfs: SeaweedS3Process, tmp_path: Path) -> Iterator[BrokerProcess]:
    broker = BrokerProcess(
        tmp_path / "data", tiered_settings(seaweedfs, metadata_partitions=2, interval_ms=200)
    )
    broker.start()
    try:
        yield broker
    finally:
        broker.stop()


def _local_start(broker: BrokerProcess, partition: int) -> int:
    logs = broker.data_dir / "logs" / f"{TOPIC}-{partition}"
    return min((int(p.name.split(".")[0]) for p in logs.glob("*.log")), default=0)


def spark_read_every_record(spark: Any, bootstrap: str, topic: str) -> dict[tuple[int, int], bytes]:
    """(partition, offset) -> value of a batch read of ``topic`` from its earliest offsets; asserts that
    no (partition, offset) comes twice."""
    df = (
        spark.read.format("strom")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .load()
    )
    rows = df.select("partition", "offset", "value").collect()
    got = {(int(r["partition"]), int(r["offset"])): bytes(r["value"]) for r in rows}
    assert len(got) == len(rows), "a record read twice"
    return got


def test_the_spark_source_reads_a_tiered_topic_once_from_the_remote_start(
    spark: Any, tiered_broker: BrokerProcess
) -> None:
    bootstrap = tiered_broker.bootstrap
    # Small batches: a batch larger than segment.bytes is refused.
    client = make_client("confluent-kafka", bootstrap, producer={"batch.num.messages": 20})
    client.create_topic(
        TOPIC,
        PARTITIONS,
        {"remote.storage.enable": "true", "segment.bytes": "16384", "local.retention.bytes": "16384"},
    )
    values = {
        (p, i): b"%d:%06d:" % (p, i) + b"s" * 90 for p in range(PARTITIONS) for i in range(PER_PARTITION)
    }
    client.produce(TOPIC, [Rec(None, v, (), p) for (p, _), v in sorted(values.items())])
    deadline = time.monotonic() + 60
    while min(_local_start(tiered_broker, p) for p in range(PARTITIONS)) <= PER_PARTITION // 2:
        assert time.monotonic() < deadline, "the local log start did not pass the middle"
        time.sleep(0.3)

    assert spark_read_every_record(spark, bootstrap, TOPIC) == values
