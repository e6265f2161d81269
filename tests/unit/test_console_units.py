"""The console's pure parts: the metric history's ring buffers, SVG charts, the message browser's bounded
scan over a real partition log, its URL parameters, and decoding through a real schema registry (Avro,
JSON Schema, Protobuf)."""

from __future__ import annotations

import asyncio
import io
import json
import struct
from pathlib import Path
from typing import Any

import fastavro
import pytest

from strom.lake.protobuf_wire import read_indexes
from strom.metrics.history import MetricHistory
from strom.protocol.records.builder import build_batch
from strom.registry.registry import SchemaRegistry, SchemaRequest
from strom.storage.config import LogConfig
from strom.storage.log import PartitionLog
from strom.web.console.charts import Line, line_chart, nice_max
from strom.web.console.decode import RecordDecoder
from strom.web.console.message_pages import BadQuery, parse_query, parse_time_ms, query_params
from strom.web.console.scan import Budget, LocalSource, Query, scan

# --- history -----------------------------------------------------------------------------------


def test_history_keeps_one_value_per_bucket_for_the_window() -> None:
    h = MetricHistory(bucket_ms=1000, buckets=5)
    for second in range(8):
        h.record(second * 1000 + 500, ("bytes_in", "t"), float(second))
    points = h.points(("bytes_in", "t"), 7_999)
    assert [p.time_ms for p in points] == [3000, 4000, 5000, 6000, 7000]
    assert [p.value for p in points] == [3.0, 4.0, 5.0, 6.0, 7.0]
    # Two buckets skipped: they read as nothing, not as the values the ring held five buckets ago.
    h.record(10_000, ("bytes_in", "t"), 10.0)
    assert [p.value for p in h.points(("bytes_in", "t"), 10_000)] == [6.0, 7.0, None, None, 10.0]
    assert h.latest(("bytes_in", "t")) == 10.0


def test_history_is_bounded_and_forgets_idle_and_gone_series() -> None:
    h = MetricHistory(bucket_ms=1000, buckets=4, max_series=2)
    h.record(0, ("bytes_in", "idle"), 0.0)  # zeros never start a series
    assert len(h) == 0
    h.record(0, ("bytes_in", "a"), 1.0)
    h.record(0, ("bytes_in", "b"), 1.0)
    h.record(0, ("bytes_in", "c"), 1.0)
    assert len(h) == 2 and h.refused == 1
    for second in range(1, 5):
        h.record(second * 1000, ("bytes_in", "a"), 0.0)  # a: zero for a whole window
        h.record(second * 1000, ("bytes_in", "b"), 2.0)
    assert h.prune(4_000) == 1 and h.keys("bytes_in") == ["b"]
    assert h.prune(4_000, keep=lambda key: key[1] != "b") == 1 and len(h) == 0


# --- charts ------------------------------------------------------------------------------------


def test_chart_draws_each_series_and_breaks_lines_at_gaps() -> None:
    h = MetricHistory(bucket_ms=1000, buckets=6)
    for second, value in ((0, 1.0), (1, 3.0), (3, 2.0), (4, 4.0), (5, 5.0)):
        h.record(second * 1000, ("lag", "g"), value)
    svg = line_chart("c", "Lag <g>", [Line("g & co", h.points(("lag", "g"), 5_000))])
    assert svg.count("<polyline") == 2  # [0,1] and [3,5]: the empty bucket 2 breaks the line
    assert 'data-points="5"' in svg and "Lag &lt;g&gt;" in svg and "g &amp; co: <b>5</b>" in svg
    assert nice_max(0) == 1 and nice_max(7) == 10 and nice_max(1200) == 2000 and nice_max(2.1) == 2.5


# --- message browser: scan ---------------------------------------------------------------------


class _Clock:
    def __call__(self) -> int:
        return 1_000_000


@pytest.fixture
def log(tmp_path: Path) -> PartitionLog:
    """100 records in batches of 10: key k<i % 7>, value v<i>, timestamps 1000 + 10 i."""
    plog = PartitionLog(str(tmp_path / "t-0"), LogConfig(), _Clock())  # type: ignore[arg-type]
    for first in range(0, 100, 10):
        records = [
            (f"k{i % 7}".encode(), f"v{i}".encode(), (), 1000 + 10 * i) for i in range(first, first + 10)
        ]
        plog.append_as_leader(build_batch(records), leader_epoch=0)
    plog.high_watermark = plog.log_end_offset
    return plog


def _scan(plog: PartitionLog, query: Query, budget: Budget | None = None) -> Any:
    budget = budget or Budget()
    return asyncio.run(scan(LocalSource(plog), query, budget))


def test_newest_first_pages_backwards(log: PartitionLog) -> None:
    first = _scan(log, Query("newest", limit=5))
    assert [r.offset for r in first.records] == [99, 98, 97, 96, 95]
    assert first.next is not None and first.next.before == 95
    second = _scan(log, first.next)
    assert [r.offset for r in second.records] == [94, 93, 92, 91, 90]


def test_from_offset_and_from_time_read_forward(log: PartitionLog) -> None:
    found = _scan(log, Query("offset", limit=3, offset=41))
    assert [(r.offset, r.value) for r in found.records] == [(41, b"v41"), (42, b"v42"), (43, b"v43")]
    assert found.next is not None and found.next.offset == 44
    by_time = _scan(log, Query("timestamp", limit=2, timestamp_ms=1000 + 10 * 57 - 5))
    assert [r.offset for r in by_time.records] == [57, 58]
    assert _scan(log, Query("timestamp", timestamp_ms=10**12)).records == []
    last = _scan(log, Query("offset", limit=50, offset=90))
    assert [r.offset for r in last.records] == list(range(90, 100)) and last.next is None


def test_key_search_is_bounded_and_continues_where_it_stopped(log: PartitionLog) -> None:
    # k3: offsets 3, 10, 17, ..., 94 (i % 7 == 3); newest first.
    everything = [i for i in range(99, -1, -1) if i % 7 == 3]
    found = _scan(log, Query("key", limit=4, key=b"k3"))
    assert [r.offset for r in found.records] == everything[:4]
    assert found.next is not None and found.next.before == everything[3]
    rest = _scan(log, found.next)
    assert [r.offset for r in rest.records] == everything[4:8]
    # A budget of 30 records: only the newest windows are looked at, and "continue" goes on below them.
    small = _scan(log, Query("key", limit=100, key=b"k3"), Budget(records=30))
    assert small.scanned <= 30 and small.next is not None
    assert [r.offset for r in small.records] == [i for i in everything if i >= small.low]
    assert all(r.offset < small.low for r in _scan(log, small.next, Budget(records=30)).records)


def test_query_parameters_round_trip() -> None:
    q = parse_query({"mode": "key", "key": "0x00ff", "n": "7", "before": "40"})
    assert (q.mode, q.key, q.limit, q.before) == ("key", b"\x00\xff", 7, 40)
    assert parse_query(query_params(q)) == q
    assert parse_query({"mode": "timestamp", "timestamp": "1970-01-01T00:00:01"}).timestamp_ms == 1000
    assert parse_time_ms("1970-01-01T01:00:00+01:00") == 0
    assert parse_query({"n": "100000"}).limit == 500
    for bad in ({"mode": "all"}, {"mode": "offset", "offset": "x"}, {"mode": "timestamp"}, {"mode": "key"}):
        with pytest.raises(BadQuery):
            parse_query(bad)


# --- decoding through the registry -------------------------------------------------------------


def _registry(*schemas: tuple[str, str, str]) -> tuple[SchemaRegistry, list[int]]:
    registry = SchemaRegistry()
    ids = []
    for subject, schema_type, text in schemas:
        write = registry.register(subject, SchemaRequest(text, schema_type))
        for key, value in write.records:
            registry.state.apply(key, value)
        ids.append(int(write.answer["id"]))
    return registry, ids


AVRO = {
    "type": "record",
    "name": "Click",
    "fields": [{"name": "user", "type": "string"}, {"name": "n", "type": "int"}],
}
PROTO = """syntax = "proto3";
package shop;
message Order { string user = 1; int32 n = 2; }
message Refund { string reason = 1; }
"""


def _framed(schema_id: int, payload: bytes) -> bytes:
    return b"\x00" + struct.pack(">I", schema_id) + payload


def test_values_decode_with_each_schema_type() -> None:
    registry, (avro_id, json_id, proto_id) = _registry(
        ("a-value", "AVRO", json.dumps(AVRO)),
        ("j-value", "JSON", json.dumps({"type": "object", "properties": {"user": {"type": "string"}}})),
        ("p-value", "PROTOBUF", PROTO),
    )
    decoder = RecordDecoder(registry)
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(AVRO), {"user": "ada", "n": 7})
    avro = decoder.show(_framed(avro_id, out.getvalue()))
    assert (avro.form, avro.schema_id, json.loads(avro.text)) == ("avro", avro_id, {"user": "ada", "n": 7})
    as_json = decoder.show(_framed(json_id, b'{"user":"bo"}'))
    assert as_json.form == "json" and json.loads(as_json.text) == {"user": "bo"}
    # Protobuf: message index [0] as the single byte 0, then user=1 "ada", n=2 7 in the wire format.
    order = decoder.show(_framed(proto_id, b"\x00" + b"\x0a\x03ada" + b"\x10\x07"))
    assert order.form == "protobuf" and json.loads(order.text) == {"user": "ada", "n": 7}
    # Message index [1] (Refund): count 1 then index 1, both zigzag varints.
    refund = decoder.show(_framed(proto_id, b"\x02\x02" + b"\x0a\x04late"))
    assert json.loads(refund.text) == {"reason": "late"}
    assert read_indexes(b"\x04\x02\x04", 0) == ([1, 2], 3)
    # Unknown ids, plain text and binary fall back to text or hex.
    assert decoder.show(_framed(999, b"zz")).text == "0x00000003e77a7a"
    assert (decoder.show(b"hello").text, decoder.show(b"\xff\x00").text) == ("hello", "0xff00")
    # UTF-8 with control characters would be invisible on the page: hex, as the key search takes it.
    assert decoder.show(b"\x01\x02").text == "0x0102"
    assert decoder.show(b"a\tb\r\nc").text == "a\tb\r\nc"
    assert decoder.show(None).form == "null"
