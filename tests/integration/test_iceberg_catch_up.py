"""A partition whose backlog is larger than one translation round (32 MiB) catches up round after round
instead of one round per target lag: 40 MiB produced at once to one partition of a key_value topic
whose target lag is ten minutes is all in the table within two (before, the second round waited the
ten minutes, so a partition taking more than 32 MiB per target lag fell behind for ever)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from confluent_kafka import Producer

from strom.testing import BrokerProcess
from tests.integration.iceberg_readers import rows_or_none, sql_catalog_table
from tests.integration.test_iceberg_topics import create_topic, wait_until

TOPIC = "backlog"
RECORDS = 40 * 1024  # of 1 KiB, all to partition 0: 40 MiB, more than one round


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    proc = BrokerProcess(
        tmp_path_factory.mktemp("iceberg-catch-up") / "data", {"strom.iceberg.translation.interval.ms": "100"}
    )
    proc.start()
    try:
        yield proc
    finally:
        proc.stop()


def test_a_backlog_larger_than_a_round_is_translated_without_waiting_the_target_lag(
    broker: BrokerProcess,
) -> None:
    create_topic(broker, TOPIC, "key_value", {"strom.iceberg.target.lag.ms": "600000"})
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 20, "compression.type": "none"})
    value = bytes(1024)
    for n in range(RECORDS):
        while True:
            try:
                producer.produce(TOPIC, value, key=str(n).encode(), partition=0)
                break
            except BufferError:
                producer.poll(0.1)
        producer.poll(0)
    assert producer.flush(60) == 0

    def offsets() -> list[tuple[int, int]]:
        rows = rows_or_none(lambda: sql_catalog_table(str(broker.data_dir / "logs"), TOPIC), [])
        return [(partition, offset) for partition, offset in rows or []]  # sorted

    wait_until(lambda: len(offsets()) >= RECORDS, 120, "every record in the table")
    assert offsets() == [(0, offset) for offset in range(RECORDS)]
