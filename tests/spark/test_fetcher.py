"""The executor-side RangeFetcher against a real broker (no Spark): bounds, columns, read-time data loss."""

from __future__ import annotations

import pytest
from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient

from strom.spark.fetcher import RangeFetcher
from strom.spark.planning import DataLossError, OffsetRange
from tests.spark.kafka_helpers import new_topic, produce

pytestmark = pytest.mark.spark


def fetch(
    bootstrap: str, r: OffsetRange, *, fail_on_data_loss: bool = True, headers: bool = False
) -> list[dict]:
    fetcher = RangeFetcher(
        {"bootstrap.servers": bootstrap},
        r,
        include_headers=headers,
        fail_on_data_loss=fail_on_data_loss,
        poll_timeout_ms=10_000,
    )
    return [row for batch in fetcher.batches() for row in batch.to_pylist()]


def test_reads_exactly_the_range_with_spark_columns(strom_broker: str) -> None:
    topic = new_topic(strom_broker, 1)
    produce(strom_broker, topic, [(f"k{i}".encode(), f"v{i}".encode()) for i in range(50)], headers=True)
    rows = fetch(strom_broker, OffsetRange(topic, 0, 7, 31), headers=True)
    assert [r["offset"] for r in rows] == list(range(7, 31))
    assert rows[0]["key"] == b"k7" and rows[0]["value"] == b"v7"
    assert {r["topic"] for r in rows} == {topic} and {r["partition"] for r in rows} == {0}
    assert {r["timestampType"] for r in rows} == {0}  # create time
    assert rows[0]["headers"] == [{"key": "i", "value": b"7"}, {"key": "empty", "value": None}]
    assert rows[1]["headers"] is None
    assert fetch(strom_broker, OffsetRange(topic, 0, 5, 5)) == []


def test_records_deleted_after_planning(strom_broker: str) -> None:
    topic = new_topic(strom_broker, 1)
    produce(strom_broker, topic, [(None, f"v{i}".encode()) for i in range(100)])
    admin = AdminClient({"bootstrap.servers": strom_broker})
    for future in admin.delete_records([TopicPartition(topic, 0, 60)]).values():
        future.result(timeout=30)
    with pytest.raises(DataLossError, match=r"Cannot fetch offset 10 of .*failOnDataLoss"):
        fetch(strom_broker, OffsetRange(topic, 0, 10, 100))
    rows = fetch(strom_broker, OffsetRange(topic, 0, 10, 100), fail_on_data_loss=False)
    assert [r["offset"] for r in rows] == list(range(60, 100))
    assert fetch(strom_broker, OffsetRange(topic, 0, 10, 50), fail_on_data_loss=False) == []
