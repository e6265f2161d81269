"""Transactions under compaction and retention, against a real broker process, with confluent-kafka
and kafka-python.

A transactional producer commits, aborts and commits again on the same keys; the broker's cleaner
(backing off 200 ms, tiny segments, ``delete.retention.ms`` 1 s) then removes the aborted records,
the superseded committed ones and, once no data of its transaction is left, the ABORT marker. Readers
of both isolation levels see the committed view only; after a kill -9 and restart the producer state,
the last stable offset and that view are the same and the transactional id keeps working. Retention
deletes segments of committed and aborted transactions with their ``.txnindex`` files while another
transaction stays open across the deletion.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaConsumer
from kafka import TopicPartition as KpTopicPartition

from strom.protocol.api import ApiKey
from strom.protocol.records.batch import iter_headers
from strom.protocol.records.control import ControlType, read_marker
from strom.testing import BrokerProcess

from .eos import consume_all
from .rawclient import RawClient
from .test_compaction import wait_until
from .test_transactions import committed_end

pytestmark = pytest.mark.slow

SETTINGS = {
    "log.cleaner.backoff.ms": "200",
    "transaction.state.log.num.partitions": "3",
    "group.initial.rebalance.delay.ms": "0",
}
COMPACTED = {
    "cleanup.policy": "compact",
    "segment.bytes": "2048",
    "segment.ms": "300",
    "min.cleanable.dirty.ratio": "0.01",
    "delete.retention.ms": "1000",
}


def markers_on_disk(broker: BrokerProcess, topic: str) -> list[tuple[int, ControlType | None, int | None]]:
    """(offset, type, delete horizon) of every control batch in the partition's segment files."""
    found = []
    for path in sorted((broker.data_dir / "logs" / f"{topic}-0").glob("*.log")):
        data = Path(path).read_bytes()
        for position, header in iter_headers(data):
            if header.is_control:
                marker = read_marker(data[position:], header) if header.records_count else None
                control = None if marker is None else marker.control_type
                found.append((header.base_offset, control, header.delete_horizon_ms))
    return found


def test_compaction_removes_aborted_data_then_its_marker_and_survives_a_restart(
    strom_broker_factory: Callable[..., BrokerProcess],
) -> None:
    broker = strom_broker_factory(**SETTINGS)
    topic = f"txc-{uuid.uuid4().hex[:6]}"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1, config=COMPACTED)])[topic].result(15)
    txn_id = f"txc-{uuid.uuid4().hex[:6]}"
    producer = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": txn_id, "linger.ms": 0})
    producer.init_transactions(30)

    def transaction(values: dict[bytes, bytes], commit: bool) -> None:
        producer.begin_transaction()
        for key, value in values.items():
            producer.produce(topic, key=key, value=value)
        producer.flush(10)
        if commit:
            producer.commit_transaction(30)
        else:
            producer.abort_transaction(30)

    keys = [b"k%d" % i for i in range(10)]
    transaction({k: b"c1-" + k for k in keys}, commit=True)
    transaction({**{k: b"ab-" + k for k in keys}, **{b"a%d" % i: b"ab" for i in range(5)}}, commit=False)
    transaction({k: b"c3-" + k for k in keys[:5]}, commit=True)
    expected = [b"c1-" + k for k in keys[5:]] + [b"c3-" + k for k in keys[:5]]
    filler = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
    rounds = [0]

    def push_filler() -> None:
        """A keyed plain record: new dirty data and (past segment.ms) a segment roll for the cleaner."""
        rounds[0] += 1
        filler.produce(topic, key=b"filler", value=b"%d" % rounds[0])
        assert filler.flush(10) == 0

    def committed_view() -> list[bytes]:
        return consume_all(broker.bootstrap, topic, "read_committed", idle_s=5.0)

    def cleaned() -> bool:
        push_filler()
        values = consume_all(broker.bootstrap, topic, "read_uncommitted", idle_s=5.0)
        return [v for v in values if v.startswith((b"c", b"ab"))] == expected

    wait_until(cleaned, 60, "the aborted and superseded records to be compacted away")
    assert [v for v in committed_view() if v.startswith(b"c")] == expected

    def abort_marker_gone() -> bool:
        push_filler()
        return [m[1] for m in markers_on_disk(broker, topic)] == [ControlType.COMMIT, ControlType.COMMIT]

    wait_until(abort_marker_gone, 60, "the ABORT marker to go once its data was gone")
    lso, hw = committed_end(broker.bootstrap, topic)
    assert lso == hw

    broker.kill()
    broker.start()
    assert committed_end(broker.bootstrap, topic) == (lso, hw)
    assert [v for v in committed_view() if v.startswith(b"c")] == expected
    # The transactional id still works: the new instance fences the old one and commits.
    producer = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": txn_id, "linger.ms": 0})
    producer.init_transactions(30)
    transaction({b"k0": b"c4-k0"}, commit=True)
    superseded = b"c3-k0"  # until the segment holding c4-k0 rolls and is cleaned
    after = [*(v for v in expected if v != superseded), b"c4-k0"]
    assert [v for v in committed_view() if v.startswith(b"c") and v != superseded] == after
    # kafka-python's read_committed consumer parses the cleaned batches (emptied and horizon-stamped) too.
    consumer = KafkaConsumer(
        bootstrap_servers=broker.bootstrap,
        auto_offset_reset="earliest",
        isolation_level="read_committed",
        consumer_timeout_ms=3000,
    )
    try:
        consumer.assign([KpTopicPartition(topic, 0)])
        seen = [m.value for m in consumer if m.value.startswith(b"c") and m.value != superseded]
    finally:
        consumer.close()
    assert seen == after


def test_retention_deletes_segments_with_their_txnindex_and_keeps_the_lso(
    strom_broker_factory: Callable[..., BrokerProcess],
) -> None:
    """Retention (retention.bytes) deletes whole segments holding committed and aborted transactions,
    their `.txnindex` files with them, while another producer's transaction stays open across the
    deletion: the last stable offset stays at the log start, then reaches the high watermark at its
    commit, and both isolation levels read exactly what is left."""
    broker = strom_broker_factory(**{**SETTINGS, "log.retention.check.interval.ms": "300"})
    topic = f"txr-{uuid.uuid4().hex[:6]}"
    config = {"segment.bytes": "1024", "retention.bytes": "3072"}
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})  # must outlive its futures
    admin.create_topics([NewTopic(topic, 1, 1, config=config)])[topic].result(15)
    directory = broker.data_dir / "logs" / f"{topic}-0"
    holder = Producer(
        {"bootstrap.servers": broker.bootstrap, "transactional.id": f"open-{topic}", "linger.ms": 0}
    )
    holder.init_transactions(30)
    holder.begin_transaction()
    holder.produce(topic, value=b"c-open")
    holder.flush(10)  # offset 0: open until the end
    producer = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": topic, "linger.ms": 0})
    producer.init_transactions(30)
    for n in range(40):
        producer.begin_transaction()
        for i in range(3):
            producer.produce(topic, value=(b"c-%d-%d" if n % 2 else b"a-%d-%d") % (n, i) + b"." * 100)
        producer.flush(10)
        if n % 2:
            producer.commit_transaction(30)
        else:
            producer.abort_transaction(30)
    assert len(list(directory.glob("*.txnindex"))) > 2

    def log_start() -> int:
        with RawClient(broker.bootstrap) as raw:
            return int(raw.list_offset(topic, 0, -2)["offset"])

    wait_until(lambda: log_start() > 0, 20, "retention to delete the oldest segments")
    lso, hw = committed_end(broker.bootstrap, topic)
    assert lso == log_start() < hw  # the open transaction's start is gone: the log start bounds it
    bases = {int(p.stem) for p in directory.glob("*.log")}
    assert {int(p.stem) for p in directory.glob("*.txnindex")} <= bases  # none left behind
    assert consume_all(broker.bootstrap, topic, "read_committed", idle_s=1.0) == []
    holder.commit_transaction(30)
    lso, hw = committed_end(broker.bootstrap, topic)
    assert lso == hw
    start = log_start()
    everything = consume_all(broker.bootstrap, topic, "read_uncommitted")
    committed = consume_all(broker.bootstrap, topic, "read_committed")
    assert committed == [v for v in everything if v.startswith(b"c-")]
    assert any(v.startswith(b"a-") for v in everything)  # aborted ones remain in the segments left
    assert len(committed) >= 3 and start > 0


def test_a_fenced_producers_last_marker_outlives_its_horizon_and_keeps_its_epoch(
    strom_broker_factory: Callable[..., BrokerProcess],
) -> None:
    """A second instance of a transactional id fences the first, whose open transaction the coordinator
    aborts with a marker at the bumped epoch. Compaction removes the aborted record and stamps the
    marker with a delete horizon, but keeps it past the horizon (its producer's last batch, holding
    the fence); confluent-kafka, kafka-python and aiokafka readers of both isolation levels read the
    log, and after a kill -9 that loses every producer-state snapshot the rebuilt state has the
    fenced epoch."""
    broker = strom_broker_factory(**SETTINGS)
    topic = f"txf-{uuid.uuid4().hex[:6]}"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})  # must outlive its futures
    admin.create_topics([NewTopic(topic, 1, 1, config=COMPACTED)])[topic].result(15)
    conf = {"bootstrap.servers": broker.bootstrap, "transactional.id": topic, "linger.ms": 0}
    zombie = Producer(conf)
    zombie.init_transactions(30)
    zombie.begin_transaction()
    zombie.produce(topic, key=b"z", value=b"zombie")
    zombie.flush(10)
    Producer(conf).init_transactions(30)  # fences the zombie: its transaction is aborted

    def producers() -> dict[int, int]:
        with RawClient(broker.bootstrap) as raw:
            body = {"topics": [{"name": topic, "partition_indexes": [0]}]}
            answer = raw.call(ApiKey.DESCRIBE_PRODUCERS, 0, body)["topics"][0]["partitions"][0]
        return {p["producer_id"]: p["producer_epoch"] for p in answer["active_producers"]}

    fenced = producers()
    assert len(fenced) == 1  # the zombie's producer id, at the epoch of the abort that fenced it
    filler = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
    rounds = [0]

    def fillers_left() -> list[int]:
        """Push one more filler record (dirty data, a roll), then the fillers the log still holds."""
        rounds[0] += 1
        filler.produce(topic, key=b"filler", value=b"%d" % rounds[0])
        assert filler.flush(10) == 0
        values = consume_all(broker.bootstrap, topic, "read_uncommitted", idle_s=0.5)
        assert set(values) <= {b"zombie"} | {b"%d" % n for n in range(1, rounds[0] + 1)}
        return [int(v) for v in values if v != b"zombie"]

    def stamped() -> bool:
        fillers_left()
        markers = markers_on_disk(broker, topic)
        return len(markers) == 1 and markers[0][2] is not None

    wait_until(stamped, 60, "the aborted record to go and its marker to get a delete horizon")
    ((offset, control, horizon),) = markers_on_disk(broker, topic)
    assert control == ControlType.ABORT and horizon is not None
    while time.time() * 1000 <= horizon:
        time.sleep(0.1)
    first_after = rounds[0] + 1
    # An empty read (the consumer idled out on a loaded machine) is no answer: ask again.
    wait_until(
        lambda: bool(left := fillers_left()) and min(left) > first_after, 60, "a clean after the horizon"
    )
    assert markers_on_disk(broker, topic) == [(offset, ControlType.ABORT, horizon)]
    for level in ("read_committed", "read_uncommitted"):
        assert b"zombie" not in consume_all(broker.bootstrap, topic, level, idle_s=1.0)
        consumer = KafkaConsumer(
            bootstrap_servers=broker.bootstrap,
            auto_offset_reset="earliest",
            isolation_level=level,
            consumer_timeout_ms=2000,
        )
        try:
            consumer.assign([KpTopicPartition(topic, 0)])
            values = [m.value for m in consumer]
        finally:
            consumer.close()
        assert values and all(v.isdigit() for v in values)
        assert read_with_aiokafka(broker.bootstrap, topic, level) == values
    broker.kill()
    for snapshot in (broker.data_dir / "logs" / f"{topic}-0").glob("*.snapshot"):
        snapshot.unlink()
    broker.start()
    assert {pid: epoch for pid, epoch in producers().items() if pid in fenced} == fenced


def read_with_aiokafka(bootstrap: str, topic: str, isolation: str) -> list[bytes]:
    """Every value aiokafka's consumer of ``isolation`` level reads from partition 0."""
    import asyncio

    from aiokafka import AIOKafkaConsumer
    from aiokafka.structs import TopicPartition as AiTopicPartition

    async def run() -> list[bytes]:
        consumer = AIOKafkaConsumer(
            bootstrap_servers=bootstrap, auto_offset_reset="earliest", isolation_level=isolation
        )
        await consumer.start()
        try:
            consumer.assign([AiTopicPartition(topic, 0)])
            got: list[bytes] = []
            while batch := await consumer.getmany(timeout_ms=1500):
                got += [m.value for msgs in batch.values() for m in msgs if m.value is not None]
            return got
        finally:
            await consumer.stop()

    return asyncio.run(run())
