"""JSON Schema columns in Confluent's wire format, decoded into and encoded from Arrow struct arrays.

Wire format (what confluent-kafka's `JSONSerializer` writes): the 5-byte header (magic byte 0, schema id)
followed by the value as UTF-8 JSON text.

Decoding: JSON carries its field names, so schema evolution needs no writer schema: every payload is
parsed and converted to the reader's Spark type (the subject's latest or pinned schema when the query
started) by name -- a property the reader does not know is dropped, one the writer did not send is null.
A batch is parsed at once by Arrow's JSON reader when that converts it exactly as the per-record path
would (`_decode_natively`); otherwise record by record.
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
import io
import json
from collections.abc import Callable
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyarrow import json as pa_json
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
from strom.spark.avro_types import has_map
from strom.spark.registry_client import Registry, SchemaText
from strom.spark.wire import HEADER, HEADER_SIZE, MAGIC, RecordDecodeError, split_header


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

    def __getstate__(self) -> dict[str, object]:
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
        fast = self._decode_natively(values, arrow)
        if fast is not None:
            return fast
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

    def _decode_natively(self, values: pa.Array, arrow: pa.DataType) -> pa.Array | None:
        """The column parsed by Arrow's JSON reader (C++, no Python object per field), or None when the
        batch is not the plain case -- a struct without maps, every payload a wire-format JSON object on
        one line -- or Arrow finds anything it will not convert exactly as `_converter` would (a value of
        another type: Arrow refuses where the Python path would keep JSON text or an integral float);
        the Python path then decodes the batch and names any bad record."""
        if not isinstance(self._data_type, StructType) or has_map(self._data_type) or len(values) == 0:
            return None
        valid = values.drop_null() if values.null_count else values
        if len(valid) == 0:
            return None
        magic = pc.equal(pc.binary_slice(valid, 0, 1), pa.scalar(b"\x00", pa.binary()))
        objects = pc.equal(pc.binary_slice(valid, HEADER_SIZE, HEADER_SIZE + 1), pa.scalar(b"{", pa.binary()))
        if not pc.all(pc.and_(magic, objects)).as_py():
            return None
        bodies = pc.binary_slice(valid, HEADER_SIZE, 2**31 - 1)
        try:
            table = pa_json.read_json(
                io.BytesIO(b"\n".join(bodies.to_pylist())),
                parse_options=pa_json.ParseOptions(
                    explicit_schema=pa.schema(list(arrow)), unexpected_field_behavior="ignore"
                ),
            )
        except (pa.ArrowException, ValueError):
            return None
        if table.num_rows != len(valid):
            return None  # a payload spanning lines, or several on one
        decoded = pa.StructArray.from_arrays(
            [column.combine_chunks() for column in table.columns], fields=list(arrow)
        )
        if not values.null_count:
            return decoded
        is_valid = pc.is_valid(values)
        rank = pc.subtract(pc.cumulative_sum(pc.cast(is_valid, pa.int64())), 1)
        return decoded.take(pc.if_else(is_valid, rank, pa.scalar(None, pa.int64())))


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

    def __getstate__(self) -> dict[str, object]:
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
