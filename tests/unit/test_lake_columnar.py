"""The translation worker's columnar path against the per-record path it stands in for: the stored
batches' records as columns (the same records as `committed_records`, or None for what the columns do
not carry), Avro values decoded together (the same values as fastavro's, or None for any value that
does not decode from exactly its own bytes), and a whole round on a real SQL catalog (the same table,
or nothing written and the per-record path's dead letters)."""

from __future__ import annotations

import io
import json
import struct
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from fastavro import parse_schema, schemaless_reader, schemaless_writer
from tests.unit.test_lake_tables import lake_tables

from strom.avro.native_block import BLOCK_VALUES, NativeDecodeError, block_schema, decode
from strom.lake.columnar import columnar_round
from strom.lake.config_defs import catalog_settings
from strom.lake.record_columns import committed_columns
from strom.lake.records import committed_records
from strom.lake.round import Chunk, read_records, write_records
from strom.lake.tables import TableRef
from strom.lake.translate import VALUE_SCHEMA_ID_PREFIX, SchemaCache
from strom.lake.worker import RoundRequest, run_round_request, set_up
from strom.protocol.records.builder import build_batch
from strom.protocol.records.compression import CompressionType
from strom.protocol.records.control import ControlType, EndTxnMarker, build_marker_batch
from strom.protocol.records.record import RecordDecodeError
from strom.storage.transaction_index import AbortedTxn

EVENT = {
    "type": "record",
    "name": "Event",
    "fields": [
        {"name": "body", "type": "string"},
        {"name": "raw", "type": {"type": "bytes"}},
        {"name": "n", "type": "int"},
        {"name": "big", "type": "long"},
        {"name": "ratio", "type": "float"},
        {"name": "score", "type": "double"},
    ],
}
EVENT_VALUES: list[dict[str, Any]] = [
    {"body": "", "raw": b"", "n": 0, "big": 0, "ratio": 0.0, "score": 0.0},
    {"body": "é" * 70, "raw": bytes(200), "n": -(2**31), "big": 2**63 - 1, "ratio": 1.5, "score": -2.25},
    {"body": "x" * 9000, "raw": b"\xff", "n": 2**31 - 1, "big": -(2**63), "ratio": -0.5, "score": 1e300},
    {"body": "ok", "raw": b"ab", "n": 63, "big": -64, "ratio": 3.0, "score": 0.1},
]

# The shape a compatible evolution adds: optional fields (null first), and booleans.
OPTIONAL = {
    "type": "record",
    "name": "Visit",
    "namespace": "t",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "seen", "type": "boolean"},
        {"name": "note", "type": ["null", "string"], "default": None},
        {"name": "count", "type": ["null", "int"], "default": None},
        {"name": "paid", "type": ["null", "boolean"], "default": None},
        {"name": "score", "type": ["null", {"type": "double"}], "default": None},
    ],
}
OPTIONAL_VALUES: list[dict[str, Any]] = [
    {"id": 0, "seen": False, "note": None, "count": None, "paid": None, "score": None},
    {"id": -(2**63), "seen": True, "note": "é" * 90, "count": -(2**31), "paid": False, "score": -2.5},
    {"id": 2**63 - 1, "seen": True, "note": "", "count": 2**31 - 1, "paid": True, "score": None},
    {"id": 64, "seen": False, "note": None, "count": 0, "paid": None, "score": 1e300},
]
# Bytes polars reads as a value where fastavro refuses them or reads another: a union branch index 2
# (fastavro refuses it) and a boolean byte 2 (fastavro reads true, polars false).
BAD_UNION_INDEX = b"\x02\x00" + b"\x00" + b"\x04\x02" + b"\x00\x00"  # id 1, count's index 2
BAD_BOOLEAN = b"\x02\x02" + b"\x00\x00\x00\x00"


# An int's varint past 32 bits: fastavro reads it whole and the table's int column refuses it.
def avro(schema: dict[str, Any], value: dict[str, Any]) -> bytes:
    out = io.BytesIO()
    schemaless_writer(out, parse_schema(schema), value)
    return out.getvalue()


def wire(schema_id: int, body: bytes) -> bytes:
    return struct.pack(">bI", 0, schema_id) + body


def int_out_of_range() -> bytes:
    """An EVENT value whose int's varint goes past 32 bits (fastavro keeps the low 32 bits)."""
    zero = avro(EVENT, EVENT_VALUES[0])
    return zero[:2] + b"\xff\xff\xff\xff\x0f" + zero[3:]


def _batch(base: int, values: list[bytes | None], keys: bool = True, **kwargs: Any) -> bytes:
    rows = [
        (f"k{base + i}".encode() if keys and i % 3 else None, v, (), 1_700_000_000_000 + 7 * i)
        for i, v in enumerate(values)
    ]
    return build_batch(rows, base_offset=base, **kwargs)


def _as_records(columns: Any) -> list[tuple[int, int, bytes | None, bytes | None]]:
    def field(start: int, length: int) -> bytes | None:
        return None if length < 0 else columns.raw[start : start + length]

    return [
        (o, t, field(ks, kn), field(vs, vn))
        for o, t, ks, kn, vs, vn in zip(
            columns.offsets.tolist(),
            columns.timestamps.tolist(),
            columns.key_starts.tolist(),
            columns.key_lengths.tolist(),
            columns.value_starts.tolist(),
            columns.value_lengths.tolist(),
            strict=True,
        )
    ]


def test_columns_hold_the_committed_records_of_the_per_record_path() -> None:
    values: list[bytes | None] = [b"v" * n for n in (0, 1, 60, 130, 20_000)] + [None]
    aborted_pid = 7
    chunk_one = b"".join(
        [
            _batch(0, values),
            _batch(6, values, compression=CompressionType.ZSTD),
            _batch(12, values[:3], producer_id=aborted_pid, producer_epoch=0, is_transactional=True),
            build_marker_batch(aborted_pid, 0, EndTxnMarker(ControlType.ABORT, 0), 1, base_offset=15),
        ]
    )
    chunk_two = b"".join(
        [
            _batch(16, values, keys=False, compression=CompressionType.GZIP),
            _batch(22, values, timestamp_type=1, max_timestamp=1_800_000_000_000),  # LogAppendTime
            _batch(28, values),  # straddles the end: read whole next time
        ]
    )
    chunks: list[Chunk] = [(chunk_one, [AbortedTxn(aborted_pid, 12, 15, 0)]), (chunk_two, [])]
    for start, end in ((0, 40), (3, 31), (17, 28), (28, 40)):
        columns = committed_columns(chunks, start, end)
        records, position = read_records(chunks, start, end)
        assert columns is not None
        assert columns.next_offset == position
        assert _as_records(columns) == [(r.offset, r.timestamp, r.key, r.value) for r in records]
        assert len(columns) == len(records) > 0 or (start, end) == (28, 40)


def test_records_with_headers_or_malformed_take_the_per_record_path() -> None:
    with_headers = build_batch([(None, b"v", (("h", b"x"),), 1)], base_offset=0)
    assert committed_columns([(with_headers, [])], 0, 1) is None
    assert len(committed_records(with_headers, [], 0, 1).records) == 1

    # Two records after the 61-byte header: the first's length, then the second's key length, broken.
    good = _batch(0, [b"abc", b"def"])
    for at, byte in ((61, 0x14), (61 + 14, 0x7E)):
        corrupt = good[:at] + bytes([byte]) + good[at + 1 :]
        assert committed_columns([(corrupt, [])], 0, 2) is None
        with pytest.raises(RecordDecodeError):
            committed_records(corrupt, [], 0, 2)


def test_avro_values_decode_together_as_fastavro_decodes_them_one_by_one() -> None:
    schema = block_schema(EVENT)
    assert schema is not None
    bodies = [avro(EVENT, v) for v in EVENT_VALUES] * (BLOCK_VALUES // 2 + 1)  # several blocks
    bodies.append(int_out_of_range())
    lengths = np.array([len(b) for b in bodies], np.int64)
    table = decode(schema, b"".join(bodies), lengths)
    parsed = parse_schema(EVENT)
    expected = [schemaless_reader(io.BytesIO(b), parsed, None) for b in bodies]
    assert table.to_pylist() == expected


def test_optional_fields_and_booleans_decode_together_as_fastavro_decodes_them() -> None:
    schema = block_schema(OPTIONAL)
    assert schema is not None
    bodies = [avro(OPTIONAL, v) for v in OPTIONAL_VALUES] * (BLOCK_VALUES // 2 + 1)
    lengths = np.array([len(b) for b in bodies], np.int64)
    parsed = parse_schema(OPTIONAL)
    expected = [schemaless_reader(io.BytesIO(b), parsed, None) for b in bodies]
    assert decode(schema, b"".join(bodies), lengths).to_pylist() == expected


@pytest.mark.parametrize("broken", [BAD_UNION_INDEX, BAD_BOOLEAN], ids=["union index 2", "boolean 2"])
def test_a_boolean_or_union_index_byte_out_of_range_fails_the_run(broken: bytes) -> None:
    schema = block_schema(OPTIONAL)
    assert schema is not None
    good = avro(OPTIONAL, OPTIONAL_VALUES[0])
    for bodies in ([good, broken, good], [broken], [good, good, broken]):
        lengths = np.array([len(b) for b in bodies], np.int64)
        with pytest.raises(NativeDecodeError):
            decode(schema, b"".join(bodies), lengths)


@pytest.mark.parametrize(
    "broken",
    [
        avro(EVENT, EVENT_VALUES[3]) + b"\x02",  # a byte left over
        avro(EVENT, EVENT_VALUES[3])[:-1],  # one short
        b"\x84\x00" + avro(EVENT, EVENT_VALUES[3])[1:],  # the string's length as an overlong varint
        b"\x04\xff\xfe" + avro(EVENT, EVENT_VALUES[3])[3:],  # a string that is not UTF-8
    ],
    ids=["bytes left over", "one short", "overlong varint", "not utf-8"],
)
def test_a_value_not_decoding_from_exactly_its_own_bytes_fails_the_run(broken: bytes) -> None:
    schema = block_schema(EVENT)
    assert schema is not None
    good = avro(EVENT, EVENT_VALUES[1])
    for bodies in ([good, broken, good, good], [broken, good], [good, broken]):
        lengths = np.array([len(b) for b in bodies], np.int64)
        with pytest.raises(NativeDecodeError):
            decode(schema, b"".join(bodies), lengths)


@pytest.mark.parametrize(
    "field_type",
    [
        ["string", "null"],
        ["null", "int", "string"],
        {"type": "int", "logicalType": "date"},
        {"type": "array", "items": "int"},
    ],
    ids=["null second", "union of three", "logical type", "array"],
)
def test_schemas_beyond_the_checked_types_keep_the_per_record_path(field_type: Any) -> None:
    schema = {
        "type": "record",
        "name": "R",
        "fields": [{"name": "a", "type": "string"}, {"name": "b", "type": field_type}],
    }
    assert block_schema(schema) is None
    assert block_schema("string") is None


def _rows(tables: Any, ref: TableRef) -> list[dict[str, Any]]:
    return sorted(
        tables.table(ref).scan().to_arrow().to_pylist(), key=lambda r: (r["partition"], r["offset"])
    )


@pytest.mark.parametrize(
    ("schema", "rows"), [(EVENT, EVENT_VALUES), (OPTIONAL, OPTIONAL_VALUES)], ids=["plain", "optional"]
)
def test_a_columnar_round_writes_the_table_the_per_record_path_writes(
    tmp_path: Path, schema: dict[str, Any], rows: list[dict[str, Any]]
) -> None:
    values: list[bytes | None] = [wire(5, avro(schema, v)) for v in rows[:4]] * 3
    chunks: list[Chunk] = [
        (_batch(0, values[:5]) + _batch(5, values[5:], compression=CompressionType.LZ4), [])
    ]
    schemas = SchemaCache({5: ("AVRO", json.dumps(schema))}.get)
    columnar = lake_tables(tmp_path / "columnar")
    ref = TableRef("events", VALUE_SCHEMA_ID_PREFIX, topic_id="id-1")
    columns = committed_columns(chunks, 2, 12)
    assert columns is not None
    result = columnar_round(columnar, ref, 0, columns, schemas)
    assert result is not None and (result.next_offset, result.rows, result.dead) == (12, 10, 0)
    assert columnar.next_offsets(ref) == {0: 12}

    records, position = read_records(chunks, 2, 12)
    per_record = lake_tables(tmp_path / "records")
    write_records(per_record, ref, 0, records, position, schemas, False)
    assert _rows(columnar, ref) == _rows(per_record, ref)
    assert len(_rows(columnar, ref)) == 10


@pytest.mark.parametrize(
    ("schema", "good", "bad"),
    [
        (EVENT, avro(EVENT, EVENT_VALUES[3]), avro(EVENT, EVENT_VALUES[3]) + b"\x00"),
        (OPTIONAL, avro(OPTIONAL, OPTIONAL_VALUES[3]), BAD_UNION_INDEX),
    ],
    ids=["byte left over", "union index 2"],
)
def test_a_round_with_an_undecodable_value_writes_nothing_then_dead_letters(
    tmp_path: Path, schema: dict[str, Any], good: bytes, bad: bytes
) -> None:
    values: list[bytes | None] = [wire(5, good), wire(5, bad), wire(5, good)]
    chunks: list[Chunk] = [(_batch(0, values), [])]
    schemas = SchemaCache({5: ("AVRO", json.dumps(schema))}.get)
    tables = lake_tables(tmp_path)
    ref = TableRef("events", VALUE_SCHEMA_ID_PREFIX, topic_id="id-1")
    columns = committed_columns(chunks, 0, 3)
    assert columns is not None
    assert columnar_round(tables, ref, 0, columns, schemas) is None
    assert not tables.exists(ref)

    set_up(catalog_settings({}, str(tmp_path), {}))
    request = RoundRequest(ref, 0, chunks, 0, 3, False, {5: ("AVRO", json.dumps(schema))})
    result = run_round_request(request)
    assert (result.next_offset, result.rows, result.dead) == (3, 2, 1)
    dead = tables.table(TableRef("events", VALUE_SCHEMA_ID_PREFIX, dlq=True, topic_id="id-1"))
    assert dead.scan().to_arrow()["offset"].to_pylist() == [1]
