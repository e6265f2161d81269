"""KIP-890 part 1 on one broker process: ``transaction.partition.verification.enable`` (default true, a
dynamic broker config) and the hanging transaction it prevents, over the raw protocol, plus a
confluent-kafka transactional producer working as before with verification on.

The hanging transaction: a producer's transactional batch for a partition its transaction never added
(a late retry after the transaction ended, or a producer that skipped AddPartitionsToTxn). Without
verification the leader appends it and it opens a transaction there that no coordinator will ever end:
the last stable offset stays at it, so read_committed consumers stop. With verification the leader asks
the coordinator first and refuses the batch (INVALID_TXN_STATE).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

from strom.protocol.api import ApiKey
from strom.protocol.errors import ErrorCode
from strom.protocol.records.builder import build_batch
from strom.testing import BrokerProcess

from .rawclient import RawClient, produce_body
from .test_transactions import BROKER_CONFIG, committed_end, consume_all, create_topic

VERIFICATION = "transaction.partition.verification.enable"


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    proc = BrokerProcess(tmp_path_factory.mktemp("txnverify") / "data", BROKER_CONFIG)
    proc.start()
    try:
        yield proc
    finally:
        proc.stop()


def set_verification(bootstrap: str, enabled: bool) -> None:
    """IncrementalAlterConfigs on broker 0: the config is dynamic, as in Kafka."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    entry = ConfigEntry(VERIFICATION, str(enabled).lower(), incremental_operation=AlterConfigOpType.SET)
    resource = ConfigResource(ResourceType.BROKER, "0", incremental_configs=[entry])
    admin.incremental_alter_configs([resource])[resource].result(30)
    described = admin.describe_configs([ConfigResource(ResourceType.BROKER, "0")])
    (configs,) = (f.result(30) for f in described.values())
    assert configs[VERIFICATION].value == str(enabled).lower()


class RawTransaction:
    """A transactional producer spoken raw: InitProducerId, AddPartitionsToTxn, Produce, EndTxn."""

    def __init__(self, raw: RawClient, topic: str, tid: str | None = None) -> None:
        self.raw, self.topic = raw, topic
        self.tid = tid or f"verify-{uuid.uuid4().hex[:8]}"
        found = raw.call(ApiKey.FIND_COORDINATOR, 1, {"key": self.tid, "key_type": 1})
        assert found["error_code"] == 0, found
        init = raw.call(
            ApiKey.INIT_PRODUCER_ID, 4, {"transactional_id": self.tid, "transaction_timeout_ms": 60_000}
        )
        assert init["error_code"] == 0, init
        self.pid, self.epoch = int(init["producer_id"]), int(init["producer_epoch"])
        self.sequences: dict[int, int] = {}

    def add(self, *partitions: int) -> int:
        body = {
            "v3_and_below_transactional_id": self.tid,
            "v3_and_below_producer_id": self.pid,
            "v3_and_below_producer_epoch": self.epoch,
            "v3_and_below_topics": [{"name": self.topic, "partitions": list(partitions)}],
        }
        resp = self.raw.call(ApiKey.ADD_PARTITIONS_TO_TXN, 3, body)
        codes = {
            p["partition_error_code"]
            for t in resp["results_by_topic_v3_and_below"]
            for p in t["results_by_partition"]
        }
        (code,) = codes
        return int(code)

    def produce(self, partition: int, value: bytes = b"v", version: int = 9) -> int:
        seq = self.sequences.get(partition, 0)
        records = build_batch(
            [(None, value, (), int(time.time() * 1000))],
            producer_id=self.pid,
            producer_epoch=self.epoch,
            base_sequence=seq,
            is_transactional=True,
        )
        body = produce_body(self.topic, partition, records)
        body["transactional_id"] = self.tid
        code = int(
            self.raw.call(ApiKey.PRODUCE, version, body)["responses"][0]["partition_responses"][0][
                "error_code"
            ]
        )
        if code == 0:
            self.sequences[partition] = seq + 1
        return code

    def end(self, commit: bool) -> int:
        body = {
            "transactional_id": self.tid,
            "producer_id": self.pid,
            "producer_epoch": self.epoch,
            "committed": commit,
        }
        return int(self.raw.call(ApiKey.END_TXN, 3, body)["error_code"])


def wait_settled(bootstrap: str, topic: str, partition: int, timeout_s: float = 10.0) -> tuple[int, int]:
    """(last stable offset, high watermark) once a transaction's markers had time to arrive."""
    deadline = time.monotonic() + timeout_s
    while True:
        lso, hw = committed_end(bootstrap, topic, partition)
        if lso == hw or time.monotonic() > deadline:
            return lso, hw
        time.sleep(0.05)


def test_a_batch_for_a_partition_never_added_is_refused(broker: BrokerProcess) -> None:
    """Verification on (the default): the stray batch gets INVALID_TXN_STATE (TRANSACTION_ABORTABLE
    at Produce v12+), the partition stays stable; the added partition takes the transaction's batches;
    after the transaction ended, a late batch of it is refused too, on a partition that held it."""
    topic = create_topic(broker.bootstrap, partitions=2)
    with RawClient(broker.bootstrap) as raw:
        txn = RawTransaction(raw, topic)
        assert txn.add(0) == ErrorCode.NONE
        assert txn.produce(1) == ErrorCode.INVALID_TXN_STATE
        assert txn.produce(1, version=12) == ErrorCode.TRANSACTION_ABORTABLE
        for _ in range(3):
            assert txn.produce(0) == ErrorCode.NONE
        assert txn.end(commit=True) == ErrorCode.NONE
        assert wait_settled(broker.bootstrap, topic, 0) == (4, 4)  # three records and the marker
        assert txn.produce(0, b"late") == ErrorCode.INVALID_TXN_STATE
        assert txn.produce(1, b"late") == ErrorCode.INVALID_TXN_STATE
    assert committed_end(broker.bootstrap, topic, 0) == (4, 4)
    assert committed_end(broker.bootstrap, topic, 1) == (0, 0)
    assert consume_all(broker.bootstrap, topic, "read_committed", 2, idle_s=5.0) == [b"v"] * 3


def test_without_verification_the_stray_batch_hangs_the_partition(broker: BrokerProcess) -> None:
    """With the config turned off at run time the same stray batch is appended: it opens a transaction
    the coordinator does not know, and the partition's last stable offset stays at it after the
    producer's own transaction committed (the hanging transaction). Turned on again, the next stray
    batch is refused."""
    topic = create_topic(broker.bootstrap, partitions=2)
    set_verification(broker.bootstrap, False)
    try:
        with RawClient(broker.bootstrap) as raw:
            txn = RawTransaction(raw, topic)
            assert txn.add(0) == ErrorCode.NONE
            assert txn.produce(0) == ErrorCode.NONE
            assert txn.produce(1, b"stray") == ErrorCode.NONE
            assert txn.end(commit=True) == ErrorCode.NONE
            assert wait_settled(broker.bootstrap, topic, 0) == (2, 2)
            time.sleep(0.5)
            assert committed_end(broker.bootstrap, topic, 1) == (0, 1)  # pinned: hanging
    finally:
        set_verification(broker.bootstrap, True)
    with RawClient(broker.bootstrap) as raw:
        txn = RawTransaction(raw, topic)
        assert txn.add(0) == ErrorCode.NONE
        assert txn.produce(1, b"stray") == ErrorCode.INVALID_TXN_STATE
        assert txn.end(commit=False) == ErrorCode.NONE


def test_client_transactions_pass_verification(broker: BrokerProcess) -> None:
    """confluent-kafka's transactional producer over three partitions, committed and aborted rounds:
    every batch of theirs passes verification (its partitions are added first)."""
    topic = create_topic(broker.bootstrap, partitions=3)
    producer = Producer(
        {"bootstrap.servers": broker.bootstrap, "transactional.id": f"cv-{uuid.uuid4().hex[:6]}"}
    )
    producer.init_transactions(30)
    for round_ in range(4):
        producer.begin_transaction()
        for i in range(30):
            producer.produce(topic, f"{round_}-{i}".encode(), partition=i % 3)
        if round_ == 2:
            producer.abort_transaction(30)
        else:
            producer.commit_transaction(30)
    got = consume_all(broker.bootstrap, topic, "read_committed", 3, idle_s=5.0)
    assert sorted(got) == sorted(f"{r}-{i}".encode() for r in (0, 1, 3) for i in range(30))
