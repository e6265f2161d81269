"""A block of Avro records decoded in native code (polars' Avro reader) straight into Arrow columns.

Why: fastavro builds a Python dict per record (about 2.5-3 us for a 6-field record here), and then Arrow
rebuilds columns from the dicts; polars decodes an in-memory Avro object container file in Rust into
Arrow columns (about 0.4 us per such record), with no Python object per record.

What it covers (`plan`, a pure decision taken once per writer/reader pair): a writer and a reader schema
that are records with the same full name, whose fields are primitives (`boolean`, `int`, `long`,
`float`, `double`, `string`, `bytes`, no logical type) or a union of `null` (first) and one primitive. Avro's
resolution, which polars does not do, is then applied to the columns:

* a reader field is matched to the writer's field of the same name, else of one of its aliases;
* a writer field the reader does not have is decoded and dropped;
* a reader field the writer does not have becomes a column of its default (null, boolean, number or
  string; anything else is not covered);
* int -> long -> float -> double promotions and string <-> bytes are Arrow casts (int and long go to
  float through double, as Python does);
* a nullable writer field read into a non-nullable reader field is not covered (it fails on a null).

Anything else (enums, arrays, maps, nested records, logical types, other unions) returns None from
`plan`, and the caller keeps fastavro, which does all of Avro.

Exactness: polars is handed a header written from the plan's own minimal writer schema (names and
types only: polars' schema parser rejects some field defaults) and the bodies as one block. A body
longer or shorter than its datum would shift the records after it, so every record's encoded size is
recomputed from its decoded values (varints from the magnitude of the number, strings and bytes as
length varint plus bytes, union index one byte) and compared with its body's length; then, the lengths
matching, each field's first byte is known, and every union branch index must be the byte 0 (null) or
2 (the value) and every boolean the byte 0 or 1, which the length check cannot see (polars reads other
bytes there as values where fastavro refuses them or reads others). Any difference, or any error from
polars, raises `NativeDecodeError`, and the caller decodes the batch with fastavro,
which names the bad record.
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
from fastavro import parse_schema
from polars.exceptions import PanicException

from strom._util.json_types import JsonValue
from strom.spark import avro_container

_PRIMITIVES = ("boolean", "int", "long", "float", "double", "string", "bytes")
_FIXED_SIZE = {"boolean": 1, "float": 4, "double": 8}
# Writer type -> reader types it resolves to (Avro's promotions).
_PROMOTIONS = {
    "int": {"int", "long", "float", "double"},
    "long": {"long", "float", "double"},
    "float": {"float", "double"},
    "double": {"double"},
    "boolean": {"boolean"},
    "string": {"string", "bytes"},
    "bytes": {"bytes", "string"},
}


class NativeDecodeError(ValueError):
    """The native decoder could not decode a block exactly (the caller falls back to fastavro)."""


@dataclass(frozen=True)
class _Field:
    name: str
    kind: str  # a primitive
    nullable: bool


@dataclass(frozen=True)
class _Column:
    """How one reader field is produced: from a writer field (`source`), or as the default."""

    source: str | None
    writer_kind: str
    default: bool | int | float | str | None


@dataclass(frozen=True)
class NativePlan:
    """Writer fields to decode, reader columns to produce (from `plan`)."""

    writer_fields: tuple[_Field, ...]
    columns: tuple[_Column, ...]
    header: bytes  # an object container file's header, its sync marker last


def _field_type(schema: JsonValue) -> tuple[str, bool] | None:
    """(primitive, nullable) of a field's type, or None when not a primitive or null-and-primitive."""
    if isinstance(schema, Mapping) and set(schema) <= {"type"}:
        schema = schema.get("type")
    if isinstance(schema, str):
        return (schema, False) if schema in _PRIMITIVES else None
    # Null first only: polars reads a union's null as branch 0 whatever the schema says.
    if isinstance(schema, list) and len(schema) == 2 and schema[0] == "null":
        inner = _field_type(schema[1])
        return (inner[0], True) if inner is not None and not inner[1] else None
    return None


def _record_fields(schema: JsonValue) -> tuple[str, list[tuple[Mapping[str, JsonValue], _Field]]] | None:
    if not isinstance(schema, Mapping) or schema.get("type") != "record" or not schema.get("fields"):
        return None
    name, namespace = str(schema.get("name", "")), schema.get("namespace")
    full = name if "." in name or not namespace else f"{namespace}.{name}"
    fields: list[tuple[Mapping[str, JsonValue], _Field]] = []
    declared = schema["fields"]
    if not isinstance(declared, list):
        return None
    for field in declared:
        if not isinstance(field, Mapping):
            return None
        typed = _field_type(field.get("type"))
        if typed is None:
            return None
        fields.append((field, _Field(str(field["name"]), typed[0], typed[1])))
    return full, fields


def _default(
    field: Mapping[str, JsonValue], kind: str, nullable: bool
) -> tuple[bool, bool | int | float | str | None]:
    """(covered, value) of a reader field's default."""
    if "default" not in field:
        return False, None
    value = field["default"]
    if value is None:
        return nullable, None
    if kind == "boolean" and isinstance(value, bool):
        return True, value
    if isinstance(value, bool):
        return False, None
    if kind in ("int", "long") and isinstance(value, int):
        return True, value
    if kind in ("float", "double") and isinstance(value, int | float):
        return True, float(value)
    if kind == "string" and isinstance(value, str):
        return True, value
    return False, None


def plan(writer: JsonValue, reader: JsonValue) -> NativePlan | None:
    """How to decode records of `writer` into `reader` natively, or None if not covered (parsed JSON)."""
    found_writer, found_reader = _record_fields(writer), _record_fields(reader)
    if found_writer is None or found_reader is None or found_writer[0] != found_reader[0]:
        return None
    writer_fields = {f.name: f for _, f in found_writer[1]}
    columns = []
    for raw, field in found_reader[1]:
        aliases = raw.get("aliases", [])
        names = [field.name, *(str(a) for a in aliases)] if isinstance(aliases, list) else [field.name]
        source = next((writer_fields[n] for n in names if n in writer_fields), None)
        if source is None:
            covered, value = _default(raw, field.kind, field.nullable)
            if not covered:
                return None
            columns.append(_Column(None, field.kind, value))
            continue
        if field.kind not in _PROMOTIONS[source.kind] or (source.nullable and not field.nullable):
            return None
        columns.append(_Column(source.name, source.kind, None))
    minimal = {
        "type": "record",
        "name": found_writer[0],
        "fields": [
            {"name": f.name, "type": ["null", f.kind] if f.nullable else f.kind} for _, f in found_writer[1]
        ],
    }
    header = avro_container.header(parse_schema(json.loads(json.dumps(minimal))))
    return NativePlan(tuple(f for _, f in found_writer[1]), tuple(columns), header)


# Zig-zag varint thresholds as Arrow scalars (a Python int argument costs a conversion per call).
_THRESHOLDS = [pa.scalar(2 ** (7 * k - 1), pa.int64()) for k in range(1, 10)]
_ZERO, _ONE = pa.scalar(0, pa.int64()), pa.scalar(1, pa.int64())


def _varint_size(values: pa.Array) -> pa.Array:
    """Bytes of each int64's zig-zag varint: zig-zag(v) >= 2**(7k) exactly when |v| (or -v-1 for
    negative v) >= 2**(7k-1), so no unsigned arithmetic is needed. Only the thresholds up to the
    largest magnitude are compared."""
    magnitude = pc.if_else(pc.less(values, _ZERO), pc.negate(pc.add(values, _ONE)), values)
    largest = pc.max(magnitude).as_py() or 0
    size = pc.cast(pc.is_valid(magnitude), pa.int64())  # ones (no nulls here)
    for threshold in _THRESHOLDS:
        if largest < threshold.as_py():
            break
        size = pc.add(size, pc.cast(pc.greater_equal(magnitude, threshold), pa.int64()))
    return size


def _encoded_size(field: _Field, column: pa.Array) -> pa.Array:
    """Bytes each record's value of `field` takes in Avro's binary encoding (canonical varints)."""
    if field.kind in _FIXED_SIZE:
        fixed = pa.scalar(_FIXED_SIZE[field.kind], pa.int64())
        size = (
            pc.if_else(pc.is_valid(column), fixed, _ZERO)
            if column.null_count
            else pa.repeat(fixed, len(column))
        )
    elif field.kind in ("int", "long"):
        size = _varint_size(pc.cast(column, pa.int64()))
    else:
        length = pc.cast(pc.binary_length(column), pa.int64())
        size = pc.add(_varint_size(length), length)
    if field.nullable:
        # One byte of union branch index, and nothing for a null.
        size = pc.add(pc.fill_null(size, _ZERO), _ONE)
    return size


def _resolve(column: pa.Array, writer_kind: str, target: pa.DataType) -> pa.Array:
    if writer_kind in ("int", "long") and pa.types.is_floating(target):
        # Rounded to nearest as Python's float(int), then narrowed as Arrow narrows fastavro's floats.
        column = pc.cast(column, pa.float64(), safe=False)
        return column if column.type == target else pc.cast(column, target, safe=False)
    return column if column.type == target else pc.cast(column, target)


def _check_tag_bytes(
    fields: tuple[_Field, ...],
    decoded: dict[str, pa.Array],
    sizes: list[npt.NDArray[np.int64]],
    data: npt.NDArray[np.uint8],
    bodies: npt.NDArray[np.int64],
) -> None:
    """Raises NativeDecodeError unless every union branch index and boolean byte is one Avro allows.

    polars reads a boolean byte of 2 as false (fastavro: true) and any union index but 0 as the
    non-null branch (fastavro refuses an index out of range); both take one byte, so the length
    check cannot see them. Once the lengths match, every field took exactly its canonical size (no
    field takes less, and the sizes add up to the body), so the sizes locate each field's first byte.
    """
    offset = np.cumsum(bodies) - bodies
    for field, size in zip(fields, sizes, strict=True):
        column = decoded[field.name]
        valid = np.ones(len(column), np.bool_) if not column.null_count else np.asarray(column.is_valid())
        at = offset
        if field.nullable:
            # Branch 0 (null) is the byte 0, branch 1 (the value) the byte 2: zig-zag varints.
            if not np.array_equal(data[at], np.where(valid, 2, 0).astype(np.uint8)):
                raise NativeDecodeError(f"a union branch index of {field.name} is neither 0 nor 1")
            at = at + 1
        if field.kind == "boolean":
            flags = np.asarray(pc.fill_null(column, False)).astype(np.uint8)
            if not np.array_equal(data[at][valid], flags[valid]):
                raise NativeDecodeError(f"a boolean byte of {field.name} is neither 0 nor 1")
        offset = offset + size


def decode(
    native: NativePlan, data: bytes | memoryview, lengths: pa.Array, target: pa.StructType
) -> pa.Array:
    """The struct array (of Arrow type `target`) of the records whose bodies are concatenated in `data`,
    body i being `lengths[i]` bytes long.

    Raises:
        NativeDecodeError: polars failed, or a body's length is not its record's encoded size.
    """
    count = len(lengths)
    block = avro_container.block(native.header, count, data)
    try:
        table = pl.read_avro(io.BytesIO(block)).to_arrow()
    except (Exception, PanicException) as e:
        raise NativeDecodeError(f"{type(e).__name__}: {e}") from e
    if table.num_rows != count or table.num_columns != len(native.writer_fields):
        raise NativeDecodeError(f"{table.num_rows} records of {table.num_columns} columns decoded")
    decoded = {f.name: table.column(i).combine_chunks() for i, f in enumerate(native.writer_fields)}
    sizes = [_encoded_size(f, decoded[f.name]).to_numpy(zero_copy_only=False) for f in native.writer_fields]
    bodies = pc.cast(lengths, pa.int64()).to_numpy(zero_copy_only=False)
    if not np.array_equal(np.sum(sizes, axis=0), bodies):
        raise NativeDecodeError("a body's length differs from its record's encoded size")
    _check_tag_bytes(native.writer_fields, decoded, sizes, np.frombuffer(data, np.uint8), bodies)
    arrays = []
    for column, target_field in zip(native.columns, target, strict=True):
        if column.source is None:
            arrays.append(
                pa.nulls(count, target_field.type)
                if column.default is None
                else pa.repeat(pa.scalar(column.default, target_field.type), count)
            )
        else:
            arrays.append(_resolve(decoded[column.source], column.writer_kind, target_field.type))
    return pa.StructArray.from_arrays(arrays, fields=list(target))
