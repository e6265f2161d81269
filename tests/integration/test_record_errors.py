"""KIP-467: a compacted topic refuses keyless records by name (Produce v8 ``record_errors``).

Kafka refuses the whole partition payload (INVALID_RECORD, nothing appended) and lists each keyless
record by its index in its batch. What librdkafka (confluent-kafka) then does, read from its
``rdkafka_msgbatch_handle_Produce_result_record_errors`` and observed here: the named records fail
with INVALID_RECORD (librdkafka keeps the broker's message as the message's errstr, which the Python
binding does not expose); every other record of the same batch fails with the
local error ``_INVALID_DIFFERENT_RECORD`` ("an invalid record in the same batch caused the failure of
this message too") and is *not* retried by the client; its changelog (v2.4.0, KIP-467) leaves
re-sending them to the application. An application that does so ends with exactly the keyless
records failed and every keyed record stored.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import KafkaError, Producer

from strom.protocol.errors import ErrorCode
from strom.protocol.records.builder import build_batch, decode_batches
from strom.testing import BrokerProcess

from .rawclient import RawClient

_names = itertools.count()
NO_KEY = "Compacted topic cannot accept message without key in topic partition {}-0."


@pytest.fixture
def raw(broker: BrokerProcess) -> Iterator[RawClient]:
    with RawClient(broker.bootstrap) as client:
        yield client


def compacted_topic(raw: RawClient) -> str:
    name = f"kip467-{next(_names)}"
    assert raw.create_topic(name, 1, {"cleanup.policy": "compact"}) == 0
    return name


def stored(raw: RawClient, topic: str) -> list[tuple[bytes | None, bytes | None]]:
    records = raw.fetch(topic, 0, 0)["records"] or b""
    return [(r.key, r.value) for b in decode_batches(records) for r in b.records]


def test_produce_v8_names_each_keyless_record(raw: RawClient) -> None:
    topic = compacted_topic(raw)
    keys = [b"a", None, b"c", None, b"e"]
    payload = build_batch([(k, b"v%d" % i, (), 1_000 + i) for i, k in enumerate(keys)])
    resp = raw.produce(topic, 0, payload, version=8)
    assert resp["error_code"] == ErrorCode.INVALID_RECORD
    assert [(e["batch_index"], e["batch_index_error_message"]) for e in resp["record_errors"]] == [
        (1, NO_KEY.format(topic)),
        (3, NO_KEY.format(topic)),
    ]
    assert "2 record(s)" in resp["error_message"]
    assert stored(raw, topic) == []  # nothing of a refused payload is appended
    assert raw.produce(topic, 0, build_batch([(b"k", b"ok", (), 1)]), version=8)["error_code"] == 0
    assert stored(raw, topic) == [(b"k", b"ok")]


def test_librdkafka_fails_exactly_the_keyless_records(raw: RawClient, broker: BrokerProcess) -> None:
    topic = compacted_topic(raw)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 200, "retries": 0})
    reports: list[tuple[int, Any]] = []  # (record number, error or None)

    def send(i: int) -> None:
        key = None if i % 10 == 3 else b"k%03d" % i
        producer.produce(
            topic, key=key, value=b"v%03d" % i, on_delivery=lambda err, _m, i=i: reports.append((i, err))
        )

    for i in range(100):
        send(i)
    assert producer.flush(30) == 0
    first_round = dict(reports)
    invalid = {i for i, e in first_round.items() if e is not None and e.code() == KafkaError.INVALID_RECORD}
    assert invalid == {i for i in range(100) if i % 10 == 3}
    # confluent-kafka's KafkaError.str() is the code's text, not librdkafka's per-message errstr (the
    # broker's batch_index_error_message); the raw test above checks those messages
    innocent = {
        i
        for i, e in first_round.items()
        if e is not None and e.code() == KafkaError._INVALID_DIFFERENT_RECORD
    }
    delivered = {i for i, e in first_round.items() if e is None}
    # a keyed record fails only with a batch that held a keyless one, and is not retried by librdkafka
    assert innocent | delivered == set(range(100)) - invalid and innocent
    assert sorted(stored(raw, topic)) == [(b"k%03d" % i, b"v%03d" % i) for i in sorted(delivered)]

    reports.clear()
    for i in sorted(innocent):  # what librdkafka's changelog asks of the application
        send(i)
    assert producer.flush(30) == 0
    assert all(err is None for _, err in reports)
    keyed = sorted(set(range(100)) - invalid)
    assert len(keyed) == 90
    assert sorted(stored(raw, topic)) == [(b"k%03d" % i, b"v%03d" % i) for i in keyed]
