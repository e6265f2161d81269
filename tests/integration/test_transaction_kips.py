"""KIP-360 (producer epoch bumps) and KIP-447 (group metadata in TxnOffsetCommit, OffsetFetch
require_stable) with real clients against a real broker process.

The abortable error: a transactional record sent while the broker is paused (SIGSTOP) times out in
flight after ``message.timeout.ms``; librdkafka makes that an abortable error that needs an epoch bump
(the broker may have written the record), which it asks for with InitProducerId v3+ carrying its
producer id and epoch (before KIP-360 support it was fatal).
"""

from __future__ import annotations

import signal
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import KafkaException

from strom.protocol.api import ApiKey
from strom.protocol.errors import ErrorCode
from strom.testing import BrokerProcess

from .rawclient import RawClient
from .rdkafka_debug import ProtocolLog
from .test_transactions import BROKER_CONFIG, consume_all, create_topic, txn_producer


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    proc = BrokerProcess(tmp_path_factory.mktemp("txkips") / "data", BROKER_CONFIG)
    proc.start()
    try:
        yield proc
    finally:
        proc.stop()


def test_librdkafka_bumps_its_epoch_after_an_abortable_error(broker: BrokerProcess) -> None:
    good = create_topic(broker.bootstrap)
    tid = f"bump-{uuid.uuid4().hex[:6]}"
    log = ProtocolLog()
    producer = txn_producer(
        broker.bootstrap, tid, **{"message.timeout.ms": 1500, "debug": "protocol", "logger": log.logger()}
    )
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(good, b"aborted")
    producer.flush(10)  # the partition is in the transaction: the next record goes out at once
    broker.signal(signal.SIGSTOP)
    try:
        producer.produce(good, b"timed out")
        producer.flush(10)  # sent, never answered: it times out in flight after 1.5 s
    finally:
        broker.signal(signal.SIGCONT)
    with pytest.raises(KafkaException) as info:
        producer.commit_transaction(10)
    assert info.value.args[0].txn_requires_abort() and not info.value.args[0].fatal()
    producer.abort_transaction(30)  # EndTxn(abort), then InitProducerId with its id and epoch
    producer.begin_transaction()
    producer.produce(good, b"committed")
    producer.commit_transaction(30)
    sent = log.sent("InitProducerId")
    assert len(sent) == 2 and all("(v4," in line for line in sent), sent
    with RawClient(broker.bootstrap) as raw:
        (desc,) = raw.call(ApiKey.DESCRIBE_TRANSACTIONS, 0, {"transactional_ids": [tid]})[
            "transaction_states"
        ]
    assert (desc["producer_epoch"], desc["transaction_state"]) == (1, "CompleteCommit")
    assert consume_all(broker.bootstrap, good, "read_committed") == [b"committed"]


def _join_static(raw: RawClient, group: str, instance: str) -> tuple[str, int]:
    body = {
        "group_id": group,
        "session_timeout_ms": 10_000,
        "rebalance_timeout_ms": 10_000,
        "member_id": "",
        "group_instance_id": instance,
        "protocol_type": "consumer",
        "protocols": [{"name": "range", "metadata": b"\x00\x00\x00\x00\x00\x00"}],
    }
    joined = raw.call(ApiKey.JOIN_GROUP, 5, body)
    assert joined["error_code"] == 0, joined
    return str(joined["member_id"]), int(joined["generation_id"])


def _txn_offset_commit_v3(raw: RawClient, ids: dict[str, Any], topic: str, **metadata: Any) -> int:
    body = {
        **ids,
        "generation_id": -1,
        "member_id": "",
        "group_instance_id": None,
        **metadata,
        "topics": [
            {
                "name": topic,
                "partitions": [{"partition_index": 0, "committed_offset": 7, "committed_metadata": ""}],
            }
        ],
    }
    (t,) = raw.call(ApiKey.TXN_OFFSET_COMMIT, 3, body)["topics"]
    return int(t["partitions"][0]["error_code"])


def _offset_fetch(
    raw: RawClient, version: int, group: str, topic: str | None, stable: bool
) -> dict[Any, Any]:
    topics = None if topic is None else [{"name": topic, "partition_indexes": [0]}]
    body: dict[str, Any] = {"group_id": group, "topics": topics}
    if version >= 7:
        body["require_stable"] = stable
    resp = raw.call(ApiKey.OFFSET_FETCH, version, body)
    assert resp["error_code"] == 0
    return {
        (t["name"], p["partition_index"]): (p["error_code"], p["committed_offset"])
        for t in resp["topics"]
        for p in t["partitions"]
    }


def test_txn_offset_commit_v3_and_require_stable(broker: BrokerProcess) -> None:
    """TxnOffsetCommit v3 checks the group metadata (ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID,
    FENCED_INSTANCE_ID; none at all passes), and OffsetFetch v7 with require_stable answers
    UNSTABLE_OFFSET_COMMIT while the transaction's offsets await its marker (v6 and require_stable=false
    show the last committed offset)."""
    topic = create_topic(broker.bootstrap)
    tid, group = f"kip447-{uuid.uuid4().hex[:6]}", f"g447-{uuid.uuid4().hex[:6]}"
    with RawClient(broker.bootstrap) as raw:
        assert raw.call(ApiKey.FIND_COORDINATOR, 1, {"key": tid, "key_type": 1})["error_code"] == 0
        init = raw.call(
            ApiKey.INIT_PRODUCER_ID, 4, {"transactional_id": tid, "transaction_timeout_ms": 60_000}
        )
        ids = {"transactional_id": tid, "group_id": group, "producer_id": init["producer_id"]}
        ids["producer_epoch"] = init["producer_epoch"]
        assert raw.call(ApiKey.FIND_COORDINATOR, 1, {"key": group, "key_type": 0})["error_code"] == 0
        member, generation = _join_static(raw, group, "instance-1")
        add = {k: ids[k] for k in ("transactional_id", "group_id", "producer_id", "producer_epoch")}
        assert raw.call(ApiKey.ADD_OFFSETS_TO_TXN, 2, add)["error_code"] == 0
        current = {"generation_id": generation, "member_id": member, "group_instance_id": "instance-1"}
        checks = [
            ({**current, "generation_id": generation + 1}, ErrorCode.ILLEGAL_GENERATION),
            (
                {**current, "member_id": "someone-else", "group_instance_id": None},
                ErrorCode.UNKNOWN_MEMBER_ID,
            ),
            ({**current, "member_id": "an-older-incarnation"}, ErrorCode.FENCED_INSTANCE_ID),
            ({}, ErrorCode.NONE),  # no group metadata: unchecked, as below v3
            (current, ErrorCode.NONE),
        ]
        for metadata, expected in checks:
            assert _txn_offset_commit_v3(raw, ids, topic, **metadata) == expected, metadata
        tp = (topic, 0)
        assert _offset_fetch(raw, 7, group, topic, stable=True) == {
            tp: (ErrorCode.UNSTABLE_OFFSET_COMMIT, -1)
        }
        assert _offset_fetch(raw, 7, group, None, stable=True) == {}  # all topics: committed ones only
        assert _offset_fetch(raw, 7, group, topic, stable=False) == {tp: (0, -1)}
        assert _offset_fetch(raw, 6, group, topic, stable=True) == {tp: (0, -1)}
        end = {k: ids[k] for k in ("transactional_id", "producer_id", "producer_epoch")}
        assert raw.call(ApiKey.END_TXN, 2, {**end, "committed": True})["error_code"] == 0
        deadline = time.monotonic() + 10
        while _offset_fetch(raw, 7, group, topic, stable=True) != {tp: (0, 7)}:
            assert time.monotonic() < deadline, "the committed offset did not become stable"
            time.sleep(0.1)
        # A second transaction's pending offset makes the committed partition unstable in an all-topics
        # fetch too, until its abort drops it.
        assert raw.call(ApiKey.ADD_OFFSETS_TO_TXN, 2, add)["error_code"] == 0
        assert _txn_offset_commit_v3(raw, ids, topic, **current) == ErrorCode.NONE
        assert _offset_fetch(raw, 7, group, None, stable=True) == {tp: (ErrorCode.UNSTABLE_OFFSET_COMMIT, -1)}
        assert _offset_fetch(raw, 7, group, None, stable=False) == {tp: (0, 7)}
        assert raw.call(ApiKey.END_TXN, 2, {**end, "committed": False})["error_code"] == 0
        while _offset_fetch(raw, 7, group, None, stable=True) != {tp: (0, 7)}:
            assert time.monotonic() < deadline + 10, "the aborted offset still makes the partition unstable"
            time.sleep(0.1)


def test_librdkafka_group_metadata_and_stable_offsets(broker: BrokerProcess) -> None:
    """confluent-kafka negotiates TxnOffsetCommit v3 and OffsetFetch v9: a read_committed consumer's
    committed() waits while the transaction's offsets are pending (require_stable) and returns the
    committed one; the group metadata of a consumer that has left the group is refused
    (UNKNOWN_MEMBER_ID, abortable)."""
    import threading

    from confluent_kafka import Consumer, Producer, TopicPartition

    source, sink = create_topic(broker.bootstrap), create_topic(broker.bootstrap)
    feeder = Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(10):
        feeder.produce(source, f"in-{i}".encode())
    assert feeder.flush(10) == 0
    log = ProtocolLog()
    consumer = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": f"g-{uuid.uuid4().hex[:6]}",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "isolation.level": "read_committed",
            "debug": "protocol",
            "logger": log.logger(),
        }
    )
    consumer.subscribe([source])
    assert len(consumer.consume(5, timeout=15)) == 5
    producer = txn_producer(
        broker.bootstrap, f"k447-{uuid.uuid4().hex[:6]}", debug="protocol", logger=log.logger()
    )
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(sink, b"out")
    producer.send_offsets_to_transaction(
        [TopicPartition(source, 0, 5)], consumer.consumer_group_metadata(), 30
    )
    committer = threading.Timer(1.5, producer.commit_transaction, (30,))
    started = time.monotonic()
    committer.start()
    (committed,) = consumer.committed([TopicPartition(source, 0)], timeout=20)
    waited = time.monotonic() - started
    committer.join()
    assert committed.offset == 5 and waited >= 1.4  # not the earlier "nothing committed" (-1001)
    assert log.sent("TxnOffsetCommit") and all("(v3," in line for line in log.sent("TxnOffsetCommit"))
    # v9 carries require_stable as v7 does (with one group, no member for a classic consumer).
    assert log.sent("OffsetFetch") and all("(v9," in line for line in log.sent("OffsetFetch"))

    zombie_metadata = consumer.consumer_group_metadata()
    consumer.close()  # leaves the group: its member id is gone
    producer.begin_transaction()
    producer.produce(sink, b"zombie")
    with pytest.raises(KafkaException) as info:
        producer.send_offsets_to_transaction([TopicPartition(source, 0, 9)], zombie_metadata, 30)
    error = info.value.args[0]
    assert error.code() == ErrorCode.UNKNOWN_MEMBER_ID and error.txn_requires_abort() and not error.fatal()
    producer.abort_transaction(30)
    assert consume_all(broker.bootstrap, sink, "read_committed") == [b"out"]


def test_kafka_python_group_metadata(broker: BrokerProcess) -> None:
    """kafka-python sends its consumer's group metadata (TxnOffsetCommit v3): a live member's offsets
    commit with the transaction; after the consumer left the group the same metadata is refused."""
    import kafka.errors
    from kafka import KafkaConsumer, KafkaProducer
    from kafka.structs import OffsetAndMetadata
    from kafka.structs import TopicPartition as KpTopicPartition

    source, sink = create_topic(broker.bootstrap), create_topic(broker.bootstrap)
    group = f"kp447-{uuid.uuid4().hex[:6]}"
    consumer = KafkaConsumer(
        source, bootstrap_servers=broker.bootstrap, group_id=group, enable_auto_commit=False
    )
    producer = KafkaProducer(
        bootstrap_servers=broker.bootstrap, transactional_id=f"kp447-{uuid.uuid4().hex[:6]}"
    )
    try:
        deadline = time.monotonic() + 20
        while not consumer.assignment():
            assert time.monotonic() < deadline, "kafka-python's consumer did not join"
            consumer.poll(timeout_ms=200)
        metadata = consumer.group_metadata()
        assert metadata.generation_id >= 1 and metadata.member_id
        producer.init_transactions()
        producer.begin_transaction()
        producer.send(sink, b"out", partition=0)
        offsets = {KpTopicPartition(source, 0): OffsetAndMetadata(3, "", -1)}
        producer.send_offsets_to_transaction(offsets, metadata)
        producer.commit_transaction()
        with RawClient(broker.bootstrap) as raw:
            deadline = time.monotonic() + 10
            while _offset_fetch(raw, 7, group, source, stable=True) != {(source, 0): (0, 3)}:
                assert time.monotonic() < deadline, "the transaction's offset was not committed"
                time.sleep(0.1)
        consumer.close()
        producer.begin_transaction()
        producer.send(sink, b"zombie", partition=0)
        with pytest.raises(kafka.errors.CommitFailedError, match="UnknownMemberIdError"):
            producer.send_offsets_to_transaction(
                {KpTopicPartition(source, 0): OffsetAndMetadata(9, "", -1)}, metadata
            )
        producer.abort_transaction()
    finally:
        consumer.close()
        producer.close(timeout=10)
    assert consume_all(broker.bootstrap, sink, "read_committed") == [b"out"]
