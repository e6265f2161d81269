"""Executor side of a read across table and log: a `TableRange`'s rows as the batches the log read yields.

Theory of operation
-------------------
A table task scans its partition's offsets ``[from, until)`` from the pinned snapshot
(strom.lake.history.read_rows) and returns record batches of the log read's schema, in offset order:

* ``key_value`` tables keep each record's key, value and headers as bytes: a row becomes the log read's
  row as it is (`kafka_batch`: an empty header list reads as null, as for a record without headers;
  ``timestampType`` is the topic's ``message.timestamp.type``, -1 for a row without timestamp), then goes
  through the same typed decoding (``valueFormat``, ``keyFormat``) as a batch read from the log.
* ``value_schema_id_prefix`` tables hold the value's fields as columns, decoded with the writer's schema
  by the broker; the read needs ``valueFormat`` (avro, json or protobuf), and the ``value`` struct is
  built from those columns by the reader schema's field names (`value_struct`): a column the reader
  does not have is left out, a field the table does not have is null. Then each format's resolution
  as the log read does it: Avro's, a field that is null in a row while the reader schema declares it
  non-null with a default (a record written before the field existed) takes the default; Protobuf's
  (`ProtobufColumnDecoder.from_table`), a field without presence reads as the log read gives it
  (null at its zero value unless ``emit.default.values``), repeated and map fields are never null, and a
  wrapper type's scalar column becomes its one-field struct; JSON Schema's needs nothing more. The key
  goes through the typed decoding as usual.
  Records the broker could not decode are rows of the dead-letter table with their raw bytes: they go
  through the log read's Avro decoding (so ``mode`` and ``deadLetterTopic`` treat them as they would
  from the log) and are merged back in offset order.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator, Mapping
from dataclasses import replace

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.types import StructType

from strom.lake import history
from strom.lake.tables import DLQ_SUFFIX
from strom.lake.translate import VALUE_SCHEMA_ID_PREFIX
from strom.spark.avro_codec import arrow_type
from strom.spark.lake_source import TableRange
from strom.spark.protobuf_codec import ProtobufColumnDecoder
from strom.spark.schema import arrow_schema
from strom.spark.typed_plan import CORRUPT_TYPE, AvroColumn, TypedRead, corrupt_column

_CORRUPT_ARROW = arrow_type(CORRUPT_TYPE)


def table_batches(
    catalog: Mapping[str, str], task: TableRange, include_headers: bool, typed: TypedRead | None
) -> Iterator[pa.RecordBatch]:
    """The task's rows as the log read's batches (typed columns decoded), in offset order."""
    r = task.offset_range
    rows = history.read_rows(
        catalog, r.topic, task.snapshot_id, r.partition, r.from_offset, r.until_offset, task.table_uuid
    )
    if task.mode != VALUE_SCHEMA_ID_PREFIX:
        batch = kafka_batch(rows, r.topic, r.partition, task.timestamp_type, include_headers)
        if typed is None:
            return iter([batch])
        return iter(list(typed.apply(iter([batch]), r.topic, r.partition)))
    assert typed is not None
    parts = list(_decoded_rows(rows, task, include_headers, typed))
    if task.dlq_snapshot_id is not None:
        dead = history.read_rows(
            catalog,
            r.topic + DLQ_SUFFIX,
            task.dlq_snapshot_id,
            r.partition,
            r.from_offset,
            r.until_offset,
            task.dlq_uuid,
        )
        if dead.num_rows:
            raw = kafka_batch(dead, r.topic, r.partition, task.timestamp_type, include_headers)
            parts.extend(typed.apply(iter([raw]), r.topic, r.partition))
    if not parts:
        return iter([])
    schema = parts[0].schema
    # Cast only where a decoder's types differ: a cast checks non-null children even under null structs.
    same = [p if p.schema.equals(schema) else p.cast(schema) for p in parts]
    merged = pa.Table.from_batches(same, schema).sort_by("offset")
    return iter(merged.combine_chunks().to_batches())


def kafka_batch(
    rows: pa.Table, topic: str, partition: int, timestamp_type: int, include_headers: bool
) -> pa.RecordBatch:
    """Table rows as a batch of the log read's schema (``value`` null when the table has none)."""
    schema = arrow_schema(include_headers)
    n = rows.num_rows
    names = rows.column_names
    stamps = _column(rows, "timestamp").cast(schema.field("timestamp").type)
    stamp_type = pc.if_else(
        pc.is_null(stamps), pa.scalar(-1, pa.int32()), pa.scalar(timestamp_type, pa.int32())
    )
    columns = [
        _column(rows, "key").cast(pa.binary()),
        _column(rows, "value").cast(pa.binary()) if "value" in names else pa.nulls(n, pa.binary()),
        pa.repeat(pa.scalar(topic, pa.string()), n),
        pa.repeat(pa.scalar(partition, pa.int32()), n),
        _column(rows, "offset").cast(pa.int64()),
        stamps,
        stamp_type,
    ]
    if include_headers:
        header_type = schema.field("headers").type
        headers = _column(rows, "headers").cast(header_type)
        empty = pc.fill_null(pc.equal(pc.list_value_length(headers), 0), True)
        columns.append(pc.if_else(empty, pa.nulls(n, header_type), headers))
    return pa.RecordBatch.from_arrays(columns, schema=schema)


def _decoded_rows(
    rows: pa.Table, task: TableRange, include_headers: bool, typed: TypedRead
) -> Iterator[pa.RecordBatch]:
    """Rows of a ``value_schema_id_prefix`` table: the value struct from the columns, the key decoded as
    the log read decodes it, the columns in the order of the typed read's schema."""
    if rows.num_rows == 0:
        return
    r = task.offset_range
    decoder = typed.decoders["value"]
    base = kafka_batch(rows, r.topic, r.partition, task.timestamp_type, include_headers)
    others = {name: d for name, d in typed.decoders.items() if name != "value"}
    keyed = next(iter(replace(typed, decoders=others).apply(iter([base]), r.topic, r.partition)))
    data_type = decoder.data_type
    assert isinstance(data_type, StructType)
    defaults = avro_defaults(decoder.reader_schema) if isinstance(decoder, AvroColumn) else {}
    value = value_struct(rows, data_type, defaults)
    if isinstance(decoder, ProtobufColumnDecoder):
        value = decoder.from_table(value, typed.registry)
    arrays: list[pa.Array] = []
    fields: list[pa.Field] = []
    corrupt_columns = [corrupt_column(name) for name in typed.decoders] if typed.permissive else []
    for f in keyed.schema:
        if f.name in corrupt_columns:
            continue  # appended below, in the order of the typed read's schema
        column = value if f.name == "value" else keyed.column(f.name)
        arrays.append(column)
        fields.append(pa.field(f.name, column.type))
    for corrupt in corrupt_columns:
        names = keyed.schema.names
        column = keyed.column(corrupt) if corrupt in names else pa.nulls(len(value), _CORRUPT_ARROW)
        arrays.append(column)
        fields.append(pa.field(corrupt, column.type))
    yield pa.RecordBatch.from_arrays(arrays, schema=pa.schema(fields))


def value_struct(rows: pa.Table, data_type: StructType, defaults: Mapping[str, object]) -> pa.Array:
    """The reader schema's struct of each row, from the table's columns by name."""
    target = arrow_type(data_type)
    n = rows.num_rows
    children = []
    for f in target:
        if f.name in rows.column_names:
            child = _conform(_column(rows, f.name), f.type)
        else:
            child = pa.nulls(n, f.type)
        if f.name in defaults:
            # A default Arrow cannot take as it is (bytes given as text, ...) is left null.
            with contextlib.suppress(pa.ArrowException, TypeError, ValueError):
                child = pc.fill_null(child, pa.scalar(defaults[f.name], f.type))
        children.append(child)
    return pa.StructArray.from_arrays(children, fields=list(target))


def avro_defaults(reader_schema: str) -> dict[str, object]:
    """The defaults of the record's top-level fields that cannot be null."""
    document = json.loads(reader_schema)
    out: dict[str, object] = {}
    for f in document.get("fields", []) if isinstance(document, dict) else []:
        kind = f.get("type")
        nullable = kind == "null" or (isinstance(kind, list) and "null" in kind)
        if "default" in f and not nullable:
            out[str(f["name"])] = f["default"]
    return out


def _conform(column: pa.Array, target: pa.DataType) -> pa.Array:
    """``column`` as ``target``; structs field by field by name (a missing field is null)."""
    if pa.types.is_struct(target) and not pa.types.is_struct(column.type) and target.names == ["value"]:
        # A Protobuf wrapper (google.protobuf.Int32Value, ...): the table holds the scalar it wraps.
        inner = _conform(column, target.field(0).type)
        return pa.StructArray.from_arrays([inner], fields=list(target), mask=column.is_null())
    if pa.types.is_struct(target) and pa.types.is_struct(column.type):
        names = [column.type.field(i).name for i in range(column.type.num_fields)]
        children = dict(zip(names, column.flatten(), strict=True))
        arrays = [
            _conform(children[f.name], f.type) if f.name in children else pa.nulls(len(column), f.type)
            for f in target
        ]
        return pa.StructArray.from_arrays(arrays, fields=list(target), mask=column.is_null())
    return column.cast(target)


def _column(rows: pa.Table, name: str) -> pa.Array:
    return rows.column(name).combine_chunks()
