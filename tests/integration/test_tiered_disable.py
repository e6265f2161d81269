"""Turning tiered storage off per KIP-950, on a real broker (the filesystem object store).

Kafka's rules: ``remote.storage.enable`` may go from true to false only with
``remote.log.delete.on.disable=true`` (the remote data is then deleted and the log starts at its local
start); keeping the remote data read-only is ``remote.log.copy.disable=true``, which requires the local
retention to equal the total retention (nothing more is copied). A topic is produced to until its first
segments exist only remotely; the refused changes are refused with INVALID_CONFIG, then the accepted one
deletes every remote object and ListOffsets' earliest answers the local log start.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic

from strom.objectstore.local import LocalObjectStore
from strom.testing import BrokerProcess
from tests.integration.rawclient import RawClient

TOPIC = "tiered-off"
RECORDS = 1200


@pytest.fixture
def tiered_topic(tmp_path: Path) -> Iterator[tuple[BrokerProcess, LocalObjectStore]]:
    overrides = {
        "remote.log.storage.system.enable": "true",
        "remote.log.manager.task.interval.ms": "200",
        "log.retention.check.interval.ms": "200",
        "rlmm.config.remote.log.metadata.topic.num.partitions": "2",
    }
    broker = BrokerProcess(tmp_path / "data", overrides)
    broker.start()
    store = LocalObjectStore(str(tmp_path / "data" / "logs" / "remote-storage"))
    try:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        configs = {
            "remote.storage.enable": "true",
            "segment.bytes": "16384",
            "local.retention.bytes": "16384",
        }
        for future in admin.create_topics([NewTopic(TOPIC, 1, 1, config=configs)]).values():
            future.result(30)
        producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5, "batch.num.messages": 20})
        for i in range(RECORDS):
            producer.produce(TOPIC, b"%06d:" % i + b"z" * 90, partition=0)
        assert producer.flush(30) == 0
        deadline = time.monotonic() + 60
        while _local_start(broker) < RECORDS // 2:
            assert time.monotonic() < deadline, f"local log still starts at {_local_start(broker)}"
            time.sleep(0.3)
        yield broker, store
    finally:
        broker.stop()
        asyncio.run(store.close())


def _local_start(broker: BrokerProcess) -> int:
    bases = [int(p.name.split(".")[0]) for p in (broker.data_dir / "logs" / f"{TOPIC}-0").glob("*.log")]
    return min(bases, default=0)


def _alter(bootstrap: str, configs: dict[str, str]) -> None:
    entries = [ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in configs.items()]
    resource = ConfigResource("TOPIC", TOPIC, incremental_configs=entries)
    admin = AdminClient({"bootstrap.servers": bootstrap})  # kept alive until the answer is in
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(30)


def test_tiering_is_turned_off_only_with_delete_on_disable(
    tiered_topic: tuple[BrokerProcess, LocalObjectStore],
) -> None:
    broker, store = tiered_topic
    assert asyncio.run(store.list(f"{TOPIC}-"))
    with pytest.raises(KafkaException, match="invalid to disable remote storage without deleting"):
        _alter(broker.bootstrap, {"remote.storage.enable": "false"})
    with pytest.raises(KafkaException, match=r"remote\.log\.copy\.disable"):
        _alter(broker.bootstrap, {"remote.log.copy.disable": "true"})  # local retention below retention
    raw = RawClient(broker.bootstrap)
    try:
        assert raw.list_offset(TOPIC, 0, -2)["offset"] == 0  # still tiered: the remote log's start

        _alter(broker.bootstrap, {"remote.storage.enable": "false", "remote.log.delete.on.disable": "true"})
        deadline = time.monotonic() + 30
        while asyncio.run(store.list(f"{TOPIC}-")):
            assert time.monotonic() < deadline, "remote objects still there after tiering was turned off"
            time.sleep(0.3)
        local_start = _local_start(broker)
        assert local_start >= RECORDS // 2
        assert raw.list_offset(TOPIC, 0, -2)["offset"] == local_start
        assert raw.list_offset(TOPIC, 0, -4, version=8)["offset"] == local_start
        assert raw.list_offset(TOPIC, 0, -1)["offset"] == RECORDS
    finally:
        raw.close()


def test_read_only_tiering_keeps_the_remote_log(tiered_topic: tuple[BrokerProcess, LocalObjectStore]) -> None:
    broker, store = tiered_topic
    _alter(broker.bootstrap, {"remote.log.copy.disable": "true", "local.retention.bytes": "-2"})
    time.sleep(1.0)  # several rounds of the remote log manager (200 ms)
    assert asyncio.run(store.list(f"{TOPIC}-"))
    raw = RawClient(broker.bootstrap)
    try:
        assert raw.list_offset(TOPIC, 0, -2)["offset"] == 0
    finally:
        raw.close()
