"""Transaction admin APIs (KIP-664) against a real broker process: DescribeTransactions,
ListTransactions and DescribeProducers, raw at every advertised version (test_conformance.py's
COVERED_ELSEWHERE points here) and through kafka-python's admin client, the tool users run.

The transactions under inspection are made by confluent-kafka's transactional producer.
"""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Producer

from strom.protocol.api import ApiKey
from strom.protocol.errors import ErrorCode
from strom.protocol.records.builder import build_batch
from strom.testing import BrokerProcess

from .rawclient import RawClient, produce_body
from .test_transactions import BROKER_CONFIG, consume_all, create_topic, txn_producer


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    # ghost_transaction makes hanging transactions, which KIP-890's verification (on by default) refuses
    config = {**BROKER_CONFIG, "transaction.partition.verification.enable": "false"}
    proc = BrokerProcess(tmp_path_factory.mktemp("txadmin") / "data", config)
    proc.start()
    try:
        yield proc
    finally:
        proc.stop()


def _open_transaction(bootstrap: str, topic: str, records: int = 2) -> tuple[str, Producer]:
    tid = f"adm-{uuid.uuid4().hex[:8]}"
    producer = txn_producer(bootstrap, tid)
    producer.init_transactions(30)
    producer.begin_transaction()
    for i in range(records):
        producer.produce(topic, f"v{i}".encode(), partition=0)
    assert producer.flush(10) == 0
    return tid, producer


def _describe(raw: RawClient, *tids: str) -> list[dict[str, Any]]:
    resp = raw.call(ApiKey.DESCRIBE_TRANSACTIONS, 0, {"transactional_ids": list(tids)})
    assert resp["throttle_time_ms"] == 0
    states: list[dict[str, Any]] = resp["transaction_states"]
    return states


def _list(raw: RawClient, version: int, **filters: Any) -> dict[str, Any]:
    body = {"state_filters": [], "producer_id_filters": [], **filters}
    result: dict[str, Any] = raw.call(ApiKey.LIST_TRANSACTIONS, version, body)
    return result


def _listed(resp: dict[str, Any]) -> dict[str, tuple[int, str]]:
    return {
        t["transactional_id"]: (t["producer_id"], t["transaction_state"]) for t in resp["transaction_states"]
    }


def test_describe_transactions_v0(broker: BrokerProcess) -> None:
    topic = create_topic(broker.bootstrap)
    before_ms = int(time.time() * 1000)
    tid, producer = _open_transaction(broker.bootstrap, topic)
    with RawClient(broker.bootstrap) as raw:
        (ongoing, unknown) = _describe(raw, tid, "no-such-transactional-id")
        assert ongoing["error_code"] == 0
        assert ongoing["transactional_id"] == tid
        assert ongoing["transaction_state"] == "Ongoing"
        assert ongoing["transaction_timeout_ms"] == 60_000  # librdkafka's transaction.timeout.ms
        assert before_ms <= ongoing["transaction_start_time_ms"] <= int(time.time() * 1000)
        assert ongoing["producer_id"] >= 0 and ongoing["producer_epoch"] == 0
        assert ongoing["topics"] == [{"topic": topic, "partitions": [0]}]
        assert unknown["error_code"] == ErrorCode.TRANSACTIONAL_ID_NOT_FOUND
        assert unknown["transactional_id"] == "no-such-transactional-id"
        producer.commit_transaction(30)
        (done,) = _describe(raw, tid)
        assert done["transaction_state"] == "CompleteCommit"
        assert done["topics"] == []
        assert done["producer_id"] == ongoing["producer_id"]
        assert _describe(raw) == []  # no ids, no results


@pytest.mark.parametrize("version", [0, 1, 2])
def test_list_transactions_versions(broker: BrokerProcess, version: int) -> None:
    """State filters (unknown names echoed back), producer id filters, from v1 the duration filter and
    from v2 the transactional id pattern (a regular expression matching the whole id, KIP-1152)."""
    topic = create_topic(broker.bootstrap)
    open_tid, open_producer = _open_transaction(broker.bootstrap, topic)
    done_tid, done_producer = _open_transaction(broker.bootstrap, topic)
    done_producer.commit_transaction(30)
    with RawClient(broker.bootstrap) as raw:
        (open_desc, done_desc) = _describe(raw, open_tid, done_tid)
        everything = _list(raw, version)
        assert everything["error_code"] == 0 and everything["unknown_state_filters"] == []
        listed = _listed(everything)
        assert listed[open_tid] == (open_desc["producer_id"], "Ongoing")
        assert listed[done_tid] == (done_desc["producer_id"], "CompleteCommit")

        ongoing = _list(raw, version, state_filters=["Ongoing", "Bogus"])
        assert ongoing["unknown_state_filters"] == ["Bogus"]
        assert open_tid in _listed(ongoing) and done_tid not in _listed(ongoing)
        only_bogus = _list(raw, version, state_filters=["Bogus"])
        assert only_bogus["unknown_state_filters"] == ["Bogus"] and only_bogus["transaction_states"] == []

        by_pid = _list(raw, version, producer_id_filters=[done_desc["producer_id"]])
        assert set(_listed(by_pid)) == {done_tid}
        if version >= 1:
            time.sleep(0.3)
            # Only transactions running longer than the filter: the open one (0.3 s old), not the done one.
            running = _listed(_list(raw, version, duration_filter=200))
            assert open_tid in running and done_tid not in running
            assert open_tid not in _listed(_list(raw, version, duration_filter=600_000))
        if version >= 2:
            assert set(_listed(_list(raw, version, transactional_id_pattern=re.escape(done_tid)))) == {
                done_tid
            }
            prefix = re.escape(open_tid[: len(open_tid) // 2])
            assert open_tid in _listed(_list(raw, version, transactional_id_pattern=prefix + ".*"))
            assert open_tid not in _listed(_list(raw, version, transactional_id_pattern=prefix))  # whole id
            assert open_tid in _listed(_list(raw, version, transactional_id_pattern=None))
            assert _list(raw, version, transactional_id_pattern="(")["error_code"] == (
                ErrorCode.INVALID_REGULAR_EXPRESSION
            )
    open_producer.abort_transaction(30)


def test_describe_producers_v0(broker: BrokerProcess) -> None:
    """The partition's producer state: an idempotent producer, a transactional one with its open
    transaction's first offset, then after the commit the coordinator epoch of its marker."""
    topic = create_topic(broker.bootstrap)
    plain = Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": True})
    for i in range(3):
        plain.produce(topic, f"p{i}".encode(), partition=0)
    assert plain.flush(10) == 0
    tid, producer = _open_transaction(broker.bootstrap, topic, records=2)

    def producers(raw: RawClient) -> dict[int, dict[str, Any]]:
        body = {
            "topics": [
                {"name": topic, "partition_indexes": [0, 7]},
                {"name": "nope", "partition_indexes": [0]},
            ]
        }
        resp = raw.call(ApiKey.DESCRIBE_PRODUCERS, 0, body)
        (ours, other) = resp["topics"]
        (p0, p7) = ours["partitions"]
        assert (p7["partition_index"], p7["error_code"]) == (7, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        assert other["partitions"][0]["error_code"] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        assert p0["error_code"] == 0 and p0["error_message"] is None
        return {p["producer_id"]: p for p in p0["active_producers"]}

    with RawClient(broker.bootstrap) as raw:
        (desc,) = _describe(raw, tid)
        txn_pid = desc["producer_id"]
        state = producers(raw)
        assert len(state) == 2
        (plain_pid,) = set(state) - {txn_pid}
        assert state[plain_pid]["last_sequence"] == 2
        assert state[plain_pid]["current_txn_start_offset"] == -1
        assert state[plain_pid]["last_timestamp"] > 0
        assert state[txn_pid]["producer_epoch"] == desc["producer_epoch"]
        assert state[txn_pid]["last_sequence"] == 1
        assert state[txn_pid]["current_txn_start_offset"] == 3  # after the three plain records
        assert state[txn_pid]["coordinator_epoch"] == -1  # no marker yet
        producer.commit_transaction(30)
        after = producers(raw)[txn_pid]
        assert after["current_txn_start_offset"] == -1
        assert (
            after["coordinator_epoch"] >= 0
        )  # the marker's: the leader epoch of its __transaction_state partition


def test_kafka_python_admin_client(broker: BrokerProcess) -> None:
    """kafka-python's KafkaAdminClient (list/describe transactions, describe producers) reads the same."""
    from kafka.admin import KafkaAdminClient
    from kafka.structs import TopicPartition

    topic = create_topic(broker.bootstrap)
    tid, producer = _open_transaction(broker.bootstrap, topic)
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        listed = admin.list_transactions(state_filters=["Ongoing"])
        (rows,) = listed.values()  # one broker, one listing
        assert tid in {row.transactional_id for row in rows}
        desc = admin.describe_transactions([tid])[tid]
        assert desc.state.value == "Ongoing"
        assert desc.topic_partitions == {TopicPartition(topic, 0)}
        assert desc.coordinator_id == 0
        running = admin.list_transactions(duration_filter_ms=0)
        assert tid in {row.transactional_id for rows in running.values() for row in rows}
        producers = admin.describe_producers([TopicPartition(topic, 0)])
        (active,) = producers[TopicPartition(topic, 0)].active_producers
        assert active.producer_id == desc.producer_id
        assert active.current_transaction_start_offset == 0
        producer.abort_transaction(30)
        assert admin.describe_transactions([tid])[tid].state.value == "CompleteAbort"
    finally:
        admin.close()


def _last_value_of(raw: RawClient, tid: str, partitions: int) -> bytes | None:
    """The value of the last ``__transaction_state`` record of ``tid`` (None: a tombstone)."""
    from strom.protocol.records.builder import decode_batches
    from strom.transaction.records import decode_key, partition_for

    part = raw.fetch("__transaction_state", partition_for(tid, partitions), 0)
    assert part["error_code"] == 0
    records = [r for b in decode_batches(bytes(part["records"] or b"")) for r in b.records]
    (last, *_) = [r for r in reversed(records) if r.key is not None and decode_key(r.key) == tid]
    return last.value


def test_idle_transactional_ids_expire(strom_broker_factory: Any) -> None:
    """transactional.id.expiration.ms over TCP: an idle id gets a tombstone in __transaction_state and is
    forgotten (also after a restart); an id with an open transaction does not expire; the expired id
    starts again with a new producer id."""
    config = {
        **BROKER_CONFIG,
        "transactional.id.expiration.ms": "1500",
        "transaction.remove.expired.transaction.cleanup.interval.ms": "200",
    }
    broker = strom_broker_factory(**config)
    topic = create_topic(broker.bootstrap)
    idle_tid = f"idle-{uuid.uuid4().hex[:8]}"
    idle = txn_producer(broker.bootstrap, idle_tid)
    idle.init_transactions(30)
    idle.begin_transaction()
    idle.produce(topic, b"x")
    idle.commit_transaction(30)
    open_tid, open_producer = _open_transaction(broker.bootstrap, topic)
    with RawClient(broker.bootstrap) as raw:
        (before,) = _describe(raw, idle_tid)
        deadline = time.monotonic() + 15
        while _describe(raw, idle_tid)[0]["error_code"] != ErrorCode.TRANSACTIONAL_ID_NOT_FOUND:
            assert time.monotonic() < deadline, "the idle transactional id did not expire"
            time.sleep(0.2)
        assert _last_value_of(raw, idle_tid, 5) is None
        (still_open,) = _describe(raw, open_tid)
        assert still_open["transaction_state"] == "Ongoing"
    broker.stop()
    broker.start()
    with RawClient(broker.bootstrap) as raw:
        assert _describe(raw, idle_tid)[0]["error_code"] == ErrorCode.TRANSACTIONAL_ID_NOT_FOUND
    again = txn_producer(broker.bootstrap, idle_tid)
    again.init_transactions(30)
    with RawClient(broker.bootstrap) as raw:
        (fresh,) = _describe(raw, idle_tid)
    assert fresh["producer_id"] != before["producer_id"] and fresh["producer_epoch"] == 0
    del open_producer


def ghost_transaction(bootstrap: str, topic: str, partition: int = 0) -> tuple[int, int]:
    """A transactional batch no coordinator knows of, written with an idempotent producer id (as only a
    broken coordinator, a lost ``__transaction_state`` or a late batch without KIP-890's verification
    would leave one): a hanging transaction that pins the partition's last stable offset. The broker
    needs ``transaction.partition.verification.enable=false``. Returns the producer id and epoch."""
    with RawClient(bootstrap) as raw:
        pid, epoch = raw.init_producer_id()
        batch = build_batch(
            [(None, b"ghost", (), int(time.time() * 1000))],
            producer_id=pid,
            producer_epoch=epoch,
            base_sequence=0,
            is_transactional=True,
        )
        body = produce_body(topic, partition, batch)
        body["transactional_id"] = "no-coordinator-knows-me"
        resp = raw.call(ApiKey.PRODUCE, 8, body)
        assert resp["responses"][0]["partition_responses"][0]["error_code"] == 0
    return pid, epoch


def _abort(
    raw: RawClient, version: int, topic: str, partition: int, pid: int, epoch: int, coordinator_epoch: int
) -> int:
    marker = {
        "producer_id": pid,
        "producer_epoch": epoch,
        "transaction_result": False,
        "topics": [{"name": topic, "partition_indexes": [partition]}],
        "coordinator_epoch": coordinator_epoch,
    }
    (result,) = raw.call(ApiKey.WRITE_TXN_MARKERS, version, {"markers": [marker]})["markers"]
    assert result["producer_id"] == pid
    (t,) = result["topics"]
    assert t["name"] == topic
    (p,) = t["partitions"]
    assert p["partition_index"] == partition
    return int(p["error_code"])


@pytest.mark.parametrize("version", [0, 1, 2])
def test_write_txn_markers_aborts_a_hanging_transaction(broker: BrokerProcess, version: int) -> None:
    """WriteTxnMarkers as an admin tool sends it to the partition leader (kafka-transactions.sh abort):
    the ABORT marker ends a transaction no coordinator would ever end, so the last stable offset moves
    on; a stale producer epoch, an older coordinator epoch and an unknown partition get Kafka's errors."""
    from .test_transactions import committed_end

    topic = create_topic(broker.bootstrap)
    pid, epoch = ghost_transaction(broker.bootstrap, topic)
    assert committed_end(broker.bootstrap, topic) == (0, 1)  # pinned at the ghost's first offset
    with RawClient(broker.bootstrap) as raw:
        assert (
            _abort(raw, version, "no-such-topic", 0, pid, epoch, -1) == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        )
        assert _abort(raw, version, topic, 0, pid, epoch, -1) == 0
        assert committed_end(broker.bootstrap, topic) == (2, 2)  # the abort marker ends it
        assert consume_all(broker.bootstrap, topic, "read_committed", idle_s=1.0) == []
        assert _abort(raw, version, topic, 0, pid, epoch - 1, -1) == ErrorCode.INVALID_PRODUCER_EPOCH
        # A coordinator's marker records its epoch; an admin abort must bring at least that epoch.
        tid, producer = _open_transaction(broker.bootstrap, topic, records=1)
        producer.commit_transaction(30)
        (desc,) = _describe(raw, tid)
        coordinator_epoch = max(0, _partition_producers(raw, topic)[desc["producer_id"]]["coordinator_epoch"])
        stale = _abort(
            raw, version, topic, 0, desc["producer_id"], desc["producer_epoch"], coordinator_epoch - 1
        )
        assert stale == ErrorCode.TRANSACTION_COORDINATOR_FENCED


def _partition_producers(raw: RawClient, topic: str) -> dict[int, dict[str, Any]]:
    resp = raw.call(ApiKey.DESCRIBE_PRODUCERS, 0, {"topics": [{"name": topic, "partition_indexes": [0]}]})
    return {p["producer_id"]: p for p in resp["topics"][0]["partitions"][0]["active_producers"]}


def test_kafka_python_aborts_a_hanging_transaction(broker: BrokerProcess) -> None:
    """kafka-python's KafkaAdminClient.abort_transaction (WriteTxnMarkers v1 to the leader) with the
    producer state DescribeProducers reports."""
    from kafka.admin import AbortTransactionSpec, KafkaAdminClient
    from kafka.structs import TopicPartition

    from .test_transactions import committed_end

    topic = create_topic(broker.bootstrap)
    pid, _ = ghost_transaction(broker.bootstrap, topic)
    tp = TopicPartition(topic, 0)
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        (ghost,) = admin.describe_producers([tp])[tp].active_producers
        assert (ghost.producer_id, ghost.current_transaction_start_offset) == (pid, 0)
        admin.abort_transaction(
            AbortTransactionSpec(tp, ghost.producer_id, ghost.producer_epoch, ghost.coordinator_epoch)
        )
        (after,) = admin.describe_producers([tp])[tp].active_producers
        assert after.current_transaction_start_offset == -1
    finally:
        admin.close()
    assert committed_end(broker.bootstrap, topic) == (2, 2)
