"""The single-node scenario suite, written once and run with confluent-kafka, kafka-python and aiokafka.

Each test drives a real `strom` broker process over TCP with a real client library: topics with several
partitions; keyed, keyless, null-value and headered records with every compression codec, read back byte
for byte with offsets and timestamps; ListOffsets by timestamp; DeleteRecords; a restart and a kill -9
in the middle of producing, after which every acknowledged record is still there exactly once.
"""

from __future__ import annotations

import threading
import time

import pytest

from strom.testing import BrokerProcess

from .clients import COMPRESSIONS, ConfluentClient, Rec, make_client

CLIENT_NAMES = ["confluent-kafka", "kafka-python", "aiokafka"]
# Each library's own bound on a record's delivery, lowered from its default (librdkafka 300 s, kafka-python
# 120 s, aiokafka 40 s) to 10 s, so that a produce() against a killed broker fails soon: the kill -9 test
# checks what was acknowledged before, not how long a client insists.
FAIL_WITHIN_10_S: dict[str, dict[str, object]] = {
    "confluent-kafka": {"message.timeout.ms": 10_000},
    "kafka-python": {"request_timeout_ms": 9_000, "delivery_timeout_ms": 10_000, "max_block_ms": 10_000},
    "aiokafka": {"request_timeout_ms": 10_000},
}
PARTITIONS = 3
# Recent timestamps: retention (7 days by default) would rightly delete older ones.
BASE_TS = (int(time.time()) - 3600) * 1000


def sample_records(partition: int, n: int = 40, tag: str = "") -> list[Rec]:
    """Keyed, keyless, null-value, headered and large records, with distinct CreateTime timestamps."""
    out = []
    for i in range(n):
        kind = i % 5
        key = None if kind == 1 else f"key-{tag}-{i}".encode()
        value = None if kind == 2 else (f"value-{tag}-{i}-".encode() * (200 if kind == 4 else 1))
        headers: tuple[tuple[str, bytes | None], ...] = ()
        if kind == 3:
            headers = (("h1", b"v1"), ("trace", f"{i}".encode()), ("empty", b""))
        out.append(Rec(key, value, headers, partition, BASE_TS + i * 1000))
    return out


def assert_same(expected: list[Rec], got: list[Rec], first_offset: int) -> None:
    assert len(got) == len(expected)
    for i, (e, g) in enumerate(zip(expected, got, strict=True)):
        assert g.offset == first_offset + i
        assert g.key == e.key, i
        assert g.value == e.value, i
        assert g.timestamp == e.timestamp, i
        assert [(k, v or b"") for k, v in g.headers] == [(k, v or b"") for k, v in e.headers], i


@pytest.mark.parametrize("client_name", CLIENT_NAMES)
@pytest.mark.parametrize("compression", COMPRESSIONS)
def test_produce_consume_byte_exact(
    broker: BrokerProcess, topic_name: str, client_name: str, compression: str
) -> None:
    client = make_client(client_name, broker.bootstrap)
    client.create_topic(topic_name, PARTITIONS)
    expected = {p: sample_records(p, tag=f"{compression}{p}") for p in range(PARTITIONS)}
    produced = client.produce(topic_name, [r for p in range(PARTITIONS) for r in expected[p]], compression)
    assert len(produced) == PARTITIONS * 40
    for p in range(PARTITIONS):
        offsets = sorted(x.offset for x in produced if x.partition == p)
        assert offsets == list(range(40))
        assert_same(expected[p], client.consume(topic_name, p, 0, 40), 0)
        # Read from the middle of a (possibly compressed) batch: the client skips to its offset.
        assert_same(expected[p][17:], client.consume(topic_name, p, 17, 23), 17)
    # Another library reads what this one wrote, byte for byte.
    other = ConfluentClient(broker.bootstrap)
    assert_same(expected[1], other.consume(topic_name, 1, 0, 40), 0)


@pytest.mark.parametrize("client_name", CLIENT_NAMES)
def test_list_offsets_by_timestamp(broker: BrokerProcess, topic_name: str, client_name: str) -> None:
    client = make_client(client_name, broker.bootstrap)
    client.create_topic(topic_name, 1)
    # Three separate produce calls make three batches, so the time index has real work to do.
    for chunk in range(3):
        recs = [Rec(b"k", f"{chunk}-{i}".encode(), (), 0, BASE_TS + chunk * 60_000 + i) for i in range(10)]
        client.produce(topic_name, recs)
    assert client.offset_for_time(topic_name, 0, BASE_TS) == 0
    assert client.offset_for_time(topic_name, 0, BASE_TS + 60_000) == 10
    assert client.offset_for_time(topic_name, 0, BASE_TS + 60_005) == 15
    assert client.offset_for_time(topic_name, 0, BASE_TS + 120_000) == 20
    assert client.offset_for_time(topic_name, 0, BASE_TS + 10**9) == -1


@pytest.mark.parametrize("client_name", CLIENT_NAMES)
def test_delete_records(broker: BrokerProcess, topic_name: str, client_name: str) -> None:
    client = make_client(client_name, broker.bootstrap)
    client.create_topic(topic_name, 1)
    client.produce(topic_name, sample_records(0, 30))
    assert client.delete_records(topic_name, 0, 12) == 12
    got = ConfluentClient(broker.bootstrap).consume(topic_name, 0, 12, 18)
    assert [r.offset for r in got] == list(range(12, 30))


@pytest.mark.parametrize("client_name", CLIENT_NAMES)
def test_restart_keeps_everything(broker: BrokerProcess, topic_name: str, client_name: str) -> None:
    client = make_client(client_name, broker.bootstrap)
    client.create_topic(topic_name, PARTITIONS)
    expected = {p: sample_records(p, 25, tag="restart") for p in range(PARTITIONS)}
    client.produce(topic_name, [r for recs in expected.values() for r in recs], "lz4")
    broker.restart()
    for p in range(PARTITIONS):
        assert_same(expected[p], client.consume(topic_name, p, 0, 25), 0)


@pytest.mark.slow
@pytest.mark.parametrize("client_name", CLIENT_NAMES)
def test_kill_9_mid_produce_loses_nothing_acknowledged(
    broker: BrokerProcess, topic_name: str, client_name: str
) -> None:
    client = make_client(client_name, broker.bootstrap, FAIL_WITHIN_10_S[client_name])
    client.create_topic(topic_name, 2)
    acked: list[tuple[int, int, bytes]] = []
    stop = threading.Event()

    def produce_until_failure() -> None:
        n = 0
        while not stop.is_set():
            batch = [Rec(None, f"v{n + i}".encode(), (), (n // 50) % 2, None) for i in range(50)]
            try:
                results = client.produce(topic_name, batch)
            except Exception:  # the broker died under us: what was acknowledged is what counts
                return
            acked.extend((r.partition, r.offset, b.value or b"") for r, b in zip(results, batch, strict=True))
            n += 50

    worker = threading.Thread(target=produce_until_failure, daemon=True)
    worker.start()
    deadline = time.monotonic() + 30
    while len(acked) < 2000 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(acked) >= 2000, "producer made no progress"
    broker.kill()
    stop.set()
    # The client retries its in-flight batch against the dead broker until its own delivery timeout
    # (FAIL_WITHIN_10_S) before produce() raises; bounded all the same.
    worker.join(60)
    assert not worker.is_alive()
    broker.start()
    reader = ConfluentClient(broker.bootstrap)
    for p in (0, 1):
        mine = sorted((off, val) for part, off, val in acked if part == p)
        if not mine:
            continue
        got = reader.consume(topic_name, p, 0, mine[-1][0] + 1, timeout_s=30)
        by_offset = {r.offset: r.value for r in got}
        for off, val in mine:
            assert by_offset.get(off) == val, (p, off)
        values = [r.value for r in got]
        assert len(values) == len(set(values)), "a record appears twice"


def test_retention_deletes_old_segments(broker: BrokerProcess, topic_name: str) -> None:
    client = ConfluentClient(broker.bootstrap)
    client.create_topic(topic_name, 1, {"segment.bytes": "2048", "retention.ms": "1000"})
    old = int(time.time() * 1000) - 60_000
    for _ in range(20):  # one batch per request: a batch larger than segment.bytes is refused
        client.produce(topic_name, [Rec(None, b"x" * 500, (), 0, old)])
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "unused"})
    try:
        deadline = time.monotonic() + 20
        low = 0
        while time.monotonic() < deadline:
            low, high = consumer.get_watermark_offsets(TopicPartition(topic_name, 0), timeout=10)
            if low > 0:
                break
            time.sleep(0.5)
        assert low > 0 and high == 20
    finally:
        consumer.close()


@pytest.mark.parametrize("client_name", ["kafka-python", "confluent-kafka"])
def test_keyed_records_land_where_java_puts_them(
    broker: BrokerProcess, topic_name: str, client_name: str
) -> None:
    from kafka.partitioner.default import murmur2

    client = make_client(client_name, broker.bootstrap)
    client.create_topic(topic_name, 6)
    keys = [f"user-{i}".encode() for i in range(60)]
    produced = client.produce(topic_name, [Rec(k, b"v", (), None, None) for k in keys])
    for key, result in zip(keys, produced, strict=True):
        assert result.partition == (murmur2(key) & 0x7FFFFFFF) % 6, key
