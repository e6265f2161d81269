"""Fetch from the closest replica (KIP-392) of a tiered topic: a follower serves a consumer the history
below its local log start from remote storage, as Kafka's followers do (3 brokers on racks R1..R3,
ZooKeeper, SeaweedFS, Kafka's RackAwareReplicaSelector).

The topic is led by broker 0 (R1) and produced to until every replica keeps only its local retention.
The leader sends a consumer in R2 fetching offset 0 to broker 1 (``preferred_read_replica``), broker 1
answers that fetch with the records at offset 0 read from the object store, and a confluent-kafka
consumer with ``client.rack`` R2 reads every record from offset 0, byte for byte, through broker 1,
whose remote-fetch meter counts its reads.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from confluent_kafka import Consumer, TopicPartition

from strom.broker.replication.replica_selector import RACK_AWARE_SELECTOR
from strom.protocol.records.builder import decode_batches
from strom.testing.metrics import scrape, value
from strom.testing.seaweedfs_process import SeaweedS3Process
from tests.cluster.conftest import partitions_of, wait_until
from tests.cluster.tiered import create_tiered_topic, local_start, produce, seaweedfs, tiered_settings
from tests.integration.rawclient import RawClient

__all__ = ["seaweedfs"]

TOPIC = "tiered-ff"
RECORDS = 1200
REMOTE_FETCHES = "kafka_server_brokertopicmetrics_remotefetchrequests_total"


def _read_in_rack(bootstrap: str, rack: str) -> list[tuple[int, bytes]]:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "tiered-ff",
            "enable.auto.commit": False,
            "client.rack": rack,
        }
    )
    consumer.assign([TopicPartition(TOPIC, 0, 0)])
    got: list[tuple[int, bytes]] = []
    deadline = time.monotonic() + 90
    try:
        while len(got) < RECORDS and time.monotonic() < deadline:
            got += [(m.offset(), m.value() or b"") for m in consumer.consume(500, 0.5) if not m.error()]
        return got
    finally:
        consumer.close()


def test_a_follower_serves_a_consumer_in_its_rack_from_remote_storage(
    make_cluster: Callable[..., Any], seaweedfs: SeaweedS3Process
) -> None:
    settings = {
        **tiered_settings(seaweedfs, metadata_partitions=2),
        "replica.selector.class": RACK_AWARE_SELECTOR,
    }
    cluster = make_cluster(3, racks=3, **settings)
    create_tiered_topic(cluster.bootstrap, TOPIC, 1, 16384, local_retention_bytes=16384, replicas=[0, 1, 2])
    wait_until(lambda: partitions_of(cluster.bootstrap, TOPIC)[0][2] == [0, 1, 2], 30, "the full ISR")
    values = [b"f%06d:" % i + b"z" * 90 for i in range(RECORDS)]
    produce(cluster.bootstrap, TOPIC, values)
    for broker in (0, 1):
        wait_until(
            lambda b=broker: local_start(cluster.brokers[b], TOPIC) > RECORDS // 2, 60, "local retention"
        )

    with RawClient(cluster.brokers[0].bootstrap) as leader:
        assert leader.fetch(TOPIC, 0, 0, rack_id="R2")["preferred_read_replica"] == 1
    with RawClient(cluster.brokers[1].bootstrap) as follower:
        answer = follower.fetch(TOPIC, 0, 0, rack_id="R2")
    assert answer["error_code"] == 0
    first = [r for b in decode_batches(answer["records"]) for r in b.records]
    assert first and first[0].offset == 0 and first[0].value == values[0]

    got = _read_in_rack(cluster.bootstrap, "R2")
    assert [offset for offset, _ in got] == list(range(RECORDS))
    assert [v for _, v in got] == values
    assert cluster.brokers[1].http_url is not None
    assert value(scrape(cluster.brokers[1].http_url), REMOTE_FETCHES, topic=TOPIC) >= 2
