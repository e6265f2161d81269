"""Avro columns in Confluent's wire format, decoded and encoded an Arrow batch at a time.

Wire format (what Confluent's `AvroSerializer` writes and `AvroDeserializer` reads)::

    byte 0      magic byte, 0
    bytes 1..4  schema id, big-endian signed 32-bit, as the schema registry assigned it
    bytes 5..   the datum in Avro's binary encoding, written with that schema (no container header)

Decoding (`AvroColumnDecoder`): the key or value column of one Arrow batch of records is split into
schema id and body; each record is read with its *writer's* schema (fetched by id through `lookup`, once
per id and process) and resolved to the *reader* schema -- the subject's latest when the query started --
by Avro's resolution rules (fastavro's `schemaless_reader(fo, writer, reader)`): a field the writer did not
have gets the reader's default, a field the reader does not have is skipped, int widens to long, and so
on. So records written under v1 read under v2 carry v2's defaults. When the writer's schema is the reader's
own, resolution is skipped. The decoded dicts become one Arrow struct array of the column's Spark type
(converted by pyspark's own `to_arrow_schema`, so Spark accepts the batch). A null payload (a tombstone)
is a null struct. A payload that is not in the wire format, names an unknown schema id, does not decode,
or has bytes left over fails with `AvroDecodeError` naming topic, partition and offset.

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
from fastavro import parse_schema, schemaless_reader, schemaless_writer
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import DataType, StructField, StructType

from strom.spark.avro_types import has_map, maps_as_dicts

MAGIC = 0
_HEADER = struct.Struct(">bi")
HEADER_SIZE = _HEADER.size


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
        self._parsed: Any = None
        self._writers: dict[int, Any] = {}
        self._arrow: pa.DataType | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_parsed": None, "_writers": {}, "_arrow": None}

    @property
    def data_type(self) -> DataType:
        """The column's Spark type."""
        return self._data_type

    def decode(
        self,
        payloads: list[bytes | None],
        offsets: list[int],
        topic: str,
        partition: int,
        lookup: Callable[[int], str],
    ) -> pa.Array:
        """A struct array of the decoded payloads (null for a null payload).

        Raises:
            AvroDecodeError: naming the topic, partition and offset of the first bad payload.
        """
        if self._parsed is None:
            self._parsed = parse_schema(json.loads(self._reader_json))
            self._arrow = arrow_type(self._data_type)
        reader, writers = self._parsed, self._writers
        rows: list[Any] = []
        append = rows.append
        for i, payload in enumerate(payloads):
            if payload is None:
                append(None)
                continue
            try:
                schema_id, body = split(payload)
                writer = writers.get(schema_id)
                if writer is None:
                    writer = self._writer_schema(schema_id, lookup)
                buffer = io.BytesIO(body)
                if writer is reader:
                    append(schemaless_reader(buffer, reader, None))
                else:
                    append(schemaless_reader(buffer, writer, reader))
                if buffer.tell() != len(body):
                    raise ValueError(f"{len(body) - buffer.tell()} bytes left after the Avro datum")
            except Exception as e:
                raise AvroDecodeError(
                    f"Cannot decode the Avro {self._column} of the record at offset {offsets[i]} of "
                    f"{topic}-{partition}: {type(e).__name__}: {e}"
                ) from e
        try:
            return pa.array(rows, type=self._arrow)
        except (pa.ArrowException, TypeError, ValueError) as e:
            raise AvroDecodeError(
                f"Cannot convert the Avro {self._column}s at offsets {offsets[0]}..{offsets[-1]} of "
                f"{topic}-{partition} to {self._data_type.simpleString()}: {e}"
            ) from e

    def _writer_schema(self, schema_id: int, lookup: Callable[[int], str]) -> Any:
        if schema_id == self._reader_id:
            parsed = self._parsed
        else:
            parsed = parse_schema(json.loads(lookup(schema_id)))
        self._writers[schema_id] = parsed
        return parsed


class AvroColumnEncoder:
    """Encodes a struct column with one registered schema into wire-format payloads."""

    def __init__(self, schema: str, schema_id: int, data_type: DataType) -> None:
        self._schema_json = schema
        self._schema_id = schema_id
        self._data_type = data_type
        self._parsed: Any = None

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_parsed": None}

    def encode(self, column: pa.Array) -> pa.Array:
        """A binary array of framed Avro payloads (null rows stay null)."""
        if self._parsed is None:
            self._parsed = parse_schema(json.loads(self._schema_json))
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
            schemaless_writer(buffer, self._parsed, maps_as_dicts(self._data_type, row) if convert else row)
            out.append(buffer.getvalue())
        return pa.array(out, pa.binary())
