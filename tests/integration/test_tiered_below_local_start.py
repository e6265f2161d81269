"""Below the local log start of a broker tiering to S3 (a real SeaweedFS): DeleteRecords across the tiers
(KIP-107 with KIP-405) and read_committed reads of tiered transactions.

DeleteRecords: a tiered topic is produced to until its first segments exist only in the object store.
DeleteRecords (confluent-kafka's admin client) at an offset inside the remote log moves the log start
there: the low watermark and ListOffsets earliest answer it, a fetch below it gets OFFSET_OUT_OF_RANGE,
a read from it gets every later record, the remote log manager deletes the remote segments wholly below
it (and only those), and the offset survives a restart. DeleteRecords past the local log start
(kafka-python's admin client) moves the local log start too, and the remote segments below it go.

read_committed: a transactional producer commits and aborts transactions until the first ones exist
only in the object store; a read_committed consumer from offset 0 gets exactly the committed records
(the aborted transactions come from the remote transaction indexes), a read_uncommitted one all of them.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from strom.testing import BrokerProcess
from strom.testing.seaweedfs_process import SeaweedS3Process
from tests.integration.clients import Rec, make_client
from tests.integration.rawclient import RawClient
from tests.object_stores import new_bucket, object_keys, seaweedfs, tiered_settings

__all__ = ["seaweedfs"]

TOPIC = "deletable"
TXN_TOPIC = "transactions"
RECORDS = 1200
TIERED_TOPIC = {"remote.storage.enable": "true", "segment.bytes": "16384", "local.retention.bytes": "16384"}
OFFSET_OUT_OF_RANGE = 1


@pytest.fixture
def tiered(seaweedfs: SeaweedS3Process, tmp_path: Path) -> Iterator[tuple[BrokerProcess, str]]:
    """A broker tiering to a bucket of its own, and the bucket."""
    bucket = new_bucket(seaweedfs)
    process = BrokerProcess(
        tmp_path / "data", tiered_settings(seaweedfs, metadata_partitions=2, interval_ms=200, bucket=bucket)
    )
    process.start()
    try:
        yield process, bucket
    finally:
        process.stop()


def _wait(condition: Callable[[], object], what: str, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def _local_start(broker: BrokerProcess, topic: str = TOPIC) -> int:
    bases = [int(p.name.split(".")[0]) for p in (broker.data_dir / "logs" / f"{topic}-0").glob("*.log")]
    return min(bases, default=0)


def _remote_starts(server: SeaweedS3Process, bucket: str) -> list[int]:
    """The start offsets of the partition's remote segments (their .log objects' keys)."""
    keys = object_keys(server, bucket, f"{TOPIC}-")
    return sorted(int(k.rsplit("/", 1)[1].split("-", 1)[0]) for k in keys if k.endswith(".log"))


def _earliest(bootstrap: str) -> int:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "earliest", "enable.auto.commit": False})
    try:
        return int(consumer.get_watermark_offsets(TopicPartition(TOPIC, 0), timeout=30)[0])
    finally:
        consumer.close()


def _fetch_error(bootstrap: str, offset: int) -> int:
    with RawClient(bootstrap) as raw:
        return int(raw.fetch(TOPIC, 0, offset)["error_code"])


def test_delete_records_moves_the_log_start_through_the_remote_log(
    tiered: tuple[BrokerProcess, str], seaweedfs: SeaweedS3Process
) -> None:
    broker, bucket = tiered
    # Small batches: a batch larger than segment.bytes is refused.
    confluent = make_client("confluent-kafka", broker.bootstrap, producer={"batch.num.messages": 20})
    confluent.create_topic(
        TOPIC,
        1,
        {"remote.storage.enable": "true", "segment.bytes": "16384", "local.retention.bytes": "16384"},
    )
    values = [b"%06d:" % i + bytes([65 + i % 26]) * 90 for i in range(RECORDS)]
    confluent.produce(TOPIC, [Rec(None, v) for v in values])
    _wait(lambda: _local_start(broker) > RECORDS // 2, "the local log start past the middle")
    starts = _remote_starts(seaweedfs, bucket)
    assert starts[0] == 0 and len(starts) >= 4
    inside = starts[2] + 5  # inside the third remote segment

    assert confluent.delete_records(TOPIC, 0, inside) == inside
    assert _earliest(broker.bootstrap) == inside
    assert _fetch_error(broker.bootstrap, inside - 1) == OFFSET_OUT_OF_RANGE
    got = confluent.consume(TOPIC, 0, inside, RECORDS - inside, timeout_s=60)
    assert [r.offset for r in got] == list(range(inside, RECORDS))
    assert [r.value for r in got] == values[inside:]
    # The segments wholly below the offset are deleted from the object store; the one holding it stays.
    _wait(lambda: _remote_starts(seaweedfs, bucket)[0] == starts[2], "the remote segments below it deleted")

    broker.stop()
    broker.start()
    _wait(lambda: _earliest(broker.bootstrap) == inside, "the log start after a restart", 30)

    local_start = _local_start(broker)
    past = local_start + 3
    assert make_client("kafka-python", broker.bootstrap).delete_records(TOPIC, 0, past) == past
    assert _earliest(broker.bootstrap) == past
    assert _fetch_error(broker.bootstrap, inside) == OFFSET_OUT_OF_RANGE
    _wait(
        lambda: all(s >= local_start for s in _remote_starts(seaweedfs, bucket)),
        "the remote segments below it",
    )
    got = confluent.consume(TOPIC, 0, past, RECORDS - past, timeout_s=60)
    assert [r.value for r in got] == values[past:]


def _read(bootstrap: str, isolation: str, count: int) -> list[bytes]:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"reader-{isolation}",
            "enable.auto.commit": False,
            "isolation.level": isolation,
        }
    )
    consumer.assign([TopicPartition(TXN_TOPIC, 0, 0)])
    got: list[bytes] = []
    deadline = time.monotonic() + 60
    try:
        while len(got) < count and time.monotonic() < deadline:
            for msg in consumer.consume(500, 0.5):
                assert msg.error() is None, msg.error()
                got.append(msg.value() or b"")
        return got
    finally:
        consumer.close()


def test_read_committed_below_the_local_start_skips_tiered_aborted_transactions(
    tiered: tuple[BrokerProcess, str],
) -> None:
    broker, _ = tiered
    make_client("confluent-kafka", broker.bootstrap).create_topic(TXN_TOPIC, 1, TIERED_TOPIC)
    producer = Producer(
        {"bootstrap.servers": broker.bootstrap, "transactional.id": "tiered-txn", "linger.ms": 5}
    )
    producer.init_transactions(30)
    produced: list[bytes] = []
    committed: list[bytes] = []
    for t in range(60):
        producer.begin_transaction()
        values = [b"t%03d-%02d:" % (t, i) + b"v" * 100 for i in range(20)]
        for value in values:
            producer.produce(TXN_TOPIC, value, partition=0)
        produced += values
        if t % 3 == 1:
            assert producer.flush(30) == 0  # written before the abort (abort_transaction drops unsent ones)
            producer.abort_transaction(30)
        else:
            producer.commit_transaction(30)
            committed += values
    # Every third transaction aborted, and the first half of the log only in the object store.
    _wait(lambda: _local_start(broker, TXN_TOPIC) > len(produced) // 2, "the local log start past the middle")

    assert _read(broker.bootstrap, "read_committed", len(committed)) == committed
    assert _read(broker.bootstrap, "read_uncommitted", len(produced)) == produced
