"""Tiered storage while the object store is down (SeaweedFS stopped by PID, then started again on the
same ports and data): produce and reads of the local log go on; a read below the local log start fails
with a retriable error (KAFKA_STORAGE_ERROR) and never returns wrong data; nothing is deleted locally
that is not remote (the local log grows instead); once the store is back, copying resumes and the whole
log reads back from offset 0, byte for byte."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from strom.protocol.errors import ErrorCode
from strom.testing import BrokerProcess
from strom.testing.seaweedfs_process import SeaweedS3Process
from tests.integration.clients import make_client
from tests.integration.rawclient import RawClient
from tests.object_stores import new_bucket, seaweedfs

__all__ = ["seaweedfs"]

TOPIC = "faults"


@pytest.fixture
def tiered(seaweedfs: SeaweedS3Process, tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    overrides = {
        "remote.log.storage.system.enable": "true",
        "remote.log.manager.task.interval.ms": "200",
        "log.retention.check.interval.ms": "200",
        "remote.fetch.max.wait.ms": "10000",
        "rlmm.config.remote.log.metadata.topic.num.partitions": "1",
        **seaweedfs.rsm_config(new_bucket(seaweedfs)),
        # One attempt per call, short timeouts: a stopped store fails fast.
        "rsm.config.storage.s3.retry.max.attempts": "1",
        "rsm.config.storage.s3.connect.timeout.ms": "1000",
        "rsm.config.storage.s3.api.call.attempt.timeout": "2000",
    }
    broker = BrokerProcess(tmp_path_factory.mktemp("faults") / "data", overrides)
    broker.start()
    try:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        configs = {
            "remote.storage.enable": "true",
            "segment.bytes": "16384",
            "local.retention.bytes": "16384",
        }
        for future in admin.create_topics([NewTopic(TOPIC, 1, 1, config=configs)]).values():
            future.result(30)
        yield broker
    finally:
        broker.stop()


def _produce(bootstrap: str, values: list[bytes]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "batch.num.messages": 20})
    for value in values:
        producer.produce(TOPIC, value, partition=0)
    assert producer.flush(30) == 0


def _local_bases(broker: BrokerProcess) -> list[int]:
    return sorted(int(p.name.split(".")[0]) for p in (broker.data_dir / "logs" / f"{TOPIC}-0").glob("*.log"))


def _wait(what: str, ready: Callable[[], bool], timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while not ready():
        assert time.monotonic() < deadline, what
        time.sleep(0.3)


def test_the_store_down_then_back(tiered: BrokerProcess, seaweedfs: SeaweedS3Process) -> None:
    first = [b"a%06d:" % i + b"x" * 90 for i in range(800)]
    _produce(tiered.bootstrap, first)
    _wait("the first segments copied and deleted locally", lambda: _local_bases(tiered)[0] > 300)

    seaweedfs.stop()
    try:
        second = [b"b%06d:" % i + b"y" * 90 for i in range(800)]
        _produce(tiered.bootstrap, second)  # produce goes on
        # Local retention may still delete what was copied before the store went down (the new records
        # push it out): let its rounds run, then read from where the local log starts.
        time.sleep(1.5)
        local_start = _local_bases(tiered)[0]
        got = make_client("confluent-kafka", tiered.bootstrap).consume(
            TOPIC, 0, local_start, 1600 - local_start
        )
        assert [r.value for r in got] == (first + second)[local_start:]  # and so do local reads
        with RawClient(tiered.bootstrap) as raw:
            answer = raw.fetch(TOPIC, 0, 0, timeout_s=30)
        assert answer["error_code"] == ErrorCode.KAFKA_STORAGE_ERROR
        assert not answer["records"]
        time.sleep(2)  # several copy rounds fail meanwhile
        # Segments copied before the store went down may leave the disk as the new records push them
        # out of local retention (they are remote); the rest must stay: the log grows locally, and
        # the read from offset 0 below, once the store is back, finds every record.
        assert len(_local_bases(tiered)) > 3
    finally:
        seaweedfs.start()

    _wait("copying resumed and local retention caught up", lambda: _local_bases(tiered)[0] > 1200)
    got = make_client("confluent-kafka", tiered.bootstrap).consume(TOPIC, 0, 0, 1600, timeout_s=60)
    assert [r.offset for r in got] == list(range(1600))
    assert [r.value for r in got] == first + second
