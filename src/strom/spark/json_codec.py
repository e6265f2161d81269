"""JSON Schema columns in Confluent's wire format, decoded into and encoded from Arrow struct arrays.

Wire format (what confluent-kafka's `JSONSerializer` writes): the 5-byte header (magic byte 0, schema id)
followed by the value as UTF-8 JSON text.

Decoding: JSON carries its field names, so schema evolution needs no writer schema: every payload is
parsed and converted to the reader's Spark type (the subject's latest or pinned schema when the query
started) by name -- a property the reader does not know is dropped, one the writer did not send is null.
The conversion (`_converter`, built once per column) checks types on the way: a string where the reader
expects a number fails the record, naming it; a value read into a `string` column that is not a string
is kept as its JSON text. The writer's schema id is not looked up (the reader's schema decides).

Encoding: each row becomes a JSON object (null fields left out, maps as objects, timestamps and dates as
ISO 8601 text, binary as base64), is validated against the schema as confluent-kafka's serializer does
(by the schema's own dialect, with its references), and is framed with the schema id.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
from collections.abc import Callable
from decimal import Decimal
from typing import Any

import pyarrow as pa
from pyspark.sql.types import (
    ArrayType,
    BooleanType,
    DataType,
    DateType,
    DoubleType,
    LongType,
    MapType,
    StringType,
    StructType,
    TimestampType,
)

from strom.spark.avro_codec import arrow_type
from strom.spark.registry_client import Registry, SchemaText
from strom.spark.wire import HEADER, MAGIC, RecordDecodeError, split_header


def _converter(data_type: DataType) -> Callable[[Any], Any]:
    """A function from a parsed JSON value to the Python value Arrow builds `data_type` from."""
    if isinstance(data_type, StructType):
        fields = [(f.name, _converter(f.dataType)) for f in data_type.fields]

        def struct(v: Any) -> Any:
            if not isinstance(v, dict):
                raise ValueError(f"expected an object, got {json.dumps(v)[:80]}")
            return {name: None if v.get(name) is None else convert(v[name]) for name, convert in fields}

        return struct
    if isinstance(data_type, ArrayType):
        element = _converter(data_type.elementType)

        def array(v: Any) -> Any:
            if not isinstance(v, list):
                raise ValueError(f"expected an array, got {json.dumps(v)[:80]}")
            return [None if x is None else element(x) for x in v]

        return array
    if isinstance(data_type, MapType):
        value = _converter(data_type.valueType)

        def mapping(v: Any) -> Any:
            if not isinstance(v, dict):
                raise ValueError(f"expected an object, got {json.dumps(v)[:80]}")
            return [(k, None if x is None else value(x)) for k, x in v.items()]

        return mapping
    if isinstance(data_type, StringType):
        return lambda v: v if isinstance(v, str) else json.dumps(v, separators=(",", ":"))
    if isinstance(data_type, LongType):
        return _integer
    if isinstance(data_type, DoubleType):
        return _number
    if isinstance(data_type, BooleanType):
        return _boolean
    if isinstance(data_type, TimestampType):
        return lambda v: _timestamp(_string(v))
    if isinstance(data_type, DateType):
        return lambda v: dt.date.fromisoformat(_string(v))
    raise ValueError(f"no JSON conversion to {data_type.simpleString()}")


def _integer(v: Any) -> int:
    if isinstance(v, int) and not isinstance(v, bool):
        return v
    if isinstance(v, float) and v.is_integer():
        return int(v)
    raise ValueError(f"expected an integer, got {json.dumps(v)[:80]}")


def _number(v: Any) -> float:
    if isinstance(v, int | float) and not isinstance(v, bool):
        return float(v)
    raise ValueError(f"expected a number, got {json.dumps(v)[:80]}")


def _boolean(v: Any) -> bool:
    if isinstance(v, bool):
        return v
    raise ValueError(f"expected a boolean, got {json.dumps(v)[:80]}")


def _string(v: Any) -> str:
    if isinstance(v, str):
        return v
    raise ValueError(f"expected a string, got {json.dumps(v)[:80]}")


def _timestamp(text: str) -> dt.datetime:
    parsed = dt.datetime.fromisoformat(text)
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=dt.UTC)


class JsonColumnDecoder:
    """Decodes one column (key or value) of record batches; picklable."""

    def __init__(self, data_type: DataType, column: str) -> None:
        self._data_type = data_type
        self._column = column
        self._state: Any = None

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_state": None}

    @property
    def data_type(self) -> DataType:
        return self._data_type

    def decode(
        self, values: pa.Array, offsets: pa.Array, topic: str, partition: int, registry: Registry
    ) -> pa.Array:
        """A struct array of the decoded `values` (null stays null).

        Raises:
            RecordDecodeError: naming the topic, partition and offset of the first bad payload.
        """
        if self._state is None:
            self._state = (_converter(self._data_type), arrow_type(self._data_type))
        convert, arrow = self._state
        rows: list[Any] = []
        loads = json.loads
        for payload, offset in zip(values.to_pylist(), offsets.to_pylist(), strict=True):
            if payload is None:
                rows.append(None)
                continue
            try:
                _, start = split_header(payload)
                rows.append(convert(loads(payload[start:])))
            except Exception as e:
                raise RecordDecodeError(
                    f"Cannot decode the JSON {self._column} of the record at offset {offset} of "
                    f"{topic}-{partition}: {type(e).__name__}: {e}"
                ) from e
        return pa.array(rows, type=arrow)


def _to_json(data_type: DataType, value: Any) -> Any:
    """An Arrow `to_pylist` value of `data_type` as JSON-ready Python: maps (pairs) as objects, null
    fields left out."""
    if value is None:
        return None
    if isinstance(data_type, StructType):
        fields = ((f.name, _to_json(f.dataType, value.get(f.name))) for f in data_type.fields)
        return {name: v for name, v in fields if v is not None}
    if isinstance(data_type, MapType):
        return {str(k): _to_json(data_type.valueType, v) for k, v in value}
    if isinstance(data_type, ArrayType):
        return [_to_json(data_type.elementType, v) for v in value]
    if isinstance(value, dt.datetime):
        return value.isoformat().replace("+00:00", "Z")
    if isinstance(value, dt.date):
        return value.isoformat()
    if isinstance(value, bytes):
        return base64.b64encode(value).decode("ascii")
    if isinstance(value, Decimal):
        return float(value)
    return value


class JsonColumnEncoder:
    """Encodes a struct column with one registered JSON Schema into validated wire-format payloads."""

    def __init__(
        self, schema: SchemaText, references: list[tuple[str, SchemaText]], data_type: DataType
    ) -> None:
        self._schema = schema
        self._references = references
        self._data_type = data_type
        self._validator: Any = None

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_validator": None}

    def _validate(self) -> Any:
        if self._validator is None:
            from jsonschema.validators import validator_for
            from referencing import Registry as Resources
            from referencing import Resource
            from referencing.jsonschema import DRAFT7

            resources = Resources().with_resources(
                (name, Resource.from_contents(json.loads(ref.text), default_specification=DRAFT7))
                for name, ref in self._references
            )
            schema = json.loads(self._schema.text)
            self._validator = validator_for(schema)(schema, registry=resources)
        return self._validator

    def encode(self, column: pa.Array) -> pa.Array:
        """A binary array of framed JSON payloads (null rows stay null).

        Raises:
            ValueError: a row the schema does not accept (naming the reason).
        """
        validator = self._validate()
        header = HEADER.pack(MAGIC, self._schema.schema_id)
        out: list[bytes | None] = []
        for row in column.to_pylist():
            if row is None:
                out.append(None)
                continue
            value = _to_json(self._data_type, row)
            error = next(iter(validator.iter_errors(value)), None)
            if error is not None:
                raise ValueError(
                    f"a row does not match the JSON Schema {self._schema.schema_id}: {error.message}"
                )
            out.append(header + json.dumps(value, separators=(",", ":")).encode())
        return pa.array(out, pa.binary())
