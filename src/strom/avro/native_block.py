"""Avro values of one record schema decoded together into Arrow columns by polars' Avro reader
(compiled code, no Python object per value), exactly or not at all. Pure.

Theory of operation. Confluent's wire format holds each value as Avro's binary encoding without the
object container file's framing, so the values of one schema, concatenated, are exactly the data of
one container-file block of that many objects. `decode` writes an in-memory container file of such
blocks (`BLOCK_VALUES` values each: the header with the schema, then each block's count and size, its
values and the sync marker) and has polars read it.

Which schemas (`record_fields`, `block_schema`): records whose fields are `boolean`, `int`, `long`,
`float`, `double`, `string` or `bytes` (no logical type), or a union of `null` first and one of those
(the shape a compatible evolution adds; polars reads a union's branch 0 as null whatever the schema
says, so null must come first). Everything else is left to fastavro by the callers.

Exactness. The reader does not say where each value ended, and nothing in a block separates its
objects: a value with bytes left over, or one short of its schema, would shift every value after it.
So each row's canonical encoding length is computed from its decoded columns (a string's or bytes'
length varint plus its bytes, an int's or long's zig-zag varint, 1 byte a boolean, 4 a float, 8 a
double, 1 a union's branch index and nothing its null) and must equal its value's length. The reader
takes at least the canonical length for every field (more only for an overlong varint) and never more
than its block in all, while the canonical lengths add up to each whole block, so every field of every
row took exactly its canonical bytes. That also places each field's first byte, which the length check
alone cannot vouch for where a byte's content is read as a value: polars reads a boolean byte of 2 as
false (fastavro: true) and a union's branch index 2 or -1 as its non-null branch (fastavro refuses or
reads another branch). So every boolean byte must be 0 or 1 and every union index 0 (null) or 1 (the
value: the byte 2). An int is read as a long (the same encoding) so that the check sees its whole
varint; the callers narrow it to 32 bits where they need, refusing what does not fit. Any failed
check or any error of the reader raises `NativeDecodeError`: the caller decodes the values with
fastavro, which names the bad value or turns it into a dead letter.
"""

from __future__ import annotations

import io
import json
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc

from strom._util.json_types import JsonValue
from strom.protocol.records.record import Buffer, encode_varlong  # Avro's long is Kafka's varlong

PRIMITIVES = ("boolean", "int", "long", "float", "double", "string", "bytes")
_FIXED_SIZES = {"boolean": 1, "float": 4, "double": 8}
_READ_AS = {"int": "long"}
_SYNC = bytes(range(16))  # any 16 bytes: it only has to match between the header and the blocks
# Values per container block: the reader decodes large blocks much more slowly (a 32-MiB block of 1-KB
# values at 2.1 us a value, blocks of 1,000 at 0.4 us).
BLOCK_VALUES = 1000


class NativeDecodeError(ValueError):
    """The values could not be decoded exactly (the caller decodes them with fastavro)."""


@dataclass(frozen=True)
class BlockField:
    name: str
    kind: str  # one of PRIMITIVES
    nullable: bool  # a union of null (first) and `kind`


@dataclass(frozen=True)
class BlockSchema:
    """A writer schema `decode` takes: its fields, and the container file's header read with it."""

    fields: tuple[BlockField, ...]
    header: bytes


def field_type(schema: JsonValue) -> tuple[str, bool] | None:
    """(primitive, nullable) of a field's type, or None when not a primitive or null-and-primitive."""
    if isinstance(schema, Mapping) and set(schema) <= {"type"}:
        schema = schema.get("type")
    if isinstance(schema, str):
        return (schema, False) if schema in PRIMITIVES else None
    if isinstance(schema, list) and len(schema) == 2 and schema[0] == "null":
        inner = field_type(schema[1])
        return (inner[0], True) if inner is not None and not inner[1] else None
    return None


def record_fields(schema: JsonValue) -> tuple[str, list[tuple[Mapping[str, JsonValue], BlockField]]] | None:
    """The full name and the (declaration, field) pairs of a record schema (parsed JSON) whose fields
    are all of the types `decode` takes, or None."""
    if not isinstance(schema, Mapping) or schema.get("type") != "record" or not schema.get("fields"):
        return None
    name, namespace = str(schema.get("name", "")), schema.get("namespace")
    full = name if "." in name or not namespace else f"{namespace}.{name}"
    declared = schema["fields"]
    if not isinstance(declared, list):
        return None
    fields: list[tuple[Mapping[str, JsonValue], BlockField]] = []
    for field in declared:
        if not isinstance(field, Mapping):
            return None
        typed = field_type(field.get("type"))
        if typed is None:
            return None
        fields.append((field, BlockField(str(field["name"]), *typed)))
    return full, fields


def block_schema(schema: JsonValue) -> BlockSchema | None:
    """The `BlockSchema` of a writer schema (parsed JSON), or None when `decode` does not take it."""
    found = record_fields(schema)
    return None if found is None else schema_of(found[0], tuple(f for _, f in found[1]))


def schema_of(full_name: str, fields: tuple[BlockField, ...]) -> BlockSchema:
    """The `BlockSchema` of a record `full_name` of `fields`. The header's schema has names and types
    only (polars' schema parser rejects some field defaults), an int as a long."""
    minimal = {
        "type": "record",
        "name": full_name,
        "fields": [
            {
                "name": f.name,
                "type": ["null", _READ_AS.get(f.kind, f.kind)]
                if f.nullable
                else _READ_AS.get(f.kind, f.kind),
            }
            for f in fields
        ],
    }
    metadata = [b"avro.schema", json.dumps(minimal).encode(), b"avro.codec", b"null"]
    # The metadata map: one block of two entries, then its end.
    header = b"".join([b"Obj\x01", encode_varlong(2), *map(_string, metadata), encode_varlong(0), _SYNC])
    return BlockSchema(fields, header)


def decode(schema: BlockSchema, data: Buffer, lengths: npt.NDArray[np.int64]) -> pa.Table:
    """The rows (a column per field, named as the field, an int as int64) of the values of `schema`
    concatenated in `data`, value i being `lengths[i]` bytes long.

    Raises:
        NativeDecodeError: the reader failed, or a value did not decode from exactly its own bytes.
    """
    ends = np.cumsum(lengths)
    starts = ends - lengths
    view = memoryview(data)
    parts: list[Buffer] = [schema.header]
    for first in range(0, len(lengths), BLOCK_VALUES):
        last = min(first + BLOCK_VALUES, len(lengths)) - 1
        begin, end = int(starts[first]), int(ends[last])
        parts += [encode_varlong(last - first + 1), encode_varlong(end - begin), view[begin:end], _SYNC]
    try:
        table = pl.read_avro(io.BytesIO(b"".join(parts))).to_arrow()
    except Exception as exc:
        raise NativeDecodeError(f"{type(exc).__name__}: {exc}") from exc
    except BaseException as exc:
        # A malformed value can make the reader panic: pyo3's PanicException is a BaseException.
        if type(exc).__name__ != "PanicException":
            raise
        raise NativeDecodeError(f"{type(exc).__name__}: {exc}") from exc
    if table.num_rows != len(lengths) or table.num_columns != len(schema.fields):
        raise NativeDecodeError(f"{table.num_rows} values of {table.num_columns} columns decoded")
    columns = [table.column(i).combine_chunks() for i in range(len(schema.fields))]
    sizes = [_encoded_sizes(f, c) for f, c in zip(schema.fields, columns, strict=True)]
    if not np.array_equal(np.sum(sizes, axis=0), lengths):
        raise NativeDecodeError("a value's length differs from its row's encoded size")
    _check_tag_bytes(schema.fields, columns, sizes, np.frombuffer(data, np.uint8), starts)
    return pa.Table.from_arrays(columns, names=[f.name for f in schema.fields])


def _encoded_sizes(field: BlockField, column: pa.Array) -> npt.NDArray[np.int64]:
    """Bytes each row's value of `field` takes in Avro's binary encoding (canonical varints)."""
    if field.kind in _FIXED_SIZES:
        size = np.full(len(column), _FIXED_SIZES[field.kind], np.int64)
    elif field.kind in ("string", "bytes"):
        length = _numbers(pc.binary_length(column))
        size = _varint_sizes(length.astype(np.uint64) << np.uint64(1)) + length
    else:
        number = _numbers(column)
        size = _varint_sizes(((number << 1) ^ (number >> 63)).view(np.uint64))
    if field.nullable:
        size = np.where(_valid(column), size + 1, 1)  # the branch index, then nothing for a null
    return size


def _check_tag_bytes(
    fields: tuple[BlockField, ...],
    columns: list[pa.Array],
    sizes: list[npt.NDArray[np.int64]],
    data: npt.NDArray[np.uint8],
    starts: npt.NDArray[np.int64],
) -> None:
    """Raises NativeDecodeError unless every union branch index and boolean byte is one Avro allows
    (the lengths matching, `sizes` place each field's first byte)."""
    at = starts
    for field, column, size in zip(fields, columns, sizes, strict=True):
        valid = _valid(column)
        if field.nullable and not np.array_equal(data[at], np.where(valid, 2, 0)):  # zig-zag 1 and 0
            raise NativeDecodeError(f"a union branch index of {field.name} is neither 0 nor 1")
        if field.kind == "boolean":
            flags = _numbers(column).astype(np.uint8)
            value_at = at + 1 if field.nullable else at
            if not np.array_equal(data[value_at][valid], flags[valid]):
                raise NativeDecodeError(f"a boolean byte of {field.name} is neither 0 nor 1")
        at = at + size


def _valid(column: pa.Array) -> npt.NDArray[np.bool_]:
    if not column.null_count:
        return np.ones(len(column), np.bool_)
    return np.asarray(column.is_valid().to_numpy(zero_copy_only=False), np.bool_)


def _numbers(column: pa.Array) -> npt.NDArray[np.int64]:
    """The column as int64s, a null as 0."""
    filled = (
        pc.fill_null(column, False if pa.types.is_boolean(column.type) else 0)
        if column.null_count
        else column
    )
    return np.asarray(filled.to_numpy(zero_copy_only=False)).astype(np.int64)


def _varint_sizes(raw: npt.NDArray[np.uint64]) -> npt.NDArray[np.int64]:
    sizes = np.ones(len(raw), np.int64)
    for shift in range(7, 64, 7):
        sizes += (raw >> np.uint64(shift)) != 0
    return sizes


def _string(data: bytes) -> bytes:
    return encode_varlong(len(data)) + data
