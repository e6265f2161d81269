"""Transactions end to end (issue 13): real transactional producers and read_committed consumers.

confluent-kafka (librdkafka) commits and aborts; read_committed consumers see committed records only,
read_uncommitted ones see everything; ListOffsets read_committed answers the last stable offset; a
second producer with the same transactional.id fences the first; a transaction past its timeout is
aborted by the coordinator; a broker killed with SIGKILL in the middle of a transaction never shows it
half: after the restart the transaction is aborted (open) or completed (commit requested).
"""

from __future__ import annotations

import itertools
import time
import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, NewTopic

from strom.protocol.api import ApiKey
from strom.protocol.errors import ErrorCode
from strom.testing import BrokerProcess

from .rawclient import RawClient

_ids = itertools.count()
BROKER_CONFIG = {
    "transaction.state.log.num.partitions": "5",
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "500",
    "group.initial.rebalance.delay.ms": "0",
}


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    proc = BrokerProcess(tmp_path_factory.mktemp("txn") / "data", BROKER_CONFIG)
    proc.start()
    try:
        yield proc
    finally:
        proc.stop()


def create_topic(bootstrap: str, partitions: int = 1) -> str:
    name = f"txn-{next(_ids)}-{uuid.uuid4().hex[:6]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=1)])
    futures[name].result(10)
    return name


def txn_producer(bootstrap: str, txn_id: str, **extra: object) -> Producer:
    conf: dict[str, object] = {
        "bootstrap.servers": bootstrap,
        "transactional.id": txn_id,
        "linger.ms": 0,
    }
    conf.update(extra)
    return Producer(conf)


def consume_all(
    bootstrap: str, topic: str, isolation: str, partitions: int = 1, idle_s: float = 2.0
) -> list[bytes]:
    """Every value a consumer of ``isolation`` level sees, stopping after ``idle_s`` without records."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"g-{uuid.uuid4().hex[:8]}",
            "isolation.level": isolation,
            "enable.auto.commit": False,
        }
    )
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    out: list[bytes] = []
    deadline = time.monotonic() + idle_s
    try:
        while time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is None:
                continue
            if msg.error():
                if msg.error().code() == KafkaError._PARTITION_EOF:
                    continue
                raise KafkaException(msg.error())
            out.append(msg.value())
            deadline = time.monotonic() + idle_s
    finally:
        consumer.close()
    return out


def committed_end(bootstrap: str, topic: str, partition: int = 0) -> tuple[int, int]:
    """(read_committed latest offset, read_uncommitted latest offset) through ListOffsets v5."""
    with RawClient(bootstrap) as raw:
        ends = [raw.list_offset(topic, partition, -1, isolation_level=level) for level in (1, 0)]
    assert all(e["error_code"] == 0 for e in ends), ends
    return int(ends[0]["offset"]), int(ends[1]["offset"])


def test_commit_is_visible_and_abort_is_not(broker: BrokerProcess) -> None:
    topic = create_topic(broker.bootstrap)
    producer = txn_producer(broker.bootstrap, f"tx-{uuid.uuid4().hex[:6]}")
    producer.init_transactions(30)
    producer.begin_transaction()
    for i in range(5):
        producer.produce(topic, f"c1-{i}".encode())
    producer.commit_transaction(30)
    producer.begin_transaction()
    for i in range(3):
        producer.produce(topic, f"a-{i}".encode())
    producer.flush(10)  # on the broker before the abort (librdkafka purges what it still holds)
    producer.abort_transaction(30)
    producer.begin_transaction()
    producer.produce(topic, b"c2-0")
    producer.commit_transaction(30)

    committed = consume_all(broker.bootstrap, topic, "read_committed")
    assert committed == [b"c1-0", b"c1-1", b"c1-2", b"c1-3", b"c1-4", b"c2-0"]
    everything = consume_all(broker.bootstrap, topic, "read_uncommitted")
    assert everything == [*committed[:5], b"a-0", b"a-1", b"a-2", b"c2-0"]
    # 5 + 3 + 1 records and three markers: nothing is open, so the LSO is the high watermark.
    assert committed_end(broker.bootstrap, topic) == (12, 12)


def test_open_transaction_pins_the_last_stable_offset(broker: BrokerProcess) -> None:
    topic = create_topic(broker.bootstrap)
    plain = Producer({"bootstrap.servers": broker.bootstrap})
    plain.produce(topic, b"before")
    plain.flush(10)
    producer = txn_producer(broker.bootstrap, f"tx-{uuid.uuid4().hex[:6]}")
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(topic, b"open-0")
    producer.flush(10)
    plain.produce(topic, b"after")
    plain.flush(10)
    # The open transaction starts at offset 1: read_committed stops there.
    assert committed_end(broker.bootstrap, topic) == (1, 3)
    assert consume_all(broker.bootstrap, topic, "read_committed", idle_s=1.5) == [b"before"]
    producer.commit_transaction(30)
    assert consume_all(broker.bootstrap, topic, "read_committed") == [b"before", b"open-0", b"after"]
    assert committed_end(broker.bootstrap, topic) == (4, 4)


def test_second_producer_fences_the_first(broker: BrokerProcess) -> None:
    topic = create_topic(broker.bootstrap)
    txn_id = f"tx-{uuid.uuid4().hex[:6]}"
    first = txn_producer(broker.bootstrap, txn_id)
    first.init_transactions(30)
    first.begin_transaction()
    first.produce(topic, b"zombie")
    first.flush(10)
    second = txn_producer(broker.bootstrap, txn_id)
    second.init_transactions(30)  # aborts the first instance's open transaction
    second.begin_transaction()
    second.produce(topic, b"fresh")
    second.commit_transaction(30)
    with pytest.raises(KafkaException) as info:
        first.commit_transaction(10)
    assert info.value.args[0].fatal()
    assert consume_all(broker.bootstrap, topic, "read_committed") == [b"fresh"]
    assert consume_all(broker.bootstrap, topic, "read_uncommitted") == [b"zombie", b"fresh"]


def test_timed_out_transaction_is_aborted(broker: BrokerProcess) -> None:
    topic = create_topic(broker.bootstrap)
    producer = txn_producer(
        broker.bootstrap, f"tx-{uuid.uuid4().hex[:6]}", **{"transaction.timeout.ms": 2000}
    )
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(topic, b"abandoned")
    producer.flush(10)
    assert committed_end(broker.bootstrap, topic) == (0, 1)
    deadline = time.monotonic() + 15
    while committed_end(broker.bootstrap, topic) != (2, 2):  # the abort marker ends it
        assert time.monotonic() < deadline, "the coordinator did not abort the expired transaction"
        time.sleep(0.3)
    assert consume_all(broker.bootstrap, topic, "read_committed", idle_s=1.0) == []
    with pytest.raises(KafkaException):
        producer.commit_transaction(10)


def test_oversized_timeout_is_refused(broker: BrokerProcess) -> None:
    producer = txn_producer(
        broker.bootstrap,
        f"tx-{uuid.uuid4().hex[:6]}",
        **{"transaction.timeout.ms": 900_001, "message.timeout.ms": 300_000},
    )
    with pytest.raises(KafkaException) as info:
        producer.init_transactions(30)
    assert info.value.args[0].code() == KafkaError.INVALID_TRANSACTION_TIMEOUT


# -- the wire, version by version (raw requests; the conformance test requires every advertised version) --


def _raw_txn_setup(raw: RawClient, tid: str) -> tuple[int, int]:
    found = raw.call(ApiKey.FIND_COORDINATOR, 1, {"key": tid, "key_type": 1})
    assert found["error_code"] == 0, found
    resp = raw.call(ApiKey.INIT_PRODUCER_ID, 1, {"transactional_id": tid, "transaction_timeout_ms": 60_000})
    assert resp["error_code"] == 0, resp
    return int(resp["producer_id"]), int(resp["producer_epoch"])


def _add(raw: RawClient, version: int, tid: str, pid: int, epoch: int, topic: str) -> int:
    resp = raw.call(
        ApiKey.ADD_PARTITIONS_TO_TXN,
        version,
        {
            "v3_and_below_transactional_id": tid,
            "v3_and_below_producer_id": pid,
            "v3_and_below_producer_epoch": epoch,
            "v3_and_below_topics": [{"name": topic, "partitions": [0]}],
        },
    )
    (result,) = resp["results_by_topic_v3_and_below"]
    assert result["name"] == topic
    (part,) = result["results_by_partition"]
    assert part["partition_index"] == 0
    return int(part["partition_error_code"])


def _end(raw: RawClient, version: int, tid: str, pid: int, epoch: int, commit: bool) -> int:
    body = {"transactional_id": tid, "producer_id": pid, "producer_epoch": epoch, "committed": commit}
    return int(raw.call(ApiKey.END_TXN, version, body)["error_code"])


@pytest.mark.parametrize("version", [0, 1, 2])
def test_add_partitions_and_end_txn_versions(broker: BrokerProcess, version: int) -> None:
    """AddPartitionsToTxn and EndTxn at each advertised version, with Kafka's errors for requests out of
    order: unknown producer, stale epoch (INVALID_PRODUCER_EPOCH below v2, PRODUCER_FENCED from v2),
    EndTxn without a transaction, a retried EndTxn, an unknown topic."""
    topic = create_topic(broker.bootstrap)
    tid = f"raw-{version}-{uuid.uuid4().hex[:6]}"
    fenced = ErrorCode.PRODUCER_FENCED if version >= 2 else ErrorCode.INVALID_PRODUCER_EPOCH
    with RawClient(broker.bootstrap) as raw:
        pid, epoch = _raw_txn_setup(raw, tid)
        assert _add(raw, version, tid, pid + 1000, epoch, topic) == ErrorCode.INVALID_PRODUCER_ID_MAPPING
        assert _end(raw, version, tid, pid, epoch, True) == ErrorCode.INVALID_TXN_STATE
        assert _add(raw, version, tid, pid, epoch, topic) == ErrorCode.NONE
        assert _add(raw, version, tid, pid, epoch, topic) == ErrorCode.NONE  # already in: no change
        assert _add(raw, version, tid, pid, epoch - 1, topic) == fenced
        assert _add(raw, version, tid, pid, epoch, "no-such-topic") == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        assert _end(raw, version, tid, pid, epoch - 1, True) == fenced
        assert _end(raw, version, tid, pid, epoch, False) == ErrorCode.NONE
        assert _end(raw, version, tid, pid, epoch, False) == ErrorCode.NONE  # a retry of the finished abort
        assert _end(raw, version, tid, pid, epoch, True) == ErrorCode.INVALID_TXN_STATE
    # The abort marker was written: the partition holds exactly it, and nothing is unstable.
    assert committed_end(broker.bootstrap, topic) == (1, 1)
