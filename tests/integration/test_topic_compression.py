"""Topic and broker ``compression.type``: the leader stores batches in the configured codec.

confluent-kafka produces lz4; the topic says gzip (or uncompressed, or zstd), so the broker
recompresses on append. The raw Fetch shows the codec of every stored batch, and confluent-kafka,
kafka-python and kcat read back the same keys, values, headers and timestamps. A broker started with
``compression.type=gzip`` applies it to topics without an override; a topic override of
``producer`` keeps the producer's codec.
"""

from __future__ import annotations

import itertools
import subprocess
import time
from collections.abc import Callable

import pytest

from strom.protocol.records.batch import iter_headers
from strom.testing import BrokerProcess
from tests.prerequisites import require_kcat

from .clients import ConfluentClient, KafkaPythonClient, Rec
from .rawclient import RawClient

_names = itertools.count()
CODEC_ID = {"uncompressed": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
N = 60
BASE_MS = int(time.time() * 1000) - 60_000  # recent: older records would be deleted by retention.ms
KCAT_FORMAT = "%k|%h|%T|%s\\n"


def records() -> list[Rec]:
    return [
        Rec(b"k%02d" % i, b"value %02d " % i + b"x" * (i * 7), (("n", b"%d" % i),), 0, BASE_MS + i)
        for i in range(N)
    ]


def stored_codecs(bootstrap: str, topic: str) -> list[int]:
    with RawClient(bootstrap) as raw:
        data = raw.fetch(topic, 0, 0)["records"] or b""
    return [h.compression for _, h in iter_headers(data)]


def produce_lz4(bootstrap: str, topic: str, configs: dict[str, str]) -> ConfluentClient:
    client = ConfluentClient(bootstrap)
    client.create_topic(topic, 1, configs)
    produced = client.produce(topic, records(), compression="lz4")
    assert [p.offset for p in produced] == list(range(N))
    return client


def strip(recs: list[Rec]) -> list[tuple[object, ...]]:
    return [(r.key, r.value, r.headers, r.timestamp) for r in recs]


@pytest.mark.parametrize("codec", ["gzip", "uncompressed", "zstd", "snappy"])
def test_topic_codec_is_applied_on_append(broker: BrokerProcess, codec: str) -> None:
    topic = f"recompress-{codec}-{next(_names)}"
    confluent = produce_lz4(broker.bootstrap, topic, {"compression.type": codec})
    codecs = stored_codecs(broker.bootstrap, topic)
    assert codecs and set(codecs) == {CODEC_ID[codec]}
    assert strip(confluent.consume(topic, 0, 0, N)) == strip(records())
    kafka_python = KafkaPythonClient(broker.bootstrap)
    try:
        assert strip(kafka_python.consume(topic, 0, 0, N)) == strip(records())
    finally:
        kafka_python.close()


@pytest.mark.kcat
def test_kcat_reads_a_recompressed_topic(broker: BrokerProcess) -> None:
    require_kcat()
    for codec in ("gzip", "uncompressed", "snappy"):
        topic = f"recompress-kcat-{codec}-{next(_names)}"
        produce_lz4(broker.bootstrap, topic, {"compression.type": codec})
        assert set(stored_codecs(broker.bootstrap, topic)) == {CODEC_ID[codec]}
        done = subprocess.run(
            ["kcat", "-C", "-b", broker.bootstrap, "-t", topic, "-o", "beginning", "-e", "-f", KCAT_FORMAT],
            capture_output=True,
            timeout=60,
            check=True,
        )
        out = done.stdout
        expected = b"".join(
            b"%s|n=%s|%d|%s\n" % (r.key, r.headers[0][1], r.timestamp, r.value)  # type: ignore[misc]
            for r in records()
        )
        assert out == expected, done.stderr


def test_broker_default_compression_type(strom_broker_factory: Callable[..., BrokerProcess]) -> None:
    broker = strom_broker_factory(**{"compression.type": "gzip"})
    produce_lz4(broker.bootstrap, "by-default", {})
    assert set(stored_codecs(broker.bootstrap, "by-default")) == {CODEC_ID["gzip"]}
    confluent = produce_lz4(broker.bootstrap, "as-produced", {"compression.type": "producer"})
    assert set(stored_codecs(broker.bootstrap, "as-produced")) == {CODEC_ID["lz4"]}
    assert strip(confluent.consume("by-default", 0, 0, N)) == strip(records())
