"""Idempotent producers and acks on a live broker (docs/protocol.md#idempotent-producers).

Raw batches carry the producer id and epoch from InitProducerId and explicit base sequences, so each
rule is checked exactly: a retried batch is acknowledged with its original offsets and not appended,
gaps and fenced epochs are refused, producer ids come from a persisted counter, and the producer state
survives a restart. Real clients (kafka-python, idempotent by default, and confluent-kafka with
enable.idempotence) must produce exactly once. acks=0 gets no response; acks=all honours
min.insync.replicas capped by the replication factor, as Kafka 3.7+ (on one node: always met; a
cluster's NOT_ENOUGH_REPLICAS is in tests/cluster/test_cluster.py).
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Iterator

import pytest

from strom.protocol.api import ApiKey
from strom.protocol.errors import ErrorCode
from strom.protocol.records.batch import iter_headers
from strom.protocol.records.builder import decode_batches
from strom.testing import BrokerProcess

from .rawclient import RawClient, batch, produce_body

_names = itertools.count()


@pytest.fixture
def raw(broker: BrokerProcess) -> Iterator[RawClient]:
    with RawClient(broker.bootstrap) as client:
        yield client


def new_topic(raw: RawClient, partitions: int = 1, configs: dict[str, str] | None = None) -> str:
    name = f"idem-{next(_names)}"
    assert raw.create_topic(name, partitions, configs) == 0
    return name


def values(raw: RawClient, topic: str, partition: int = 0) -> list[tuple[int, bytes | None]]:
    part = raw.fetch(topic, partition, 0)
    assert part["error_code"] == 0
    return [(r.offset, r.value) for b in decode_batches(part["records"]) for r in b.records]


def leo(raw: RawClient, topic: str) -> int:
    return int(raw.list_offset(topic, 0, -1)["offset"])


class Producer:
    """Raw idempotent batches for one (producer id, epoch)."""

    def __init__(self, raw: RawClient, topic: str, pid: int, epoch: int = 0) -> None:
        self.raw, self.topic, self.pid, self.epoch = raw, topic, pid, epoch

    def batch(self, seq: int, *vals: bytes, epoch: int | None = None) -> bytes:
        return batch(
            list(vals),
            producer_id=self.pid,
            producer_epoch=self.epoch if epoch is None else epoch,
            base_sequence=seq,
        )

    def send(self, data: bytes) -> tuple[int, int]:
        resp = self.raw.produce(self.topic, 0, data)
        return int(resp["error_code"]), int(resp["base_offset"])


def test_duplicate_batch_is_acknowledged_with_its_original_offset(raw: RawClient) -> None:
    topic = new_topic(raw)
    assert raw.produce(topic, 0, batch([b"plain"]))["base_offset"] == 0
    pid, epoch = raw.init_producer_id()
    assert epoch == 0
    p = Producer(raw, topic, pid)
    first, second = p.batch(0, b"a", b"b", b"c"), p.batch(3, b"d", b"e")
    assert p.send(first) == (0, 1)
    assert p.send(second) == (0, 4)
    assert leo(raw, topic) == 6
    # retries of both retained batches: success with the ORIGINAL base offsets, nothing appended
    assert p.send(first) == (0, 1)
    assert p.send(second) == (0, 4)
    assert p.send(second) == (0, 4)
    assert leo(raw, topic) == 6
    assert values(raw, topic) == [(0, b"plain"), (1, b"a"), (2, b"b"), (3, b"c"), (4, b"d"), (5, b"e")]
    # and the producer carries on at the next sequence
    assert p.send(p.batch(5, b"f")) == (0, 6)
    # the v8 answer for a duplicate carries no error message either
    resp = raw.call(ApiKey.PRODUCE, 8, produce_body(topic, 0, p.batch(5, b"f")))
    part = resp["responses"][0]["partition_responses"][0]
    assert (part["error_code"], part["base_offset"], part["error_message"]) == (0, 6, None)


def test_only_the_last_five_batches_are_retained(raw: RawClient) -> None:
    topic = new_topic(raw)
    pid, _ = raw.init_producer_id()
    p = Producer(raw, topic, pid)
    sent = [p.batch(i, b"v%d" % i) for i in range(7)]
    for i, data in enumerate(sent):
        assert p.send(data) == (0, i)
    for i in range(2, 7):  # the five most recent: duplicates
        assert p.send(sent[i]) == (0, i)
    code, offset = p.send(sent[0])  # older than the window: refused, not appended
    assert code in (ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, ErrorCode.DUPLICATE_SEQUENCE_NUMBER)
    assert offset == -1
    assert leo(raw, topic) == 7


def test_sequence_gap_is_out_of_order(raw: RawClient) -> None:
    topic = new_topic(raw)
    pid, _ = raw.init_producer_id()
    p = Producer(raw, topic, pid)
    assert p.send(p.batch(0, b"a", b"b")) == (0, 0)
    for seq in (3, 1, 100, -5 & 0x7FFFFFFF):
        assert p.send(p.batch(seq, b"gap")) == (ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, -1)
    assert leo(raw, topic) == 2
    assert p.send(p.batch(2, b"c")) == (0, 2)
    assert values(raw, topic) == [(0, b"a"), (1, b"b"), (2, b"c")]


def test_epochs(raw: RawClient) -> None:
    topic = new_topic(raw)
    pid, _ = raw.init_producer_id()
    p = Producer(raw, topic, pid)
    assert p.send(p.batch(0, b"e0")) == (0, 0)
    # a new epoch must start at sequence 0
    assert p.send(p.batch(5, b"bad", epoch=1)) == (ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, -1)
    assert p.send(p.batch(0, b"e1", epoch=1)) == (0, 1)
    # the old epoch is fenced, even at the sequence it would have continued with
    assert p.send(p.batch(1, b"stale")) == (ErrorCode.INVALID_PRODUCER_EPOCH, -1)
    assert p.send(p.batch(0, b"e0")) == (ErrorCode.INVALID_PRODUCER_EPOCH, -1)
    assert values(raw, topic) == [(0, b"e0"), (1, b"e1")]


def test_unknown_producer_may_start_at_any_sequence(raw: RawClient) -> None:
    topic = new_topic(raw)
    pid, _ = raw.init_producer_id()
    p = Producer(raw, topic, pid)
    assert p.send(p.batch(42, b"x")) == (0, 0)
    assert p.send(p.batch(43, b"y")) == (0, 1)
    assert p.send(p.batch(42, b"x")) == (0, 0)


def test_producers_and_partitions_are_independent(raw: RawClient) -> None:
    topic = new_topic(raw, partitions=2)
    (pid_a, _), (pid_b, _) = raw.init_producer_id(), raw.init_producer_id()
    assert pid_a != pid_b
    a_batch = batch([b"a"], producer_id=pid_a, producer_epoch=0, base_sequence=0)
    b_batch = batch([b"b"], producer_id=pid_b, producer_epoch=0, base_sequence=0)
    assert raw.produce(topic, 0, a_batch)["base_offset"] == 0
    assert raw.produce(topic, 0, b_batch)["base_offset"] == 1  # same sequence, other producer
    assert raw.produce(topic, 1, a_batch)["base_offset"] == 0  # same batch, other partition
    assert raw.produce(topic, 0, a_batch)["base_offset"] == 0  # still a duplicate on partition 0


def test_producer_ids_and_state_survive_restarts(strom_broker_factory: Callable[..., BrokerProcess]) -> None:
    broker = strom_broker_factory()
    with RawClient(broker.bootstrap) as raw:
        topic = new_topic(raw)
        first, _ = raw.init_producer_id()
        p = Producer(raw, topic, first)
        assert p.send(p.batch(0, b"a", b"b")) == (0, 0)
    broker.restart()
    with RawClient(broker.bootstrap) as raw:
        second, _ = raw.init_producer_id()
        assert second > first
        p.raw = raw
        assert p.send(p.batch(0, b"a", b"b")) == (0, 0)  # the retry is still recognised after a restart
        assert p.send(p.batch(3, b"gap")) == (ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, -1)
        assert p.send(p.batch(2, b"c")) == (0, 2)
    broker.kill()  # kill -9: ids handed out before the crash are never handed out again
    broker.start()
    with RawClient(broker.bootstrap) as raw:
        third, _ = raw.init_producer_id()
        assert third > second
        p.raw = raw
        assert p.send(p.batch(2, b"c")) == (0, 2)
        assert values(raw, topic) == [(0, b"a"), (1, b"b"), (2, b"c")]


# -- real clients ----------------------------------------------------------------------------------------


def _consume_all(raw: RawClient, topic: str, partitions: int) -> list[bytes]:
    out = []
    for p in range(partitions):
        out += [v for _, v in values(raw, topic, p) if v is not None]
    return out


def _producer_ids(raw: RawClient, topic: str, partitions: int) -> set[int]:
    return {
        h.producer_id
        for p in range(partitions)
        for _, h in iter_headers(raw.fetch(topic, p, 0)["records"] or b"")
    }


def test_kafka_python_producer_is_idempotent_by_default(raw: RawClient, broker: BrokerProcess) -> None:
    from kafka import KafkaProducer

    topic = new_topic(raw, partitions=3)
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, linger_ms=5, retries=5)
    try:
        futures = [producer.send(topic, key=b"k%d" % (i % 7), value=b"v%d" % i) for i in range(300)]
        producer.flush(20)
        for f in futures:
            f.get(10)
    finally:
        producer.close(10)
    got = _consume_all(raw, topic, 3)
    assert sorted(got) == sorted(b"v%d" % i for i in range(300))
    pids = _producer_ids(raw, topic, 3)
    assert len(pids) == 1 and min(pids) >= 0, f"batches were not idempotent: producer ids {pids}"


def test_confluent_kafka_idempotent_producer(raw: RawClient, broker: BrokerProcess) -> None:
    from confluent_kafka import Producer as CkProducer

    topic = new_topic(raw, partitions=3)
    producer = CkProducer(
        {"bootstrap.servers": broker.bootstrap, "enable.idempotence": True, "linger.ms": 5, "acks": "all"}
    )
    errors: list[object] = []
    for i in range(300):
        producer.produce(
            topic, key=b"k%d" % (i % 7), value=b"v%d" % i, on_delivery=lambda e, m: e and errors.append(e)
        )
        if i % 50 == 0:
            producer.poll(0)
    assert producer.flush(20) == 0
    assert errors == []
    got = _consume_all(raw, topic, 3)
    assert sorted(got) == sorted(b"v%d" % i for i in range(300))
    # per partition, a key's records keep their send order (exactly once, in order)
    for p in range(3):
        seq = [int(v[1:]) for _, v in values(raw, topic, p) if v is not None]
        assert seq == sorted(seq)
    pids = _producer_ids(raw, topic, 3)
    assert len(pids) == 1 and min(pids) >= 0


# -- acks ------------------------------------------------------------------------------------------------


def test_acks_zero_gets_no_response(raw: RawClient) -> None:
    topic = new_topic(raw)
    silent = raw.send(ApiKey.PRODUCE, 8, produce_body(topic, 0, batch([b"fire", b"forget"]), acks=0))
    meta_id = raw.send(ApiKey.METADATA, 1, {"topics": None})
    # the next frame on this connection answers the Metadata request, not the produce
    resp = raw.recv(ApiKey.METADATA, 1, meta_id)
    assert resp["brokers"]
    assert silent != meta_id
    deadline = time.monotonic() + 5
    while leo(raw, topic) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert values(raw, topic) == [(0, b"fire"), (1, b"forget")]
    # several acks=0 requests in a row, then one with acks=1: exactly one answer, in order
    for i in range(3):
        raw.send(ApiKey.PRODUCE, 3, produce_body(topic, 0, batch([b"q%d" % i]), acks=0))
    acked = raw.send(ApiKey.PRODUCE, 3, produce_body(topic, 0, batch([b"last"]), acks=1))
    part = raw.recv(ApiKey.PRODUCE, 3, acked)["responses"][0]["partition_responses"][0]
    assert (part["error_code"], part["base_offset"]) == (0, 5)


def test_acks_all_with_min_insync_replicas_above_the_replication_factor(
    raw: RawClient, broker: BrokerProcess
) -> None:
    """As Kafka 3.7+ (KAFKA-15583): the effective min ISR is capped by the replicas, so
    min.insync.replicas=2 on one replica asks for that replica (before 3.7: NOT_ENOUGH_REPLICAS always)."""
    from confluent_kafka import KafkaError
    from confluent_kafka import Producer as CkProducer

    topic = new_topic(raw, configs={"min.insync.replicas": "2"})
    resp = raw.produce(topic, 0, batch([b"x"]), acks=-1)
    assert (resp["error_code"], resp["base_offset"]) == (0, 0)
    producer = CkProducer(
        {"bootstrap.servers": broker.bootstrap, "acks": "all", "message.timeout.ms": 3000, "retries": 0}
    )
    errors: list[KafkaError | None] = []
    producer.produce(topic, value=b"y", on_delivery=lambda e, m: errors.append(e))
    producer.flush(15)
    assert errors == [None]
    assert values(raw, topic) == [(0, b"x"), (1, b"y")]


def test_acks_zero_error_closes_the_connection(raw: RawClient, broker: BrokerProcess) -> None:
    """Kafka closes the connection when an acks=0 produce fails, so the producer notices and refreshes."""
    topic = new_topic(raw)
    log_start = broker.log_path.stat().st_size
    raw.send(ApiKey.PRODUCE, 8, produce_body(f"{topic}-missing", 0, batch([b"lost"]), acks=0))
    assert raw.closed_by_peer(5.0)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        with open(broker.log_path, "rb") as fh:
            fh.seek(log_start)
            if b"produce with acks=0 failed" in fh.read():
                break
        time.sleep(0.05)
    else:
        pytest.fail("no log line for the failed acks=0 produce")
    with RawClient(broker.bootstrap) as fresh:
        assert values(fresh, topic) == []
        assert fresh.produce(topic, 0, batch([b"ok"]), acks=1)["error_code"] == 0
