"""Fetch semantics of a live broker, checked exactly over raw TCP.

Long-poll (max_wait_ms / min_bytes, woken by appends through the purgatory rather than by the timeout),
byte limits (max_bytes, partition_max_bytes, at least one whole batch per KIP-74), the batch holding
the fetch offset, out-of-range offsets, every requested partition present in the answer,
read_committed without transactions (docs/protocol.md#fetch-responses), and LogAppendTime topics.
"""

from __future__ import annotations

import itertools
import struct
import threading
import time
from collections.abc import Iterator

import pytest

from strom.protocol.api import ApiKey
from strom.protocol.errors import ErrorCode
from strom.protocol.records.batch import TIMESTAMP_TYPE_BIT, iter_headers
from strom.protocol.records.builder import decode_batches
from strom.testing import BrokerProcess

from .rawclient import RawClient, batch, fetch_body

_names = itertools.count()


@pytest.fixture
def raw(broker: BrokerProcess) -> Iterator[RawClient]:
    with RawClient(broker.bootstrap) as client:
        yield client


@pytest.fixture
def other(broker: BrokerProcess) -> Iterator[RawClient]:
    """A second connection, e.g. the producer that wakes a parked fetch."""
    with RawClient(broker.bootstrap) as client:
        yield client


def new_topic(raw: RawClient, partitions: int = 1, configs: dict[str, str] | None = None) -> str:
    name = f"fetch-{next(_names)}"
    assert raw.create_topic(name, partitions, configs) == 0
    return name


def headers_of(records: bytes | None) -> list[tuple[int, int, int]]:
    """(base_offset, last_offset, size) of each whole batch in a fetch response."""
    return [(h.base_offset, h.last_offset, h.size) for _, h in iter_headers(records or b"")]


def produce_later(client: RawClient, topic: str, partition: int, delay_s: float) -> threading.Thread:
    def run() -> None:
        time.sleep(delay_s)
        assert client.produce(topic, partition, batch([b"wake-up"]))["error_code"] == 0

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


# -- long-poll ---------------------------------------------------------------------------------------


def test_long_poll_is_woken_by_an_append(raw: RawClient, other: RawClient) -> None:
    topic = new_topic(raw)
    started = time.monotonic()
    thread = produce_later(other, topic, 0, 0.5)
    part = raw.fetch(topic, 0, 0, max_wait_ms=5000, min_bytes=1, timeout_s=10)
    elapsed = time.monotonic() - started
    thread.join(5)
    assert part["error_code"] == 0
    assert [r.value for b in decode_batches(part["records"]) for r in b.records] == [b"wake-up"]
    assert 0.4 <= elapsed < 1.5, f"answered after {elapsed:.2f}s: not woken by the append"


def test_long_poll_on_several_partitions_is_woken_by_any(raw: RawClient, other: RawClient) -> None:
    topic = new_topic(raw, partitions=3)
    body = fetch_body([(topic, p, 0, 1 << 20) for p in range(3)], max_wait_ms=5000, min_bytes=1)
    started = time.monotonic()
    thread = produce_later(other, topic, 2, 0.3)
    resp = raw.call(ApiKey.FETCH, 11, body, timeout_s=10)
    elapsed = time.monotonic() - started
    thread.join(5)
    parts = resp["responses"][0]["partitions"]
    assert [p["partition_index"] for p in parts] == [0, 1, 2]
    assert [p["high_watermark"] for p in parts] == [0, 0, 1]
    assert elapsed < 1.5


def test_long_poll_times_out_after_max_wait(raw: RawClient) -> None:
    topic = new_topic(raw)
    started = time.monotonic()
    part = raw.fetch(topic, 0, 0, max_wait_ms=1000, min_bytes=1, timeout_s=10)
    elapsed = time.monotonic() - started
    assert part["error_code"] == 0 and not part["records"]
    assert part["high_watermark"] == 0
    assert 0.9 <= elapsed < 2.5, f"answered after {elapsed:.2f}s instead of ~max_wait_ms"


def test_min_bytes_not_reached_returns_what_there_is_at_max_wait(raw: RawClient, other: RawClient) -> None:
    topic = new_topic(raw)
    assert other.produce(topic, 0, batch([b"small"]))["error_code"] == 0
    started = time.monotonic()
    part = raw.fetch(topic, 0, 0, max_wait_ms=800, min_bytes=100_000, timeout_s=10)
    elapsed = time.monotonic() - started
    assert [r.value for b in decode_batches(part["records"]) for r in b.records] == [b"small"]
    assert 0.7 <= elapsed < 2.5
    # data already there and min_bytes met: no waiting at all
    started = time.monotonic()
    part = raw.fetch(topic, 0, 0, max_wait_ms=5000, min_bytes=1, timeout_s=10)
    assert part["records"] and time.monotonic() - started < 0.5


def test_parked_fetch_does_not_block_other_connections(raw: RawClient, other: RawClient) -> None:
    """A long-poll holds back later requests on its own connection only, which are answered in order."""
    topic = new_topic(raw)
    fetch_id = raw.send(ApiKey.FETCH, 11, fetch_body([(topic, 0, 0, 1 << 20)], max_wait_ms=1500, min_bytes=1))
    meta_id = raw.send(ApiKey.METADATA, 1, {"topics": None})
    started = time.monotonic()
    assert other.call(ApiKey.METADATA, 1, {"topics": None})["brokers"]
    assert time.monotonic() - started < 0.5
    raw.recv(ApiKey.FETCH, 11, fetch_id, timeout_s=10)  # asserts the correlation order
    assert time.monotonic() - started >= 1.2
    raw.recv(ApiKey.METADATA, 1, meta_id)


def test_deleting_the_topic_wakes_a_parked_fetch(raw: RawClient, other: RawClient) -> None:
    topic = new_topic(raw)

    def delete_later() -> None:
        time.sleep(0.3)
        other.call(ApiKey.DELETE_TOPICS, 3, {"topic_names": [topic], "timeout_ms": 5000})

    thread = threading.Thread(target=delete_later, daemon=True)
    thread.start()
    started = time.monotonic()
    part = raw.fetch(topic, 0, 0, max_wait_ms=5000, min_bytes=1, timeout_s=10)
    thread.join(5)
    assert part["error_code"] in (0, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
    assert time.monotonic() - started < 1.5


# -- byte limits -------------------------------------------------------------------------------------


def _five_batches(raw: RawClient, topic: str, partition: int = 0) -> list[tuple[int, int, int]]:
    for i in range(5):
        assert raw.produce(topic, partition, batch([b"%d" % i * 300, b"x" * 300]))["error_code"] == 0
    layout = headers_of(raw.fetch(topic, partition, 0)["records"])
    assert [(b, last) for b, last, _ in layout] == [(0, 1), (2, 3), (4, 5), (6, 7), (8, 9)]
    return layout


def test_partition_max_bytes(raw: RawClient) -> None:
    topic = new_topic(raw)
    layout = _five_batches(raw, topic)
    size = layout[0][2]
    got = headers_of(raw.fetch(topic, 0, 0, partition_max_bytes=2 * size + size // 2)["records"])
    assert got == layout[:2]  # whole batches within the limit
    # KIP-74: a batch larger than the limit still comes back whole, so the consumer progresses
    records = raw.fetch(topic, 0, 4, partition_max_bytes=10)["records"]
    assert headers_of(records) == [layout[2]]
    assert len(records) == size


def test_max_bytes_across_partitions(raw: RawClient) -> None:
    topic = new_topic(raw, partitions=2)
    layout0 = _five_batches(raw, topic, 0)
    layout1 = _five_batches(raw, topic, 1)
    size = layout0[0][2]
    both = [(topic, 0, 0, 1 << 20), (topic, 1, 0, 1 << 20)]
    resp = raw.call(ApiKey.FETCH, 11, fetch_body(both, max_bytes=3 * size + 10))
    p0, p1 = resp["responses"][0]["partitions"]
    assert headers_of(p0["records"]) == layout0[:3]
    assert headers_of(p1["records"]) == []  # the response limit is used up, but the partition is listed
    assert (p1["error_code"], p1["high_watermark"]) == (0, 10)
    resp = raw.call(ApiKey.FETCH, 11, fetch_body(both, max_bytes=1))
    p0, p1 = resp["responses"][0]["partitions"]
    assert headers_of(p0["records"]) == layout0[:1]  # the first partition with data: one whole batch
    assert headers_of(p1["records"]) == []
    resp = raw.call(
        ApiKey.FETCH, 11, fetch_body([(topic, 0, 10, 1 << 20), (topic, 1, 0, 1 << 20)], max_bytes=1)
    )
    p0, p1 = resp["responses"][0]["partitions"]
    assert headers_of(p0["records"]) == []
    assert headers_of(p1["records"]) == layout1[:1]  # the first partition *with data* gets its batch


# -- offsets -----------------------------------------------------------------------------------------


def test_fetch_offset_inside_a_batch_returns_the_whole_batch(raw: RawClient) -> None:
    topic = new_topic(raw)
    assert raw.produce(topic, 0, batch([b"a", b"b", b"c"]))["base_offset"] == 0
    assert raw.produce(topic, 0, batch([b"d", b"e"]))["base_offset"] == 3
    for offset, first_batch in ((1, 0), (2, 0), (3, 3), (4, 3)):
        records = raw.fetch(topic, 0, offset)["records"]
        assert struct.unpack_from(">q", records)[0] == first_batch
        (first, *_rest) = decode_batches(records)
        assert first.base_offset == first_batch
    decoded = decode_batches(raw.fetch(topic, 0, 4)["records"])
    assert [(r.offset, r.value) for r in decoded[0].records] == [(3, b"d"), (4, b"e")]


def test_offsets_out_of_range(raw: RawClient) -> None:
    topic = new_topic(raw)
    for i in range(3):
        raw.produce(topic, 0, batch([b"%d" % i]))
    at_end = raw.fetch(topic, 0, 3)
    assert (at_end["error_code"], at_end["high_watermark"]) == (0, 3)
    assert not at_end["records"]
    for offset in (4, 1000, -1):
        part = raw.fetch(topic, 0, offset)
        assert part["error_code"] == ErrorCode.OFFSET_OUT_OF_RANGE
        assert not part["records"]
    body = {
        "topics": [{"name": topic, "partitions": [{"partition_index": 0, "offset": 2}]}],
        "timeout_ms": 5000,
    }
    assert raw.call(ApiKey.DELETE_RECORDS, 1, body)["topics"][0]["partitions"][0]["error_code"] == 0
    below = raw.fetch(topic, 0, 1)
    assert below["error_code"] == ErrorCode.OFFSET_OUT_OF_RANGE
    assert raw.fetch(topic, 0, 2)["log_start_offset"] == 2


def test_every_requested_partition_is_answered(raw: RawClient) -> None:
    topic = new_topic(raw, partitions=2)
    raw.produce(topic, 1, batch([b"x"]))
    missing = f"{topic}-missing"
    wanted = [(topic, 0, 0, 1 << 20), (topic, 1, 0, 1 << 20), (topic, 7, 0, 1 << 20), (topic, 1, 99, 1 << 20)]
    wanted.append((missing, 0, 0, 1 << 20))
    resp = raw.call(ApiKey.FETCH, 11, fetch_body(wanted))
    answered = [
        (t["topic"], p["partition_index"], p["error_code"])
        for t in resp["responses"]
        for p in t["partitions"]
    ]
    assert answered == [
        (topic, 0, 0),
        (topic, 1, 0),
        (topic, 7, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
        (topic, 1, ErrorCode.OFFSET_OUT_OF_RANGE),
        (missing, 0, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
    ]


def test_an_error_partition_does_not_cut_the_long_poll_short_for_data(raw: RawClient) -> None:
    """With data available, partitions in error still come back alongside it in one answer."""
    topic = new_topic(raw)
    raw.produce(topic, 0, batch([b"x"]))
    body = fetch_body([(topic, 0, 0, 1 << 20), (topic, 9, 0, 1 << 20)], max_wait_ms=2000, min_bytes=1)
    started = time.monotonic()
    parts = raw.call(ApiKey.FETCH, 11, body)["responses"][0]["partitions"]
    assert time.monotonic() - started < 1.0
    assert [p["error_code"] for p in parts] == [0, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION]
    assert parts[0]["records"]


@pytest.mark.parametrize("version", [4, 5, 11])
def test_read_committed_without_transactions(raw: RawClient, version: int) -> None:
    topic = new_topic(raw)
    for i in range(3):
        raw.produce(topic, 0, batch([b"a%d" % i, b"b%d" % i]))
    part = raw.fetch(topic, 0, 0, version=version, isolation_level=1)
    assert part["error_code"] == 0
    assert part["last_stable_offset"] == part["high_watermark"] == 6
    assert part["aborted_transactions"] in (None, [])
    assert len(decode_batches(part["records"])) == 3
    uncommitted = raw.fetch(topic, 0, 0, version=version, isolation_level=0)
    assert uncommitted["records"] == part["records"]


# -- LogAppendTime -----------------------------------------------------------------------------------


def test_log_append_time_topic(raw: RawClient, broker: BrokerProcess) -> None:
    topic = new_topic(raw, configs={"message.timestamp.type": "LogAppendTime"})
    create_time = 1_000_000  # 1970: obviously not the broker's clock
    before = int(time.time() * 1000)
    resp = raw.produce(topic, 0, batch([b"a", b"b"], timestamp_ms=create_time))
    after = int(time.time() * 1000)
    assert resp["error_code"] == 0
    append_time = resp["log_append_time_ms"]
    assert before - 50 <= append_time <= after + 50
    (stored,) = decode_batches(raw.fetch(topic, 0, 0)["records"])  # the CRC was recomputed
    assert stored.attributes & TIMESTAMP_TYPE_BIT
    assert stored.max_timestamp == append_time
    # the time index answers with the append time
    found = raw.list_offset(topic, 0, append_time - 10)
    assert (found["offset"], found["timestamp"]) == (0, append_time)

    from confluent_kafka import TIMESTAMP_LOG_APPEND_TIME, Consumer, TopicPartition

    consumer = Consumer(
        {"bootstrap.servers": broker.bootstrap, "group.id": f"lat-{topic}", "enable.auto.commit": False}
    )
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        seen = []
        deadline = time.monotonic() + 15
        while len(seen) < 2 and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                seen.append((msg.value(), msg.timestamp()))
    finally:
        consumer.close()
    assert seen == [
        (b"a", (TIMESTAMP_LOG_APPEND_TIME, append_time)),
        (b"b", (TIMESTAMP_LOG_APPEND_TIME, append_time)),
    ]


def test_log_append_time_with_kafka_python(raw: RawClient, broker: BrokerProcess) -> None:
    from kafka import KafkaConsumer, TopicPartition

    topic = new_topic(raw, configs={"message.timestamp.type": "LogAppendTime"})
    append_time = raw.produce(topic, 0, batch([b"only"], timestamp_ms=5))["log_append_time_ms"]
    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, consumer_timeout_ms=10_000)
    try:
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        consumer.seek(tp, 0)
        msg = next(iter(consumer))
    finally:
        consumer.close()
    assert (msg.value, msg.timestamp, msg.timestamp_type) == (b"only", append_time, 1)
