"""Avro values of one schema decoded together into Arrow columns by polars' Avro reader (compiled code):
the translation worker's columnar path (columnar.py) for the schemas `block_schema` takes. Pure.

Theory of operation. Confluent's wire format holds each value as Avro's binary encoding without the
object container file's framing, so the values of one schema, concatenated, are exactly the data of
one container-file block of that many objects. `decode_values` writes an in-memory container file of
such blocks (`BLOCK_VALUES` values each: the header with the schema, then each block's count and size,
its values and the sync marker) and has polars read it: Arrow columns, no Python object per value.

The reader does not say where each value ended, and nothing in a block separates its objects: a value
with bytes left over, or one short of its schema, would shift every value after it. So the rows are
checked against the values' lengths: each row's canonical encoding length is computed from its decoded
columns (a string's or bytes' length varint plus its bytes, an int's or long's zigzag varint, 4 bytes
a float, 8 a double; an int is read as a long, see `block_schema`) and must equal its value's
length. That proves that each row was decoded from
exactly its own value: the reader takes at least the canonical length for a row (more only for an
overlong varint) and never more than its block in all, while the canonical lengths add up to each
whole block, so every row took exactly its own bytes. A row that fails the check, or any error of the
reader, sends the whole run back to the per-record decoder (translate.py), which turns the values
that do not decode into dead letters as before.

Only record schemas whose fields are all string, bytes, int, long, float or double (no logical type,
not in a union) are taken: those are the types the check covers and on which polars' reader and
fastavro agree. A union's branch index or a boolean's byte out of range reads as a value in polars'
reader where fastavro refuses it or reads another, so such schemas (and all others) keep the
per-record path.
"""

from __future__ import annotations

import io
import json
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc

from strom.protocol.records.record import Buffer, encode_varlong  # Avro's long is Kafka's varlong

_TYPES = ("string", "bytes", "int", "long", "float", "double")
_FIXED_SIZES = {"float": 4, "double": 8}
_READ_AS = {"int": "long"}
_SYNC = bytes(range(16))
# Values per container block: the reader decodes large blocks much more slowly (a 32-MiB block of 1-KB
# values at 2.1 us a value, blocks of 1,000 at 0.4 us).
BLOCK_VALUES = 1000  # any 16 bytes: it only has to match between the header and the block

# A schema the columnar path takes: its fields' names and Avro types, and its text for the header.
BlockSchema = tuple[tuple[tuple[str, str], ...], str]


def block_schema(document: Any) -> BlockSchema | None:
    """The fields of an Avro record schema that `decode_values` can decode, or None."""
    if not isinstance(document, dict) or document.get("type") != "record":
        return None
    fields: list[tuple[str, str]] = []
    for f in document.get("fields", ()):
        kind = f.get("type")
        if isinstance(kind, dict) and set(kind) == {"type"}:
            kind = kind["type"]
        if kind not in _TYPES:
            return None
        fields.append((str(f["name"]), kind))
    if not fields:
        return None
    # An int is read as a long (the same encoding), so that the length check sees the whole varint;
    # a value past 32 bits then fails the int column's cast and the run takes the per-record path.
    read_as = dict(
        document, fields=[{"name": name, "type": _READ_AS.get(kind, kind)} for name, kind in fields]
    )
    return tuple(fields), json.dumps(read_as)


def decode_values(
    schema: BlockSchema, values: Sequence[Buffer], lengths: npt.NDArray[np.int64]
) -> pa.Table | None:
    """The rows of ``values``, Avro encodings of ``schema`` of ``lengths`` bytes, or None when they do
    not all decode from exactly their own bytes."""
    fields, text = schema
    parts: list[Buffer] = [
        b"Obj\x01",
        encode_varlong(2),  # the header's metadata map: one block of two entries, then its end
        _string(b"avro.schema"),
        _string(text.encode()),
        _string(b"avro.codec"),
        _string(b"null"),
        encode_varlong(0),
        _SYNC,
    ]
    for first in range(0, len(values), BLOCK_VALUES):
        block = values[first : first + BLOCK_VALUES]
        size = int(lengths[first : first + BLOCK_VALUES].sum())
        parts += [encode_varlong(len(block)), encode_varlong(size), *block, _SYNC]
    container = b"".join(parts)
    try:
        table = pl.read_avro(io.BytesIO(container)).to_arrow()
    except Exception:
        return None
    except BaseException as exc:
        # A malformed value can make the reader panic: pyo3's PanicException is a BaseException.
        if type(exc).__name__ != "PanicException":
            raise
        return None
    if table.num_rows != len(lengths):
        return None
    encoded = np.zeros(len(lengths), np.int64)
    for name, kind in fields:
        column = table.column(name)
        if column.null_count:
            return None
        if kind in _FIXED_SIZES:
            encoded += _FIXED_SIZES[kind]
        elif kind in ("string", "bytes"):
            size = pc.binary_length(column).to_numpy().astype(np.int64)
            encoded += _varint_sizes(size.astype(np.uint64) << np.uint64(1)) + size
        else:
            number = column.to_numpy().astype(np.int64)
            encoded += _varint_sizes(((number << 1) ^ (number >> 63)).view(np.uint64))
    return table if np.array_equal(encoded, lengths) else None


def _varint_sizes(raw: npt.NDArray[np.uint64]) -> npt.NDArray[np.int64]:
    sizes = np.ones(len(raw), np.int64)
    for shift in range(7, 64, 7):
        sizes += (raw >> np.uint64(shift)) != 0
    return sizes


def _string(data: bytes) -> bytes:
    return encode_varlong(len(data)) + data
