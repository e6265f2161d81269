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
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import (
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, NewTopic

from strom.protocol.api import ApiKey
from strom.protocol.errors import ErrorCode
from strom.protocol.records.builder import build_batch
from strom.testing import BrokerProcess

from .eos import CtpApp, assert_exactly_once, consume_all, feed_inputs
from .rawclient import RawClient, produce_body

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
    assert consume_all(broker.bootstrap, topic, "read_committed", idle_s=5.0) == [b"before"]
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


@pytest.mark.parametrize("version", [0, 1, 2, 3, 4])
def test_add_partitions_and_end_txn_versions(broker: BrokerProcess, version: int) -> None:
    """AddPartitionsToTxn (a client's, v0-3) and EndTxn at each advertised version, with Kafka's errors
    for requests out of order: unknown producer, stale epoch (INVALID_PRODUCER_EPOCH below v2,
    PRODUCER_FENCED from v2), EndTxn without a transaction, a retried EndTxn, an unknown topic.
    AddPartitionsToTxn v4+ is the brokers' batch: test_add_partitions_broker_batch_versions."""
    topic = create_topic(broker.bootstrap)
    tid = f"raw-{version}-{uuid.uuid4().hex[:6]}"
    fenced = ErrorCode.PRODUCER_FENCED if version >= 2 else ErrorCode.INVALID_PRODUCER_EPOCH
    add_v = min(version, 3)
    with RawClient(broker.bootstrap) as raw:
        pid, epoch = _raw_txn_setup(raw, tid)
        assert _add(raw, add_v, tid, pid + 1000, epoch, topic) == ErrorCode.INVALID_PRODUCER_ID_MAPPING
        assert _end(raw, version, tid, pid, epoch, True) == ErrorCode.INVALID_TXN_STATE
        assert _add(raw, add_v, tid, pid, epoch, topic) == ErrorCode.NONE
        assert _add(raw, add_v, tid, pid, epoch, topic) == ErrorCode.NONE  # already in: no change
        assert _add(raw, add_v, tid, pid, epoch - 1, topic) == fenced
        assert _add(raw, add_v, tid, pid, epoch, "no-such-topic") == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        assert _end(raw, version, tid, pid, epoch - 1, True) == fenced
        assert _end(raw, version, tid, pid, epoch, False) == ErrorCode.NONE
        assert _end(raw, version, tid, pid, epoch, False) == ErrorCode.NONE  # a retry of the finished abort
        assert _end(raw, version, tid, pid, epoch, True) == ErrorCode.INVALID_TXN_STATE
    # The abort marker was written: the partition holds exactly it, and nothing is unstable.
    assert committed_end(broker.bootstrap, topic) == (1, 1)


def _batch_add(raw: RawClient, version: int, transactions: list[dict[str, Any]]) -> dict[str, Any]:
    """AddPartitionsToTxn v4+: {transactional id: {(topic, partition): code}} (the top-level code too)."""
    resp = raw.call(ApiKey.ADD_PARTITIONS_TO_TXN, version, {"transactions": transactions})
    out: dict[str, Any] = {"": resp["error_code"]}
    for result in resp["results_by_transaction"]:
        out[result["transactional_id"]] = {
            (t["name"], p["partition_index"]): p["partition_error_code"]
            for t in result["topic_results"]
            for p in t["results_by_partition"]
        }
    return out


@pytest.mark.parametrize("version", [4, 5])
def test_add_partitions_broker_batch_versions(broker: BrokerProcess, version: int) -> None:
    """AddPartitionsToTxn v4+, the partition leaders' batch of KIP-890: several transactions per request,
    each added (verify_only false) or checked (verify_only true: NONE for a partition of the ongoing
    transaction, INVALID_TXN_STATE for another, nothing written); unknown or stale producers get the
    coordinator's errors; unknown topics fail their transaction's set; once the transaction ended, no
    partition is in it."""
    topic = create_topic(broker.bootstrap, partitions=2)
    tid_a, tid_b = (f"batch-{version}-{n}-{uuid.uuid4().hex[:6]}" for n in "ab")

    def txn(
        tid: str, pid: int, epoch: int, verify_only: bool, *parts: int, name: str = topic
    ) -> dict[str, Any]:
        return {
            "transactional_id": tid,
            "producer_id": pid,
            "producer_epoch": epoch,
            "verify_only": verify_only,
            "topics": [{"name": name, "partitions": list(parts)}],
        }

    with RawClient(broker.bootstrap) as raw:
        pid_a, epoch_a = _raw_txn_setup(raw, tid_a)
        pid_b, epoch_b = _raw_txn_setup(raw, tid_b)
        added = _batch_add(
            raw, version, [txn(tid_a, pid_a, epoch_a, False, 0), txn(tid_b, pid_b, epoch_b, False, 1)]
        )
        assert added == {"": 0, tid_a: {(topic, 0): 0}, tid_b: {(topic, 1): 0}}
        checked = _batch_add(
            raw,
            version,
            [
                txn(tid_a, pid_a, epoch_a, True, 0, 1),
                txn(tid_b, pid_b, epoch_b - 1, True, 1),
                txn(f"unknown-{uuid.uuid4().hex[:6]}", 1, 0, True, 0),
            ],
        )
        unknown_tid = next(t for t in checked if t.startswith("unknown-"))
        assert checked == {
            "": 0,
            tid_a: {(topic, 0): ErrorCode.NONE, (topic, 1): ErrorCode.INVALID_TXN_STATE},
            tid_b: {(topic, 1): ErrorCode.PRODUCER_FENCED},
            unknown_tid: {(topic, 0): ErrorCode.INVALID_PRODUCER_ID_MAPPING},
        }
        missing = _batch_add(raw, version, [txn(tid_a, pid_a, epoch_a, True, 0, name="no-such-topic")])
        assert missing[tid_a] == {("no-such-topic", 0): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}
        # verify_only wrote nothing: the transaction still holds partition 0 alone
        assert _batch_add(raw, version, [txn(tid_a, pid_a, epoch_a, True, 1)])[tid_a] == {
            (topic, 1): ErrorCode.INVALID_TXN_STATE
        }
        assert _end(raw, 3, tid_a, pid_a, epoch_a, False) == ErrorCode.NONE
        assert _end(raw, 3, tid_b, pid_b, epoch_b, False) == ErrorCode.NONE
        deadline = time.monotonic() + 10
        while True:  # the abort completes after the answer: Prepare* first (CONCURRENT_TRANSACTIONS)
            after = _batch_add(raw, version, [txn(tid_a, pid_a, epoch_a, True, 0)])[tid_a][(topic, 0)]
            if after != ErrorCode.CONCURRENT_TRANSACTIONS or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        assert after == ErrorCode.INVALID_TXN_STATE


def _txn_offset_commit(
    raw: RawClient, version: int, tid: str, group: str, pid: int, epoch: int, topic: str
) -> int:
    body = {
        "transactional_id": tid,
        "group_id": group,
        "producer_id": pid,
        "producer_epoch": epoch,
        "topics": [
            {
                "name": topic,
                "partitions": [{"partition_index": 0, "committed_offset": 7, "committed_metadata": "m"}],
            }
        ],
    }
    (t,) = raw.call(ApiKey.TXN_OFFSET_COMMIT, version, body)["topics"]
    (p,) = t["partitions"]
    return int(p["error_code"])


def _group_offset(raw: RawClient, group: str, topic: str) -> int:
    body = {"group_id": group, "topics": [{"name": topic, "partition_indexes": [0]}]}
    (t,) = raw.call(ApiKey.OFFSET_FETCH, 3, body)["topics"]
    return int(t["partitions"][0]["committed_offset"])


@pytest.mark.parametrize("version", [0, 1, 2, 3, 4])
def test_add_offsets_and_txn_offset_commit_versions(broker: BrokerProcess, version: int) -> None:
    """AddOffsetsToTxn and TxnOffsetCommit at each advertised version: offsets stay invisible until the
    transaction commits, an aborted transaction's offsets are dropped, a stale epoch is refused."""
    topic = create_topic(broker.bootstrap)
    tid, group = f"rawo-{version}-{uuid.uuid4().hex[:6]}", f"g-{uuid.uuid4().hex[:6]}"
    fenced = ErrorCode.PRODUCER_FENCED if version >= 2 else ErrorCode.INVALID_PRODUCER_EPOCH
    add_body = {"transactional_id": tid, "group_id": group}
    with RawClient(broker.bootstrap) as raw:
        pid, epoch = _raw_txn_setup(raw, tid)
        assert raw.call(ApiKey.FIND_COORDINATOR, 1, {"key": group, "key_type": 0})["error_code"] == 0
        ids = {"producer_id": pid, "producer_epoch": epoch}
        stale = {"producer_id": pid, "producer_epoch": epoch - 1}
        assert raw.call(ApiKey.ADD_OFFSETS_TO_TXN, version, {**add_body, **stale})["error_code"] == fenced
        assert raw.call(ApiKey.ADD_OFFSETS_TO_TXN, version, {**add_body, **ids})["error_code"] == 0
        assert _txn_offset_commit(raw, version, tid, group, pid, epoch, topic) == 0
        assert _group_offset(raw, group, topic) == -1  # pending until the commit
        assert _end(raw, version, tid, pid, epoch, False) == 0
        time.sleep(0.5)  # the markers follow the answer
        assert _group_offset(raw, group, topic) == -1  # aborted: dropped
        assert raw.call(ApiKey.ADD_OFFSETS_TO_TXN, version, {**add_body, **ids})["error_code"] == 0
        assert _txn_offset_commit(raw, version, tid, group, pid, epoch, topic) == 0
        assert _end(raw, version, tid, pid, epoch, True) == 0
        deadline = time.monotonic() + 10
        while _group_offset(raw, group, topic) != 7:
            assert time.monotonic() < deadline
            time.sleep(0.1)
        assert (
            _txn_offset_commit(raw, version, tid, group, pid, epoch - 1, topic)
            == ErrorCode.INVALID_PRODUCER_EPOCH
        )


def test_consume_transform_produce(broker: BrokerProcess) -> None:
    """confluent-kafka's exactly-once loop: outputs and input offsets commit together; an aborted
    round leaves neither, and the retried round then commits both."""
    source, sink = create_topic(broker.bootstrap), create_topic(broker.bootstrap)
    plain = Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(10):
        plain.produce(source, f"in-{i}".encode())
    plain.flush(10)
    group = f"ctp-{uuid.uuid4().hex[:6]}"
    consumer = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": group,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "isolation.level": "read_committed",
        }
    )
    consumer.subscribe([source])
    producer = txn_producer(broker.bootstrap, f"ctp-{uuid.uuid4().hex[:6]}")
    producer.init_transactions(30)

    def one_round(abort: bool) -> None:
        msgs = consumer.consume(5, timeout=15)
        assert len(msgs) == 5 and not any(m.error() for m in msgs)
        producer.begin_transaction()
        for m in msgs:
            producer.produce(sink, m.value().replace(b"in", b"out"))
        positions = consumer.position(consumer.assignment())
        producer.send_offsets_to_transaction(positions, consumer.consumer_group_metadata(), 30)
        if abort:
            producer.flush(10)
            producer.abort_transaction(30)
            # Rewind to what the group has committed, as an application does after an abort.
            for tp in consumer.committed(consumer.assignment(), timeout=10):
                consumer.seek(TopicPartition(tp.topic, tp.partition, max(tp.offset, 0)))
        else:
            producer.commit_transaction(30)

    def committed_offset() -> int:
        (tp,) = consumer.committed([TopicPartition(source, 0)], timeout=10)
        return int(tp.offset)

    one_round(abort=False)
    assert committed_offset() == 5
    one_round(abort=True)
    assert committed_offset() == 5
    one_round(abort=False)  # the same five inputs again
    assert committed_offset() == 10
    consumer.close()
    out = consume_all(broker.bootstrap, sink, "read_committed")
    assert out == [f"out-{i}".encode() for i in range(10)]
    assert len(consume_all(broker.bootstrap, sink, "read_uncommitted")) == 15  # the aborted five too


def test_kafka_python_transactions(broker: BrokerProcess) -> None:
    """kafka-python's transactional producer commits and aborts, with group offsets in the transaction;
    its read_committed consumer sees the committed records only, read_uncommitted sees all."""
    from kafka import KafkaConsumer, KafkaProducer
    from kafka.structs import OffsetAndMetadata
    from kafka.structs import TopicPartition as KpTopicPartition

    topic = create_topic(broker.bootstrap)
    group = f"kp-g-{uuid.uuid4().hex[:6]}"
    producer = KafkaProducer(
        bootstrap_servers=broker.bootstrap, transactional_id=f"kp-{uuid.uuid4().hex[:6]}"
    )
    try:
        producer.init_transactions()
        producer.begin_transaction()
        for i in range(3):
            producer.send(topic, f"kp-c-{i}".encode(), partition=0)
        producer.send_offsets_to_transaction(
            {KpTopicPartition(topic, 0): OffsetAndMetadata(3, "", -1)}, group
        )
        producer.commit_transaction()
        producer.begin_transaction()
        producer.send(topic, b"kp-a-0", partition=0)
        producer.send_offsets_to_transaction(
            {KpTopicPartition(topic, 0): OffsetAndMetadata(4, "", -1)}, group
        )
        producer.flush()
        producer.abort_transaction()
    finally:
        producer.close(timeout=10)

    def read(level: str) -> list[bytes]:
        consumer = KafkaConsumer(
            topic,
            bootstrap_servers=broker.bootstrap,
            auto_offset_reset="earliest",
            isolation_level=level,
            consumer_timeout_ms=3000,
        )
        try:
            return [m.value for m in consumer]
        finally:
            consumer.close()

    with RawClient(broker.bootstrap) as raw:
        assert _group_offset(raw, group, topic) == 3  # the aborted transaction's offset is dropped
    assert read("read_committed") == [b"kp-c-0", b"kp-c-1", b"kp-c-2"]
    assert read("read_uncommitted") == [b"kp-c-0", b"kp-c-1", b"kp-c-2", b"kp-a-0"]
    assert consume_all(broker.bootstrap, topic, "read_committed") == [b"kp-c-0", b"kp-c-1", b"kp-c-2"]


def test_aiokafka_transactions(broker: BrokerProcess) -> None:
    """aiokafka's transactional producer (InitProducerId v0, the v0 transaction APIs) commits and
    aborts, with group offsets in the transaction; its read_committed consumer sees the committed
    records only."""
    import asyncio

    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka.structs import TopicPartition as AiTopicPartition

    topic = create_topic(broker.bootstrap)
    group = f"ai-g-{uuid.uuid4().hex[:6]}"

    async def run() -> tuple[list[bytes], list[bytes]]:
        producer = AIOKafkaProducer(
            bootstrap_servers=broker.bootstrap, transactional_id=f"ai-{uuid.uuid4().hex[:6]}"
        )
        await producer.start()
        try:
            async with producer.transaction():
                for i in range(3):
                    await producer.send_and_wait(topic, f"ai-c-{i}".encode(), partition=0)
                await producer.send_offsets_to_transaction({AiTopicPartition(topic, 0): 3}, group)
            await producer.begin_transaction()
            await producer.send_and_wait(topic, b"ai-a-0", partition=0)
            await producer.send_offsets_to_transaction({AiTopicPartition(topic, 0): 4}, group)
            await producer.abort_transaction()
        finally:
            await producer.stop()
        seen = []
        for level in ("read_committed", "read_uncommitted"):
            consumer = AIOKafkaConsumer(
                topic, bootstrap_servers=broker.bootstrap, auto_offset_reset="earliest", isolation_level=level
            )
            await consumer.start()
            try:
                got: list[bytes] = []
                while True:
                    batch = await consumer.getmany(timeout_ms=2000)
                    if not batch:
                        break
                    got += [m.value for msgs in batch.values() for m in msgs if m.value is not None]
                seen.append(got)
            finally:
                await consumer.stop()
        return seen[0], seen[1]

    committed, everything = asyncio.run(run())
    assert committed == [b"ai-c-0", b"ai-c-1", b"ai-c-2"]
    assert everything == [*committed, b"ai-a-0"]
    with RawClient(broker.bootstrap) as raw:
        assert _group_offset(raw, group, topic) == 3  # the aborted transaction's offset is dropped


def test_restart_mid_transaction_never_shows_it_half(strom_broker_factory: Any) -> None:
    """kill -9 with one transaction open and one committed, both with offsets for one group: after
    the restart the committed one is intact (records and offset), the open one is aborted by its
    timeout (never visible to read_committed, its offset never applied), and its producer is fenced."""
    broker = strom_broker_factory(**BROKER_CONFIG)
    topic = create_topic(broker.bootstrap)
    group = f"restart-{uuid.uuid4().hex[:6]}"
    member = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group})
    metadata = member.consumer_group_metadata()

    def group_offset() -> int:
        with RawClient(broker.bootstrap) as raw:
            return _group_offset(raw, group, topic)

    open_txn = txn_producer(
        broker.bootstrap, f"open-{uuid.uuid4().hex[:6]}", **{"transaction.timeout.ms": 3000}
    )
    open_txn.init_transactions(30)
    open_txn.begin_transaction()
    for i in range(3):
        open_txn.produce(topic, f"open-{i}".encode())
    open_txn.send_offsets_to_transaction([TopicPartition(topic, 0, 99)], metadata, 30)
    open_txn.flush(10)
    done = txn_producer(broker.bootstrap, f"done-{uuid.uuid4().hex[:6]}")
    done.init_transactions(30)
    done.begin_transaction()
    done.produce(topic, b"done-0")
    done.send_offsets_to_transaction([TopicPartition(topic, 0, 1)], metadata, 30)
    done.commit_transaction(30)
    member.close()
    assert committed_end(broker.bootstrap, topic) == (0, 5)  # the open transaction pins the LSO at 0
    wait_for(lambda: group_offset() == 1, "the committed transaction's offset")
    broker.kill()
    broker.start()
    deadline = time.monotonic() + 20
    while committed_end(broker.bootstrap, topic) != (6, 6):  # the abort marker of the expired one
        assert time.monotonic() < deadline, "the open transaction was not aborted after the restart"
        time.sleep(0.3)
    assert group_offset() == 1  # replayed from __consumer_offsets: the open transaction's 99 never
    assert consume_all(broker.bootstrap, topic, "read_committed") == [b"done-0"]
    assert consume_all(broker.bootstrap, topic, "read_uncommitted") == [
        b"open-0",
        b"open-1",
        b"open-2",
        b"done-0",
    ]
    with pytest.raises(KafkaException):
        open_txn.commit_transaction(10)


def wait_for(check: Any, what: str, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def test_consume_transform_produce_killed_and_restarted(broker: BrokerProcess, tmp_path: Path) -> None:
    """Issue 13's exactly-once check: a confluent-kafka consume-transform-produce process killed with
    SIGKILL at random points and restarted 20 times leaves every output exactly once, in order, for a
    read_committed reader, and the group's committed offset at the input's end."""
    import random

    total = 3000
    source, sink = create_topic(broker.bootstrap), create_topic(broker.bootstrap)
    feed_inputs(broker.bootstrap, source, total)
    group, txn_id = f"ctp-kill-{uuid.uuid4().hex[:6]}", f"ctp-kill-{uuid.uuid4().hex[:6]}"
    app = CtpApp(broker.bootstrap, source, sink, group, txn_id, total, tmp_path / "ctp.log")
    rng = random.Random(13)
    killed = 0
    with RawClient(broker.bootstrap) as raw:
        for run in range(20):
            # Kill once the sink has grown past a point that moves on each run, plus some jitter, so
            # the deaths fall between and inside transactions at varying places.
            target = (run + 1) * total // 21
            app.start()
            deadline = time.monotonic() + 30
            while app.running and time.monotonic() < deadline:
                if int(raw.list_offset(sink, 0, -1)["offset"]) >= target:
                    time.sleep(rng.uniform(0, 0.05))
                    break
                time.sleep(0.005)
            killed += app.running
            app.kill()
            assert app.proc is not None and app.proc.returncode in (0, -9), app.log_tail()
    assert killed >= 15  # most runs died mid-way
    app.finish(180)
    assert_exactly_once(broker.bootstrap, source, sink, group, total)


def test_produce_checks_transactional_batches(broker: BrokerProcess) -> None:
    """A transactional batch without the request's transactional_id is refused (no coordinator would
    ever end it); a plain batch of a producer inside its transaction gets INVALID_TXN_STATE; a fenced
    epoch gets INVALID_PRODUCER_EPOCH."""
    topic = create_topic(broker.bootstrap)
    tid = f"rawp-{uuid.uuid4().hex[:6]}"
    with RawClient(broker.bootstrap) as raw:
        pid, epoch = _raw_txn_setup(raw, tid)
        assert _add(raw, 1, tid, pid, epoch, topic) == 0

        def produce(seq: int, transactional: bool, txn_id: str | None, ep: int = epoch) -> int:
            records = build_batch(
                [(None, b"v", (), int(time.time() * 1000))],
                producer_id=pid,
                producer_epoch=ep,
                base_sequence=seq,
                is_transactional=transactional,
            )
            body = produce_body(topic, 0, records)
            body["transactional_id"] = txn_id
            return int(
                raw.call(ApiKey.PRODUCE, 8, body)["responses"][0]["partition_responses"][0]["error_code"]
            )

        assert produce(0, True, None) == ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        assert produce(0, True, tid) == ErrorCode.NONE
        assert produce(1, False, None) == ErrorCode.INVALID_TXN_STATE
        assert produce(1, True, tid, ep=epoch - 1) == ErrorCode.INVALID_PRODUCER_EPOCH
        assert produce(1, True, tid) == ErrorCode.NONE
        assert _end(raw, 1, tid, pid, epoch, True) == ErrorCode.NONE
    assert committed_end(broker.bootstrap, topic) == (3, 3)
