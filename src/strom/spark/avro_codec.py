"""Avro columns in Confluent's wire format, decoded and encoded an Arrow batch at a time.

Wire format (what Confluent's `AvroSerializer` writes and `AvroDeserializer` reads)::

    byte 0      magic byte, 0
    bytes 1..4  schema id, big-endian signed 32-bit, as the schema registry assigned it
    bytes 5..   the datum in Avro's binary encoding, written with that schema (no container header)

Decoding (`AvroColumnDecoder`): the key or value column of one Arrow batch of records is grouped by
schema id (usually one group); each record is read with its *writer's* schema (fetched by id through
`lookup`, once per id and process) and resolved to the *reader* schema -- the subject's latest when the
query started -- by Avro's resolution rules: a field the writer did not have gets the reader's default, a
field the reader does not have is skipped, int widens to long, and so on. So records written under v1
read under v2 carry v2's defaults. Each group's bodies are cut out of the column by Arrow and decoded as
one block of an in-memory Avro object container file (`avro_container`), in this order of preference:

1. natively (`avro_native`, polars' Rust reader straight into Arrow columns, resolution as Arrow casts)
   when the writer/reader pair is one it covers (flat records of primitives) -- no Python object per
   record, also for batches of several schema ids and nulls (`_decode_groups_natively`);
2. fastavro's block reader (`_read_block`), whose dicts become one Arrow struct array of the column's
   Spark type (converted by pyspark's own `to_arrow_schema`, so Spark accepts the batch);
3. if that fails, record by record (`schemaless_reader`), which names the bad record.

A null payload (a tombstone) is a null struct. A payload that is not in the wire format, names an unknown
schema id, does not decode, or has bytes left over fails with `AvroDecodeError` naming topic, partition
and offset.

Encoding (`AvroColumnEncoder`): a struct column's rows (Arrow `to_pylist`, maps turned into dicts) are
written with one schema and framed with its id.
"""

from __future__ import annotations

import io
import json
import struct
from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from fastavro import block_reader, parse_schema, schemaless_reader, schemaless_writer
from fastavro.types import Schema
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import DataType, StructField, StructType

from strom.spark import avro_container, avro_native
from strom.spark.avro_types import has_map, maps_as_dicts
from strom.spark.avro_unions import Converter, datum_converter, row_converter

MAGIC = 0
_HEADER = struct.Struct(">bi")
HEADER_SIZE = _HEADER.size
_MAX_BINARY = 2**31 - 1
_MAX_GROUPS = 16  # schema ids in one batch decoded natively; more go record by record


class AvroDecodeError(ValueError):
    """A record whose key or value is not a decodable Avro payload in Confluent's wire format."""


def frame(schema_id: int, body: bytes) -> bytes:
    """Confluent's wire format: magic byte, schema id, Avro body."""
    return _HEADER.pack(MAGIC, schema_id) + body


def split(payload: bytes) -> tuple[int, memoryview]:
    """(schema id, Avro body) of a wire-format payload.

    Raises:
        ValueError: too short, or the magic byte is not 0.
    """
    if len(payload) < HEADER_SIZE:
        raise ValueError(f"{len(payload)} bytes is shorter than the 5-byte wire-format header")
    magic, schema_id = _HEADER.unpack_from(payload)
    if magic != MAGIC:
        raise ValueError(f"magic byte {magic}, expected {MAGIC} (not Confluent's Avro wire format)")
    return schema_id, memoryview(payload)[HEADER_SIZE:]


def _by_header(payloads: list[bytes | None]) -> dict[bytes, list[int]]:
    """Indices of the non-null payloads by their first 5 bytes (magic byte and schema id), in order."""
    groups: dict[bytes, list[int]] = {}
    if None not in payloads:
        first = payloads[0][:HEADER_SIZE] if payloads else b""  # type: ignore[index]
        if all(p.startswith(first) for p in payloads):  # type: ignore[union-attr]
            return {first: list(range(len(payloads)))} if payloads else {}
    for i, payload in enumerate(payloads):
        if payload is not None:
            groups.setdefault(payload[:HEADER_SIZE], []).append(i)
    return groups


def _bodies(payloads: pa.Array) -> tuple[pa.Array, memoryview]:
    """The Avro bodies of non-null wire-format `payloads` (their headers cut off by Arrow) and the
    bytes they span in its data buffer, concatenated."""
    # An explicit stop: pyarrow 26 overflows computing the output size with the default one.
    bodies = pc.binary_slice(payloads, HEADER_SIZE, _MAX_BINARY)
    ends = offsets_of(bodies)
    return bodies, memoryview(bodies.buffers()[2])[ends[0].as_py() : ends[-1].as_py()]


def offsets_of(binary: pa.Array) -> pa.Array:
    """The n + 1 value offsets of a binary array into its data buffer (`BinaryArray` has no accessor)."""
    return pa.Array.from_buffers(
        pa.int32(), len(binary) + 1, [None, binary.buffers()[1]], offset=binary.offset
    )


def arrow_type(data_type: DataType) -> pa.DataType:
    """The Arrow type Spark expects for a column of `data_type`."""
    return to_arrow_schema(StructType([StructField("c", data_type)]), timezone="UTC").field(0).type


class AvroColumnDecoder:
    """Decodes one column (key or value) of record batches; picklable, clients opened by `lookup`."""

    def __init__(self, reader_schema: str, reader_id: int, data_type: DataType, column: str) -> None:
        self._reader_json = reader_schema
        self._reader_id = reader_id
        self._data_type = data_type
        self._column = column
        self._parsed: Schema | None = None
        self._writers: dict[int, Schema] = {}
        self._block_headers: dict[int, bytes] = {}
        self._native: dict[int, avro_native.NativePlan | None] = {}
        self._arrow: pa.DataType | None = None
        self._unions: Converter | None = None

    def __getstate__(self) -> dict[str, object]:
        cleared: dict[str, object] = {
            "_parsed": None,
            "_writers": {},
            "_block_headers": {},
            "_native": {},
            "_arrow": None,
            "_unions": None,
        }
        return {**self.__dict__, **cleared}

    @property
    def data_type(self) -> DataType:
        """The column's Spark type."""
        return self._data_type

    @property
    def reader_schema(self) -> str:
        """The reader schema's text."""
        return self._reader_json

    def decode(
        self,
        values: pa.Array,
        offsets: pa.Array,
        topic: str,
        partition: int,
        lookup: Callable[[int], str],
    ) -> pa.Array:
        """A struct array of the decoded `values` (binary; null stays null); `offsets` name records.

        Raises:
            AvroDecodeError: naming the topic, partition and offset of the first bad payload.
        """
        if self._parsed is None:
            self._parsed = parse_schema(json.loads(self._reader_json))
            self._arrow = arrow_type(self._data_type)
            self._unions = row_converter(json.loads(self._reader_json))
        ends = (offsets[0].as_py(), offsets[-1].as_py()) if len(offsets) else (None, None)
        where = (topic, partition, *ends)
        found = self._decode_one_schema(values, lookup, where)
        if found is None:
            found = self._decode_groups_natively(values, lookup)
        if found is None:
            found = self._decode_mixed(values.to_pylist(), offsets.to_pylist(), topic, partition, lookup)
        return found

    def _to_arrow(self, rows: list[Any], where: tuple[str, int, int | None, int | None]) -> pa.Array:
        try:
            if self._unions is not None:
                rows = [self._unions(row) for row in rows]
            return pa.array(rows, type=self._arrow)
        except (pa.ArrowException, TypeError, ValueError) as e:
            topic, partition, first, last = where
            raise AvroDecodeError(
                f"Cannot convert the Avro {self._column}s at offsets {first}..{last} of "
                f"{topic}-{partition} to {self._data_type.simpleString()}: {e}"
            ) from e

    def _read_native(self, schema_id: int, data: bytes | memoryview, lengths: pa.Array) -> pa.Array | None:
        """The block decoded natively (`avro_native`), or None when not covered or not exact."""
        native = self._native.get(schema_id)
        if native is None:
            return None
        try:
            return avro_native.decode(native, data, lengths, self._arrow)
        except Exception:
            return None

    def _decode_one_schema(
        self, values: pa.Array, lookup: Callable[[int], str], where: tuple[str, int, int | None, int | None]
    ) -> pa.Array | None:
        """The common case, without a Python object per payload: no nulls and one schema id. The
        bodies are cut out of the column's data buffer by Arrow. None when the case does not apply or
        anything fails (the general path then finds and names the bad record)."""
        if len(values) == 0 or values.null_count:
            return None
        headers = pc.binary_slice(values, 0, HEADER_SIZE)
        first = headers[0].as_py()
        if len(first) != HEADER_SIZE or first[0] != MAGIC or not pc.all(pc.equal(headers, first)).as_py():
            return None
        try:
            schema_id, _ = split(first)
            writer = self._writers.get(schema_id) or self._writer_schema(schema_id, lookup)
            bodies, data = _bodies(values)
            native = self._read_native(schema_id, data, pc.binary_length(bodies))
            if native is not None:
                return native
            rows = self._read_block(schema_id, writer, data, len(bodies))
        except Exception:
            return None
        return self._to_arrow(rows, where)

    def _decode_groups_natively(self, values: pa.Array, lookup: Callable[[int], str]) -> pa.Array | None:
        """Nulls and a few schema ids (records of several schema versions), still without a Python
        object per payload: Arrow groups the bodies by header, each group is decoded natively, and the
        rows are put back in order (nulls stay null). None unless every group decodes natively."""
        headers = pc.binary_slice(values, 0, HEADER_SIZE)
        distinct = pc.unique(headers.drop_null()).to_pylist()
        if not distinct or len(distinct) > _MAX_GROUPS:
            return None
        parts, rows = [], []
        try:
            for header in distinct:
                schema_id, _ = split(header)
                if len(header) != HEADER_SIZE:
                    return None
                if schema_id not in self._writers:
                    self._writer_schema(schema_id, lookup)
                mask = pc.fill_null(pc.equal(headers, header), False)
                bodies, data = _bodies(values.filter(mask))
                part = self._read_native(schema_id, data, pc.binary_length(bodies))
                if part is None:
                    return None
                parts.append(part)
                rows.append(pc.indices_nonzero(mask))
        except Exception:
            return None
        # The groups' row numbers, concatenated, are a permutation of the non-null rows: sorting it
        # gives, for each non-null row in column order, its place among the decoded rows.
        decoded = pa.concat_arrays(parts).take(pc.sort_indices(pa.concat_arrays(rows)))
        if not values.null_count:
            return decoded
        valid = pc.is_valid(values)
        rank = pc.subtract(pc.cumulative_sum(pc.cast(valid, pa.int64())), 1)
        return decoded.take(pc.if_else(valid, rank, pa.scalar(None, pa.int64())))

    def _decode_mixed(
        self,
        payloads: list[bytes | None],
        offsets: list[int],
        topic: str,
        partition: int,
        lookup: Callable[[int], str],
    ) -> pa.Array:
        """Any column: nulls, several schema ids, bad payloads (named by their offset). Each schema id's
        records are decoded as one group, then put back in the column's order."""
        where = f"{topic}-{partition}"
        span = (topic, partition, offsets[0] if offsets else None, offsets[-1] if offsets else None)
        parts: list[pa.Array] = []
        positions: list[int | None] = [None] * len(payloads)
        decoded_count = 0
        for header, indices in _by_header(payloads).items():
            try:
                schema_id, _ = split(header)
                writer = self._writers.get(schema_id) or self._writer_schema(schema_id, lookup)
            except Exception as e:
                raise AvroDecodeError(
                    f"Cannot decode the Avro {self._column} of the record at offset {offsets[indices[0]]} of "
                    f"{where}: {type(e).__name__}: {e}"
                ) from e
            bodies = [payloads[i][HEADER_SIZE:] for i in indices]  # type: ignore[index]
            data = b"".join(bodies)
            part = self._read_native(schema_id, data, pa.array([len(b) for b in bodies], pa.int64()))
            if part is None:
                try:
                    decoded = self._read_block(schema_id, writer, data, len(bodies))
                except Exception:
                    # Record by record: raises naming the culprit (or, if each record reads, keeps them).
                    decoded = [
                        self._read_one(writer, body, offsets[i], where)
                        for i, body in zip(indices, bodies, strict=True)
                    ]
                part = self._to_arrow(decoded, span)
            parts.append(part)
            for i in indices:
                positions[i] = decoded_count
                decoded_count += 1
        if not parts:
            return pa.nulls(len(payloads), self._arrow)
        if len(parts) == 1 and decoded_count == len(payloads):
            return parts[0]  # one schema id, no nulls: already in order
        return pa.concat_arrays(parts).take(pa.array(positions, pa.int64()))

    def _read_block(self, schema_id: int, writer: Schema, data: bytes | memoryview, count: int) -> list[Any]:
        """Every body at once, as one block of an Avro object container file in memory.

        fastavro's per-record `schemaless_reader` re-prepares its schemas on every call; its block reader
        does not (15-25% less CPU per record here). The block must be consumed exactly: a body
        shorter or longer than its datum shifts the records after it, which then fail to decode or end
        off the block's end (only a shift that happened to decode validly up to exactly the end would go
        unnoticed). Any failure sends the group to the record-by-record path, which names the record.
        """
        header = self._block_headers.get(schema_id)
        if header is None:
            header = self._block_headers[schema_id] = avro_container.header(writer)
        block = avro_container.block(header, count, data)
        reader = None if writer is self._parsed else self._parsed
        rows: list[Any] = []
        named = self._unions is not None  # general unions: named branches come as (name, value)
        for read in block_reader(
            io.BytesIO(block), reader_schema=reader, return_named_type=named, return_named_type_override=named
        ):
            rows.extend(read)
            consumed = getattr(read, "bytes_").tell()  # noqa: B009 - not in fastavro's type stubs
            if consumed != len(data):
                raise ValueError(f"{len(data) - consumed} bytes of the block left unread")
        if len(rows) != count:
            raise ValueError(f"{len(rows)} records in a block of {count}")
        return rows

    def _read_one(self, writer: Schema, body: bytes, offset: int, where: str) -> Any:
        reader = None if writer is self._parsed else self._parsed
        try:
            buffer = io.BytesIO(body)
            named = self._unions is not None
            row = schemaless_reader(
                buffer, writer, reader, return_named_type=named, return_named_type_override=named
            )
            if buffer.tell() != len(body):
                raise ValueError(f"{len(body) - buffer.tell()} bytes left after the Avro datum")
        except Exception as e:
            raise AvroDecodeError(
                f"Cannot decode the Avro {self._column} of the record at offset {offset} of {where}: "
                f"{type(e).__name__}: {e}"
            ) from e
        return row

    def _writer_schema(self, schema_id: int, lookup: Callable[[int], str]) -> Schema:
        reader = json.loads(self._reader_json)
        if schema_id == self._reader_id and self._parsed is not None:
            parsed, schema = self._parsed, reader
        else:
            schema = json.loads(lookup(schema_id))
            parsed = parse_schema(schema)
        self._native[schema_id] = avro_native.plan(schema, reader)
        self._writers[schema_id] = parsed
        return parsed


class AvroColumnEncoder:
    """Encodes a struct column with one registered schema into wire-format payloads."""

    def __init__(self, schema: str, schema_id: int, data_type: DataType) -> None:
        self._schema_json = schema
        self._schema_id = schema_id
        self._data_type = data_type
        self._parsed: Schema | None = None
        self._unions: Converter | None = None

    def __getstate__(self) -> dict[str, object]:
        return {**self.__dict__, "_parsed": None, "_unions": None}

    def encode(self, column: pa.Array) -> pa.Array:
        """A binary array of framed Avro payloads (null rows stay null)."""
        if self._parsed is None:
            self._parsed = parse_schema(json.loads(self._schema_json))
            self._unions = datum_converter(json.loads(self._schema_json))
        header = _HEADER.pack(MAGIC, self._schema_id)
        rows = column.to_pylist()
        convert = has_map(self._data_type)
        out: list[bytes | None] = []
        buffer = io.BytesIO()
        for row in rows:
            if row is None:
                out.append(None)
                continue
            buffer.seek(0)
            buffer.truncate()
            buffer.write(header)
            datum = maps_as_dicts(self._data_type, row) if convert else row
            schemaless_writer(buffer, self._parsed, self._unions(datum) if self._unions else datum)
            out.append(buffer.getvalue())
        return pa.array(out, pa.binary())
