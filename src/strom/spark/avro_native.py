"""Spark's Kafka source decodes a batch's Avro values of one writer schema natively (polars' reader,
strom.avro.native_block) and applies Avro's schema resolution to the columns.

Why: fastavro builds a Python dict per record (about 2.5-3 us for a 6-field record here), and then Arrow
rebuilds columns from the dicts; the native block decoder yields Arrow columns (about 0.4 us per such
record), with no Python object per record.

What it covers (`plan`, a pure decision taken once per writer/reader pair): a writer and a reader schema
that are records with the same full name, whose fields are of the types the block decoder takes
(primitives without a logical type, or a union of `null` first and one primitive). Avro's resolution,
which polars does not do, is then applied to the columns:

* a reader field is matched to the writer's field of the same name, else of one of its aliases;
* a writer field the reader does not have is decoded and dropped;
* a reader field the writer does not have becomes a column of its default (null, boolean, number or
  string; anything else is not covered);
* int -> long -> float -> double promotions and string <-> bytes are Arrow casts (int and long go to
  float through double, as Python does);
* a nullable writer field read into a non-nullable reader field is not covered (it fails on a null).

Anything else (enums, arrays, maps, nested records, logical types, other unions) returns None from
`plan`, and the caller keeps fastavro, which does all of Avro. The block decoder decodes exactly or
raises `NativeDecodeError` (as does an int past 32 bits here), and the caller then decodes the batch
with fastavro, which names the bad record.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from strom._util.json_types import JsonValue
from strom.avro import native_block
from strom.avro.native_block import BlockSchema, NativeDecodeError, record_fields, schema_of

__all__ = ["NativeDecodeError", "NativePlan", "decode", "plan"]

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


@dataclass(frozen=True)
class _Column:
    """How one reader field is produced: from a writer field (`source`), or as the default."""

    source: str | None
    writer_kind: str
    default: bool | int | float | str | None


@dataclass(frozen=True)
class NativePlan:
    """The writer's block schema, and the reader columns to produce (from `plan`)."""

    block: BlockSchema
    columns: tuple[_Column, ...]


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
    found_writer, found_reader = record_fields(writer), record_fields(reader)
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
    block = schema_of(found_writer[0], tuple(f for _, f in found_writer[1]))
    return NativePlan(block, tuple(columns))


def _resolve(column: pa.Array, writer_kind: str, target: pa.DataType) -> pa.Array:
    if writer_kind in ("int", "long") and pa.types.is_floating(target):
        # Rounded to nearest as Python's float(int), then narrowed as Arrow narrows fastavro's floats.
        column = pc.cast(column, pa.float64(), safe=False)
        return column if column.type == target else pc.cast(column, target, safe=False)
    return column if column.type == target else pc.cast(column, target)


def decode(
    native: NativePlan, data: bytes | memoryview, lengths: pa.Array, target: pa.StructType
) -> pa.Array:
    """The struct array (of Arrow type `target`) of the records whose bodies are concatenated in `data`,
    body i being `lengths[i]` bytes long.

    Raises:
        NativeDecodeError: a body did not decode exactly, or an int does not fit 32 bits.
    """
    count = len(lengths)
    table = native_block.decode(native.block, data, np.asarray(pc.cast(lengths, pa.int64()).to_numpy()))
    arrays = []
    for column, target_field in zip(native.columns, target, strict=True):
        if column.source is None:
            arrays.append(
                pa.nulls(count, target_field.type)
                if column.default is None
                else pa.repeat(pa.scalar(column.default, target_field.type), count)
            )
            continue
        try:
            arrays.append(
                _resolve(table.column(column.source).combine_chunks(), column.writer_kind, target_field.type)
            )
        except pa.ArrowInvalid as exc:  # an int's varint past 32 bits
            raise NativeDecodeError(f"{column.source}: {exc}") from exc
    return pa.StructArray.from_arrays(arrays, fields=list(target))
