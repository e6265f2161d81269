"""`RemoteStorageManager` over both object-store backends: a real partition log's rolled segment is
uploaded with its indexes, producer snapshot and leader epochs, read back by ranges, then deleted;
and a partition's objects go with `delete_partition`."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from strom.objectstore.local import LocalObjectStore
from strom.objectstore.s3 import S3ObjectStore
from strom.objectstore.store import ObjectNotFoundError, ObjectStore
from strom.protocol.records.batch import iter_headers
from strom.protocol.records.builder import build_batch
from strom.storage.config import LogConfig
from strom.storage.log import PartitionLog
from strom.testing.seaweedfs_process import SeaweedS3Process
from strom.tiered.remote_storage import IndexType, RemoteStorageManager, object_key
from strom.tiered.segment_data import copy_started_metadata, log_segment_data
from tests.object_stores import new_bucket, s3_settings, seaweedfs

__all__ = ["seaweedfs"]

Scenario = Callable[[RemoteStorageManager, Path], Awaitable[None]]


@pytest.fixture(params=["local", "s3"])
def run_on_rsm(request: pytest.FixtureRequest, tmp_path: Path) -> Callable[[Scenario], None]:
    def run(scenario: Scenario) -> None:
        bucket = None
        if request.param == "s3":
            server: SeaweedS3Process = request.getfixturevalue("seaweedfs")
            bucket = new_bucket(server)

        async def main() -> None:
            store: ObjectStore
            if bucket is None:
                store = LocalObjectStore(str(tmp_path / "remote"))
            else:
                store = S3ObjectStore(s3_settings(server, bucket))
            try:
                await scenario(RemoteStorageManager(store), tmp_path)
            finally:
                await store.close()

        asyncio.run(main())

    return run


def filled_log(tmp_path: Path) -> PartitionLog:
    """Two leader epochs, idempotent batches (so the roll's producer snapshot has an entry), 3 segments."""
    log = PartitionLog(str(tmp_path / "orders-3"), LogConfig(segment_bytes=4000, index_interval_bytes=200))
    for i in range(60):
        batch = build_batch(
            [(b"k%d" % i, b"v" * 90, (), 1_000 + i)], producer_id=7, producer_epoch=0, base_sequence=i
        )
        log.append_as_leader(batch, leader_epoch=0 if i < 20 else 2)
    log.high_watermark = log.log_end_offset
    assert len(log.segments) >= 3
    return log


def test_a_rolled_segment_round_trips(run_on_rsm: Callable[[Scenario], None]) -> None:
    async def scenario(rsm: RemoteStorageManager, tmp: Path) -> None:
        log = filled_log(tmp)
        segment, following = log.segments[1], log.segments[2]
        md = copy_started_metadata(
            log,
            segment,
            following.base_offset,
            topic="orders",
            topic_id="tid",
            partition=3,
            broker_id=1,
            now_ms=5,
        )
        data = log_segment_data(log, segment, following.base_offset)
        assert data.producer_snapshot is not None and data.transaction_index is None
        await rsm.copy_log_segment_data(md, data)

        local = segment.read_bytes(0, segment.size)
        assert await rsm.fetch_log_segment(md, 0, segment.size + 100) == local
        first = next(iter_headers(local))[1]
        assert (
            await rsm.fetch_log_segment(md, first.size, 2 * first.size) == local[first.size : 2 * first.size]
        )
        assert await rsm.fetch_index(md, IndexType.OFFSET) == segment.offset_index.encoded()
        assert segment.offset_index.entries > 0
        assert await rsm.fetch_index(md, IndexType.TIMESTAMP) == segment.time_index.encoded()
        assert await rsm.fetch_index(md, IndexType.PRODUCER_SNAPSHOT) == data.producer_snapshot
        epochs = (await rsm.fetch_index(md, IndexType.LEADER_EPOCH)).decode().splitlines()
        assert epochs[0] == "0" and epochs[2:] == [f"{e} {o}" for e, o in md.segment_leader_epochs]
        assert md.start_offset == segment.base_offset and md.end_offset == following.base_offset - 1
        assert md.max_timestamp_ms == segment.largest_timestamp()

        await rsm.delete_log_segment_data(md)
        await rsm.delete_log_segment_data(md)  # idempotent: a retried deletion after a crash
        with pytest.raises(ObjectNotFoundError):
            await rsm.fetch_log_segment(md, 0, 10)

    run_on_rsm(scenario)


def test_delete_partition_removes_every_object_of_the_partition_only(
    run_on_rsm: Callable[[Scenario], None],
) -> None:
    async def scenario(rsm: RemoteStorageManager, tmp: Path) -> None:
        log = filled_log(tmp)
        copied = []
        for partition, segment, following in (
            (3, log.segments[0], log.segments[1]),
            (4, log.segments[1], log.segments[2]),
        ):
            md = copy_started_metadata(
                log,
                segment,
                following.base_offset,
                topic="orders",
                topic_id="tid",
                partition=partition,
                broker_id=1,
                now_ms=5,
            )
            await rsm.copy_log_segment_data(md, log_segment_data(log, segment, following.base_offset))
            copied.append(md)
        assert await rsm.delete_partition("orders", "tid", 3) == 5  # .log, 2 indexes, snapshot, epochs
        assert await rsm.delete_partition("orders", "tid", 3) == 0
        with pytest.raises(ObjectNotFoundError):
            await rsm.fetch_index(copied[0], IndexType.OFFSET)
        assert await rsm.fetch_index(copied[1], IndexType.OFFSET) == log.segments[1].offset_index.encoded()
        assert object_key(copied[1], ".log").startswith("orders-tid/4/")

    run_on_rsm(scenario)
