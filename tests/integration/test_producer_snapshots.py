"""Producer-state snapshots with a real idempotent producer, across a clean restart and a kill -9.

confluent-kafka (librdkafka, ``enable.idempotence``) produces into a topic with small segments, so the
broker rolls and writes ``<offset>.snapshot`` files. After each restart the broker's log says which
snapshot it loaded and how many batch headers it replayed after it; a retry of the producer's last
batch (its exact bytes, as librdkafka would resend them) must be acknowledged with the original
offsets and not appended, a sequence gap must be refused (so the state really was restored, not
started afresh), and the same producer instance must carry on without errors. At the end every
record is in the log exactly once, in order.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from pathlib import Path

from strom.protocol.errors import ErrorCode
from strom.protocol.records.batch import BatchHeader, iter_headers
from strom.protocol.records.builder import decode_batches
from strom.testing import BrokerProcess

from .rawclient import RawClient, as_retry, batch

TOPIC = "snapshots"
_LOADED = re.compile(
    rf"{TOPIC}-0: producer state from (?:snapshot (\d+)|no snapshot) and (\d+) batch headers"
)


def _stored(raw: RawClient) -> list[tuple[BatchHeader, bytes]]:
    """Every stored batch of the partition with its bytes."""
    out: list[tuple[BatchHeader, bytes]] = []
    offset = 0
    while True:
        records = raw.fetch(TOPIC, 0, offset)["records"] or b""
        got = [(h, bytes(records[p : p + h.size])) for p, h in iter_headers(records)]
        if not got:
            return out
        out += got
        offset = got[-1][0].next_offset


def _load_line(log_path: Path, since: int) -> tuple[int | None, int]:
    """(snapshot offset or None, headers replayed) from the broker log written after byte ``since``."""
    text = log_path.read_text()[since:]
    found = _LOADED.findall(text)
    assert len(found) == 1, text[-3000:]
    snapshot, headers = found[0]
    return (int(snapshot) if snapshot else None), int(headers)


def _retry_last_batch(raw: RawClient) -> None:
    """Resend the producer's last batch as a client retry would: same producer id, epoch, sequence."""
    stored = _stored(raw)
    header, data = stored[-1]
    resp = raw.produce(TOPIC, 0, as_retry(data))
    assert (resp["error_code"], resp["base_offset"]) == (0, header.base_offset)
    assert len(_stored(raw)) == len(stored)  # acknowledged, not appended
    gap = batch(
        [b"gap"],
        producer_id=header.producer_id,
        producer_epoch=header.producer_epoch,
        base_sequence=header.last_sequence + 2,
    )
    assert raw.produce(TOPIC, 0, gap)["error_code"] == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER


def test_idempotent_producer_across_restart_and_kill_9(
    strom_broker_factory: Callable[..., BrokerProcess],
) -> None:
    from confluent_kafka import Producer

    broker = strom_broker_factory()
    with RawClient(broker.bootstrap) as raw:
        assert raw.create_topic(TOPIC, 1, {"segment.bytes": "8192"}) == 0
    producer = Producer(
        {
            "bootstrap.servers": broker.bootstrap,
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": 2,
            "batch.size": 1500,
        }
    )
    errors: list[object] = []

    def send(first: int, last: int) -> None:
        for i in range(first, last):
            producer.produce(
                TOPIC, value=b"%06d" % i + b"." * 90, on_delivery=lambda e, _m: e and errors.append(e)
            )
            producer.poll(0)
        assert producer.flush(30) == 0
        assert errors == []

    send(0, 300)

    since = broker.log_path.stat().st_size
    broker.restart()  # clean: a snapshot at the log end, nothing to replay
    with RawClient(broker.bootstrap) as raw:
        stored = _stored(raw)
        assert _load_line(broker.log_path, since) == (stored[-1][0].next_offset, 0)
        assert len({h.producer_id for h, _ in stored}) == 1 and stored[0][0].producer_id >= 0
        _retry_last_batch(raw)
    send(300, 600)

    since = broker.log_path.stat().st_size
    broker.kill()  # no shutdown snapshot: the newest roll snapshot plus the headers after it
    broker.start()
    with RawClient(broker.bootstrap) as raw:
        stored = _stored(raw)
        snapshot, replayed = _load_line(broker.log_path, since)
        assert snapshot is not None and snapshot > 0
        after = [h for h, _ in stored if h.base_offset >= snapshot]
        assert replayed == len(after) < len(stored)
        _retry_last_batch(raw)
    send(600, 900)

    with RawClient(broker.bootstrap) as raw:
        values = [r.value for _, data in _stored(raw) for b in decode_batches(data) for r in b.records]
    assert [int(v[:6]) for v in values if v is not None] == list(range(900))
    producer.flush(5)


def test_producer_id_expiration_through_the_broker_config(
    strom_broker_factory: Callable[..., BrokerProcess],
) -> None:
    """producer.id.expiration.ms and its check interval, set on the broker, forget idle producers."""
    broker = strom_broker_factory(
        **{"producer.id.expiration.ms": "1500", "producer.id.expiration.check.interval.ms": "200"}
    )
    with RawClient(broker.bootstrap) as raw:
        assert raw.create_topic(TOPIC, 1) == 0
        pid, epoch = raw.init_producer_id()

        def send(seq: int) -> int:
            data = batch([b"x"], producer_id=pid, producer_epoch=epoch, base_sequence=seq)
            return int(raw.produce(TOPIC, 0, data)["error_code"])

        assert send(0) == 0
        assert send(5) == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER  # known producer: a gap is refused
        deadline = time.monotonic() + 20
        while send(5) != 0:  # once expired, the producer is new again and may start anywhere
            assert time.monotonic() < deadline, "the producer state never expired"
            time.sleep(0.3)
        assert send(6) == 0 and send(8) == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
