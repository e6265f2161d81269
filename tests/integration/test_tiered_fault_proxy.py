"""Tiered storage with an unreliable object store: SeaweedFS behind a fault proxy (strom.testing.fault_proxy).

One broker reaches S3 only through the proxy. With a fraction of its connections reset, copying still
completes (botocore's retries, then the remote log manager's next round) and every record reads back
from offset 0, byte for byte. With the store stalled: produce and local reads go on, nothing is deleted
locally that is not remote, a read below the local log start gets no data (never wrong data) until the
store answers again, and copying then resumes.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from strom.testing import BrokerProcess
from strom.testing.fault_proxy import FaultProxy
from strom.testing.seaweedfs_process import SeaweedS3Process
from tests.integration.clients import make_client
from tests.integration.rawclient import RawClient
from tests.object_stores import new_bucket, seaweedfs

__all__ = ["seaweedfs"]

RECORDS = 1200


@pytest.fixture(scope="module")
def proxied(
    seaweedfs: SeaweedS3Process, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[BrokerProcess, FaultProxy]]:
    proxy = FaultProxy(("127.0.0.1", int(seaweedfs.endpoint_url.rsplit(":", 1)[1])), seed=21)
    overrides = {
        "remote.log.storage.system.enable": "true",
        "remote.log.manager.task.interval.ms": "200",
        "log.retention.check.interval.ms": "200",
        "remote.fetch.max.wait.ms": "500",
        "rlmm.config.remote.log.metadata.topic.num.partitions": "2",
        **seaweedfs.rsm_config(new_bucket(seaweedfs)),
        "rsm.config.storage.s3.endpoint.url": proxy.url,
        "rsm.config.storage.s3.api.call.attempt.timeout": "2000",
        "rsm.config.storage.s3.connect.timeout.ms": "2000",
    }
    broker = BrokerProcess(tmp_path_factory.mktemp("proxied") / "data", overrides)
    broker.start()
    try:
        yield broker, proxy
    finally:
        broker.stop()
        proxy.close()


def _values(topic: str) -> list[bytes]:
    return [b"%s-%06d:" % (topic.encode(), i) + b"q" * 90 for i in range(RECORDS)]


def _create_and_produce(broker: BrokerProcess, topic: str) -> list[bytes]:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    configs = {"remote.storage.enable": "true", "segment.bytes": "16384", "local.retention.bytes": "16384"}
    for future in admin.create_topics([NewTopic(topic, 1, 1, config=configs)]).values():
        future.result(30)
    values = _values(topic)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5, "batch.num.messages": 20})
    for value in values:
        producer.produce(topic, value, partition=0)
    assert producer.flush(30) == 0
    return values


def _bases(broker: BrokerProcess, topic: str) -> list[int]:
    return sorted(int(p.name.split(".")[0]) for p in (broker.data_dir / "logs" / f"{topic}-0").glob("*.log"))


def _all_copied(broker: BrokerProcess, topic: str, timeout_s: float) -> list[int]:
    """Wait until every rolled segment is remote and local retention has run; the local bases then."""
    raw = RawClient(broker.bootstrap)
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            bases = _bases(broker, topic)
            if raw.list_offset(topic, 0, -5, version=9)["offset"] == bases[-1] - 1 and len(bases) <= 3:
                return bases
            assert time.monotonic() < deadline, f"{topic}: local segments {bases}"
            time.sleep(0.3)
    finally:
        raw.close()


def test_a_fraction_of_failed_requests_delays_but_loses_nothing(
    proxied: tuple[BrokerProcess, FaultProxy],
) -> None:
    broker, proxy = proxied
    proxy.fail_fraction(0.3)
    try:
        values = _create_and_produce(broker, "flaky")
        bases = _all_copied(broker, "flaky", 120)
        assert bases[0] > 0
        got = make_client("confluent-kafka", broker.bootstrap).consume("flaky", 0, 0, RECORDS, timeout_s=90)
        assert proxy.failed > 0  # faults were injected, on copies and reads alike
    finally:
        proxy.fail_fraction(0.0)
    assert [r.offset for r in got] == list(range(RECORDS))
    assert [r.value for r in got] == values


def test_a_stalled_store_holds_local_data_and_remote_reads_until_it_answers(
    proxied: tuple[BrokerProcess, FaultProxy],
) -> None:
    broker, proxy = proxied
    before = _create_and_produce(broker, "before-stall")
    old_bases = _all_copied(broker, "before-stall", 60)
    with proxy.stalled():
        during = _create_and_produce(broker, "during-stall")  # produce goes on
        time.sleep(2.0)  # ten rounds of the remote log manager and of local retention
        assert _bases(broker, "during-stall")[0] == 0  # nothing copied, so nothing deleted locally
        local = make_client("confluent-kafka", broker.bootstrap).consume("during-stall", 0, 0, RECORDS, 60)
        assert [r.value for r in local] == during  # local reads go on
        # Below the local log start: no record until the store answers, and never a wrong one.
        consumer = Consumer(
            {"bootstrap.servers": broker.bootstrap, "group.id": "stalled", "enable.auto.commit": False}
        )
        consumer.assign([TopicPartition("before-stall", 0, 0)])
        deadline = time.monotonic() + 4
        while time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            assert msg is None or msg.error() is not None, "a remote read answered while the store stalled"
    try:
        # Reads cut short by remote.fetch.max.wait.ms answered empty, so the consumer is still at
        # offset 0 (an OFFSET_OUT_OF_RANGE would have reset it to the log end, past every record).
        first = None
        deadline = time.monotonic() + 60
        while first is None and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                first = msg.offset()
        assert first == 0, first
    finally:
        consumer.close()
    assert old_bases[0] > 0
    _all_copied(broker, "during-stall", 90)  # copying resumes
    got = make_client("confluent-kafka", broker.bootstrap).consume(
        "before-stall", 0, 0, RECORDS, timeout_s=60
    )
    assert [r.value for r in got] == before
