"""Tiered storage's copy path on a real broker, with the object store on each backend: the filesystem
default and S3 on a real SeaweedFS server.

A topic with ``remote.storage.enable`` and small segments is produced to with confluent-kafka. The
broker's remote log manager copies each rolled segment below the last stable offset; the test then
checks, from outside the broker, that ``__remote_log_metadata`` (read with a consumer) has each segment
COPY_SEGMENT_STARTED then COPY_SEGMENT_FINISHED, contiguous from offset 0; that the objects in the store
hold exactly the produced records (byte for byte, in order); and that local retention deleted local
segments only once they were remote (the local log start is at or below the highest remote offset + 1);
and that deleting the topic deletes its objects.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from strom.objectstore.local import LocalObjectStore
from strom.objectstore.s3 import S3ObjectStore
from strom.objectstore.store import ObjectStore
from strom.protocol.records.builder import decode_batches
from strom.testing import BrokerProcess
from strom.testing.seaweedfs_process import SeaweedS3Process
from tests.object_stores import new_bucket, s3_settings, seaweedfs

__all__ = ["seaweedfs"]

TOPIC = "tiered"
RECORDS = 1500


@pytest.fixture(params=["local", "s3"])
def tiered_broker(
    request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[tuple[BrokerProcess, ObjectStore]]:
    overrides = {
        "remote.log.storage.system.enable": "true",
        "remote.log.manager.task.interval.ms": "200",
        "log.retention.check.interval.ms": "200",
        "rlmm.config.remote.log.metadata.topic.num.partitions": "3",
    }
    store: ObjectStore
    if request.param == "s3":
        server: SeaweedS3Process = request.getfixturevalue("seaweedfs")
        bucket = new_bucket(server)
        overrides.update(server.rsm_config(bucket))
        store = S3ObjectStore(s3_settings(server, bucket))
    else:
        store = LocalObjectStore(str(tmp_path / "data" / "logs" / "remote-storage"))
    broker = BrokerProcess(tmp_path / "data", overrides)
    broker.start()
    try:
        yield broker, store
    finally:
        broker.stop()
        asyncio.run(store.close())


def _produce(bootstrap: str) -> list[bytes]:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    configs = {"remote.storage.enable": "true", "segment.bytes": "16384", "local.retention.bytes": "20000"}
    for future in admin.create_topics([NewTopic(TOPIC, 1, 1, config=configs)]).values():
        future.result(30)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "batch.num.messages": 20})
    values = [b"%06d:" % i + b"x" * 94 for i in range(RECORDS)]
    for value in values:
        producer.produce(TOPIC, value, partition=0)
    assert producer.flush(30) == 0
    return values


def _metadata_events(bootstrap: str) -> list[dict[str, Any]]:
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "rlmm-reader", "enable.auto.commit": False}
    )
    try:
        meta = consumer.list_topics("__remote_log_metadata", timeout=10).topics["__remote_log_metadata"]
        parts = [TopicPartition("__remote_log_metadata", p, 0) for p in meta.partitions]
        highs = {p.partition: consumer.get_watermark_offsets(p, timeout=10)[1] for p in parts}
        consumer.assign(parts)
        events: list[dict[str, Any]] = []
        done: set[int] = {p for p, high in highs.items() if high == 0}
        deadline = time.monotonic() + 20
        while len(done) < len(parts) and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None or msg.error():
                continue
            if msg.key() == f"{TOPIC}-0".encode():
                events.append(json.loads(msg.value()))
            if msg.offset() + 1 >= highs[msg.partition()]:
                done.add(msg.partition())
        return events
    finally:
        consumer.close()


def _local_segments(broker: BrokerProcess) -> list[int]:
    return sorted(int(p.name.split(".")[0]) for p in (broker.data_dir / "logs" / f"{TOPIC}-0").glob("*.log"))


def test_rolled_segments_are_copied_recorded_and_then_deleted_locally(
    tiered_broker: tuple[BrokerProcess, ObjectStore],
) -> None:
    broker, store = tiered_broker
    values = _produce(broker.bootstrap)
    deadline = time.monotonic() + 60
    while True:
        finished = [e for e in _metadata_events(broker.bootstrap) if e["state"] == "COPY_SEGMENT_FINISHED"]
        local = _local_segments(broker)
        highest = max((int(e["endOffset"]) for e in finished), default=-1)
        # Done once the copies reach the active segment and local retention has run.
        if local and highest + 1 >= local[-1] and len(local) <= 3:
            break
        assert time.monotonic() < deadline, f"copied up to {highest}, local segments {local}"
        time.sleep(0.5)

    events = _metadata_events(broker.bootstrap)
    by_segment: dict[str, list[str]] = {}
    for event in events:
        by_segment.setdefault(str(event["segmentId"]), []).append(str(event["state"]))
    # A copy interrupted by a failure (a file gone, the store down) is deleted by the next round: its
    # segment id never reaches COPY_SEGMENT_FINISHED.
    finished_ids = {str(e["segmentId"]) for e in finished}
    for segment_id, states in by_segment.items():
        if segment_id in finished_ids:
            assert states == ["COPY_SEGMENT_STARTED", "COPY_SEGMENT_FINISHED"], by_segment
        else:
            assert states == ["COPY_SEGMENT_STARTED", "DELETE_SEGMENT_STARTED", "DELETE_SEGMENT_FINISHED"], (
                by_segment
            )
    finished.sort(key=lambda e: int(e["startOffset"]))
    assert int(finished[0]["startOffset"]) == 0
    for before, after in itertools.pairwise(finished):
        assert int(after["startOffset"]) == int(before["endOffset"]) + 1
    assert local[0] <= highest + 1  # no hole between the remote and the local log

    async def remote_values() -> list[bytes]:
        out: list[bytes] = []
        for event in finished:
            keys = [i.key for i in await store.list(f"{TOPIC}-") if str(event["segmentId"]) in i.key]
            assert sorted(k.rsplit(".", 1)[-1] for k in keys) >= ["index", "leader-epoch-checkpoint", "log"]
            log_key = next(k for k in keys if k.endswith(".log"))
            for batch in decode_batches(await store.get(log_key)):
                out.extend(r.value or b"" for r in batch.records)
        return out

    copied = asyncio.run(remote_values())
    assert copied == values[: len(copied)]
    assert len(copied) == highest + 1

    # Deleting the topic deletes its remote objects.
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    for future in admin.delete_topics([TOPIC]).values():
        future.result(30)
    deadline = time.monotonic() + 30
    while asyncio.run(store.list(f"{TOPIC}-")):
        assert time.monotonic() < deadline, "remote objects of the deleted topic are still there"
        time.sleep(0.5)


def test_a_broker_without_tiered_storage_refuses_remote_storage_topics(broker: BrokerProcess) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    future = admin.create_topics([NewTopic("no-tiering", 1, 1, config={"remote.storage.enable": "true"})])
    with pytest.raises(KafkaException, match="Tiered Storage functionality is disabled"):
        future["no-tiering"].result(30)
