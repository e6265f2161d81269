"""A translation round without a Python object per record, for the common case: the translation
worker (worker.py) tries it first and takes the per-record path (round.py) whenever it answers None.

Theory of operation. In ``value_schema_id_prefix`` mode a round usually holds records without headers
whose values all name one Avro schema of plain or optional fields. Then the stored batches' record
framing is read into columns (record_columns.py), the Confluent prefixes are checked on all values at
once, the values after them are decoded together into Arrow columns (strom.avro.native_block), and the
metadata columns are built from the offset, timestamp and key columns: one Arrow table for the round,
appended as the per-record path appends its rows (the round's end recorded as the partition's next
offset, so exactly-once is the table's as before). Everything else answers None before anything is
written: records with headers, values without a prefix or of several schemas, a schema unknown or not
taken, a value that does not decode, a schema the table refuses, a decoded value that does not fit its
column. The per-record path then gives the same rows, or the dead letters and the reasons, as it always
did.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from strom.avro.native_block import NativeDecodeError, decode
from strom.lake.columns import HEADER_TYPE
from strom.lake.record_columns import RecordColumns
from strom.lake.round import RoundResult
from strom.lake.tables import LakeTables, SchemaRefused, TableRef
from strom.lake.translate import SchemaCache

_PREFIX_SIZE = 5  # a zero byte and the schema id (4 bytes, big-endian)


def columnar_round(
    tables: LakeTables, main: TableRef, partition: int, columns: RecordColumns, schemas: SchemaCache
) -> RoundResult | None:
    """Run the round of ``value_schema_id_prefix`` topic ``main`` over the records ``columns`` (a
    round's, record_columns.py) or answer None, having written nothing, for the per-record path."""
    if not len(columns):
        return None
    schema_id = _one_schema_id(columns)
    schema = schemas.get(schema_id) if schema_id is not None else None
    if schema is None or schema.block is None:
        return None
    lengths = columns.value_lengths - _PREFIX_SIZE
    try:
        values = decode(
            schema.block,
            b"".join(_slices(columns.raw, columns.value_starts + _PREFIX_SIZE, lengths)),
            lengths,
        )
    except NativeDecodeError:
        return None
    try:
        tables.evolve(main, schema.fields)
    except SchemaRefused:
        return None
    table = _table(tables.arrow_schema(main), partition, columns, values)
    if table is None:
        return None
    tables.append(main, partition, columns.next_offset, table)
    return RoundResult(columns.next_offset, table.num_rows, 0, None)


def _one_schema_id(columns: RecordColumns) -> int | None:
    """The schema id every value names, or None (a value without the prefix, or several ids)."""
    if not np.all(columns.value_lengths >= _PREFIX_SIZE):
        return None
    starts = columns.value_starts
    data = columns.data
    if np.any(data[starts] != 0):
        return None
    ids = np.zeros(len(starts), np.int64)
    for i in range(1, _PREFIX_SIZE):
        ids = (ids << 8) | data[starts + i]
    first = int(ids[0])
    return first if np.all(ids == first) else None


def _table(schema: pa.Schema, partition: int, columns: RecordColumns, values: pa.Table) -> pa.Table | None:
    """The round's table in the table's schema (columns of other schema versions null), or None when a
    decoded column does not fit its table column."""
    n = len(columns)
    timestamps = columns.timestamps
    arrays: dict[str, pa.Array | pa.ChunkedArray] = {
        "partition": pa.array(np.full(n, partition, np.int32)),
        "offset": pa.array(columns.offsets),
        "timestamp": pa.array(timestamps * 1000, pa.timestamp("us", tz="UTC"), mask=timestamps < 0),
        "headers": pa.ListArray.from_arrays(pa.array(np.zeros(n + 1, np.int32)), pa.array([], HEADER_TYPE)),
        "key": _binary(columns.raw, columns.key_starts, columns.key_lengths),
    }
    for name in values.column_names:
        arrays[name] = values.column(name)
    out: list[pa.Array | pa.ChunkedArray] = []
    for f in schema:
        found = arrays.get(f.name)
        if found is None:
            out.append(pa.nulls(n, f.type))
            continue
        try:
            out.append(found if found.type == f.type else found.cast(f.type))
        except (pa.ArrowException, ValueError):
            return None
    return pa.Table.from_arrays(out, schema=schema)


def _binary(data: bytes, starts: npt.NDArray[np.int64], lengths: npt.NDArray[np.int64]) -> pa.Array:
    """Byte strings of ``data`` at ``starts`` of ``lengths`` (-1: null) as an Arrow binary column."""
    if np.all(lengths < 0):
        return pa.nulls(len(lengths), pa.binary())
    sizes = np.maximum(lengths, 0)
    offsets = np.zeros(len(lengths) + 1, np.int64)
    np.cumsum(sizes, out=offsets[1:])
    validity = pa.py_buffer(np.packbits(lengths >= 0, bitorder="little").tobytes())
    return pa.Array.from_buffers(
        pa.large_binary(),
        len(lengths),
        [validity, pa.py_buffer(offsets.tobytes()), pa.py_buffer(b"".join(_slices(data, starts, sizes)))],
    ).cast(pa.binary())


def _slices(data: bytes, starts: npt.NDArray[np.int64], lengths: npt.NDArray[np.int64]) -> list[memoryview]:
    """The byte ranges ``[start, start + length)`` of ``data``, as views (no copy)."""
    view = memoryview(data)
    return [view[s : s + n] for s, n in zip(starts.tolist(), lengths.tolist(), strict=True)]
