"""What the tiered-storage cluster tests share, besides the SeaweedFS server and the brokers' tiered
settings (tests/object_stores.py): a tiered topic, a producer that waits for every record, and the views
of a partition the tests assert on (local segments on a broker's disk, ISR membership).

A test module imports `seaweedfs` (the fixture) and lists it in ``__all__`` so pytest sees it."""

from __future__ import annotations

from collections.abc import Sequence

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from strom.testing import BrokerProcess
from tests.cluster.conftest import partitions_of
from tests.object_stores import seaweedfs, tiered_settings

__all__ = ["seaweedfs", "tiered_settings"]

METADATA_TOPIC = "__remote_log_metadata"


def create_tiered_topic(
    bootstrap: str,
    topic: str,
    partitions: int,
    segment_bytes: int,
    local_retention_bytes: int,
    replicas: list[int] | None = None,
    **more: str,
) -> None:
    """A topic with ``remote.storage.enable``, replication 3 (on ``replicas`` of each partition, the
    first leading, when given), ``min.insync.replicas`` 2 and the topic configs ``more`` (names with
    dots as underscores)."""
    configs = {
        "remote.storage.enable": "true",
        "segment.bytes": str(segment_bytes),
        "local.retention.bytes": str(local_retention_bytes),
        "min.insync.replicas": "2",
        **{name.replace("_", "."): value for name, value in more.items()},
    }
    admin = AdminClient({"bootstrap.servers": bootstrap})
    if replicas is None:
        new = NewTopic(topic, partitions, 3, config=configs)
    else:
        new = NewTopic(topic, partitions, replica_assignment=[replicas] * partitions, config=configs)
    for future in admin.create_topics([new]).values():
        future.result(30)


def produce(bootstrap: str, topic: str, values: Sequence[bytes], idempotent: bool = False) -> None:
    """``values`` to partition 0 (acks=all, small batches), every one acknowledged."""
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "enable.idempotence": idempotent,
            "linger.ms": 5,
            "batch.num.messages": 20,
        }
    )
    for value in values:
        producer.produce(topic, value, partition=0)
    assert producer.flush(60) == 0


def local_segments(broker: BrokerProcess, topic: str, partition: int = 0) -> dict[int, int]:
    """base offset -> size of the partition's local segments on ``broker``'s disk."""
    directory = broker.data_dir / "logs" / f"{topic}-{partition}"
    return {int(p.name.split(".")[0]): p.stat().st_size for p in directory.glob("*.log")}


def local_start(broker: BrokerProcess, topic: str, partition: int = 0) -> int:
    """The first offset of the partition's local log on ``broker``'s disk (0 without segments)."""
    return min(local_segments(broker, topic, partition), default=0)


def in_every_isr(bootstrap: str, topic: str, broker_id: int) -> bool:
    """Whether ``broker_id`` is in the ISR of every partition of ``topic`` and of the metadata topic."""
    views = [partitions_of(bootstrap, topic), partitions_of(bootstrap, METADATA_TOPIC)]
    return all(broker_id in isr for view in views for _, _, isr in view.values())
