"""Typed reads and writes (Avro, Protobuf, JSON Schema): schema look-ups on the driver, batch transforms
on the executors.

Theory of operation
-------------------
Reading. When a query starts, the driver asks the registry for each typed column's reader schema: the
subject's latest version, or the pinned version or id (`TypedOptions`). Its Spark type (`avro_types`,
`protobuf_types`, `json_types`) replaces `binary` in the `key`/`value` column of the source's schema, and
stays the reader schema for the whole query: records written with newer versions are resolved to it by
the format's own rules (Avro's schema resolution; Protobuf's field numbers; JSON's property names), so the
pipeline keeps running as producers evolve; restart it to pick up a new version. `TypedRead` is pickled
to the executors with the reader schemas; each task decodes the Arrow batches its fetcher yields, one
column decoder per typed column, fetching writers' schemas by id once per Python worker process.

Bad records. `FAILFAST` (the default, as Spark's `from_avro`) fails the task with the decoder's error,
which names topic, partition and offset. `PERMISSIVE` decodes a failing batch record by record: a bad
record's typed column is null and the added column `_corrupt_<column>` (struct<bytes: binary, reason:
string>, null for good records) holds its raw bytes and the reason. With `deadLetterTopic` (streaming
reads) bad records are instead produced, raw, to that topic -- key, value and headers as read, plus
headers `strom.dlt.topic`, `strom.dlt.partition`, `strom.dlt.offset` and `strom.dlt.reason` -- and
left out of the stream; the task waits for their acknowledgement before it ends. A retried task writes
them again (the dead-letter topic is at-least-once).

Writing. The driver settles each typed column's schema once: the pinned one, the subject's latest (the
struct's fields must be the schema's), or, with `auto.register.schemas=true`, one derived from the
struct's Spark type and registered under the subject (the registry answers the existing id when it is
already there) -- the look-up-or-register of confluent-kafka's serializers. Tasks encode the struct
column of each Arrow batch into wire-format bytes before the ordinary sink produces them.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import pyarrow as pa
from pyspark.sql.types import BinaryType, DataType, StringType, StructField, StructType

from strom._util.json_types import JsonValue
from strom.registry.errors import RegistryError
from strom.spark import protobuf_codec
from strom.spark.avro_codec import AvroColumnDecoder, AvroColumnEncoder, arrow_type
from strom.spark.avro_types import AvroTypeError, avro_schema
from strom.spark.avro_types import spark_type as avro_spark_type
from strom.spark.errors import KafkaOptionError
from strom.spark.json_codec import JsonColumnDecoder, JsonColumnEncoder
from strom.spark.json_types import JsonTypeError, json_schema
from strom.spark.json_types import spark_type as json_spark_type
from strom.spark.protobuf_types import ProtobufTypeError, check_fields, proto_schema
from strom.spark.registry_client import Registry, SchemaText
from strom.spark.typed_options import ColumnFormat, TypedOptions

if TYPE_CHECKING:
    from confluent_kafka import KafkaError, Message, Producer

_SCHEMA_TYPES = {"avro": "AVRO", "protobuf": "PROTOBUF", "json": "JSON"}
CORRUPT_TYPE = StructType([StructField("bytes", BinaryType()), StructField("reason", StringType())])
_CORRUPT_ARROW = pa.struct([pa.field("bytes", pa.binary()), pa.field("reason", pa.string())])


class ColumnDecoder(Protocol):
    """Decodes the key or value column of one Arrow batch."""

    @property
    def data_type(self) -> DataType: ...

    def decode(
        self, values: pa.Array, offsets: pa.Array, topic: str, partition: int, registry: Registry
    ) -> pa.Array: ...


class ColumnEncoder(Protocol):
    """Encodes a struct column of one Arrow batch into wire-format payloads."""

    def encode(self, column: pa.Array) -> pa.Array: ...


class AvroColumn:
    """The Avro decoder, which looks writers' schemas up by id only, as a `ColumnDecoder`."""

    def __init__(self, decoder: AvroColumnDecoder) -> None:
        self._decoder = decoder

    @property
    def data_type(self) -> DataType:
        return self._decoder.data_type

    @property
    def reader_schema(self) -> str:
        return self._decoder.reader_schema

    def decode(
        self, values: pa.Array, offsets: pa.Array, topic: str, partition: int, registry: Registry
    ) -> pa.Array:
        return self._decoder.decode(values, offsets, topic, partition, registry.schema)


def corrupt_column(column: str) -> str:
    """The name of the column PERMISSIVE mode adds for a typed column."""
    return f"_corrupt_{column}"


@dataclass
class TypedRead:
    """What executors need to decode key and/or value (picklable)."""

    registry: Registry
    decoders: dict[str, ColumnDecoder]
    permissive: bool = False
    dead_letter_topic: str | None = None
    producer_config: dict[str, str] = field(default_factory=dict)

    def read_schema(self, base: StructType) -> StructType:
        """The source schema with the typed columns' types in place of `binary` (and, in PERMISSIVE
        mode, a `_corrupt_<column>` column per typed column at the end)."""
        fields = [
            StructField(f.name, self.decoders[f.name].data_type, True) if f.name in self.decoders else f
            for f in base.fields
        ]
        if self.permissive:
            fields.extend(StructField(corrupt_column(c), CORRUPT_TYPE, True) for c in self.decoders)
        return StructType(fields)

    def apply(
        self, batches: Iterator[pa.RecordBatch], topic: str, partition: int
    ) -> Iterator[pa.RecordBatch]:
        """Decode the typed columns of every batch (bad records per the mode)."""
        dead_letters = (
            _DeadLetters(self.dead_letter_topic, self.producer_config) if self.dead_letter_topic else None
        )
        for batch in batches:
            names = batch.schema.names
            offsets = batch.column(names.index("offset"))
            arrays, fields = list(batch.columns), list(batch.schema)
            corrupt: list[tuple[str, pa.Array]] = []
            bad_rows: dict[int, str] = {}
            for column, decoder in self.decoders.items():
                i = names.index(column)
                raw = arrays[i]
                if self.permissive or dead_letters is not None:
                    arrays[i], reasons = self._decode_tolerant(decoder, raw, offsets, topic, partition)
                    for row, reason in reasons.items():
                        bad_rows.setdefault(row, reason)
                    bytes_ = [raw[r].as_py() if r in reasons else None for r in range(len(raw))]
                    corrupt.append((column, _corrupt_array(bytes_, reasons)))
                else:
                    arrays[i] = decoder.decode(raw, offsets, topic, partition, self.registry)
                fields[i] = pa.field(column, arrays[i].type)
            if self.permissive:
                for column, array in corrupt:
                    arrays.append(array)
                    fields.append(pa.field(corrupt_column(column), array.type))
            decoded = pa.RecordBatch.from_arrays(arrays, schema=pa.schema(fields))
            if dead_letters is not None and bad_rows:
                dead_letters.send(batch, bad_rows, topic, partition)
                keep = pa.array([r not in bad_rows for r in range(batch.num_rows)])
                decoded = decoded.filter(keep)
            yield decoded
        if dead_letters is not None:
            dead_letters.close()

    def _decode_tolerant(
        self, decoder: ColumnDecoder, values: pa.Array, offsets: pa.Array, topic: str, partition: int
    ) -> tuple[pa.Array, dict[int, str]]:
        """The decoded column and the reasons of its bad rows (decoded record by record only when the
        whole batch does not decode)."""
        try:
            return decoder.decode(values, offsets, topic, partition, self.registry), {}
        except Exception:
            pass
        parts: list[pa.Array | None] = []
        reasons: dict[int, str] = {}
        arrow = None
        for row in range(len(values)):
            try:
                part = decoder.decode(
                    values.slice(row, 1), offsets.slice(row, 1), topic, partition, self.registry
                )
                arrow = part.type
                parts.append(part)
            except Exception as e:
                reasons[row] = str(e)
                parts.append(None)
        if arrow is None:
            arrow = arrow_type(decoder.data_type)
        return pa.concat_arrays([p if p is not None else pa.nulls(1, arrow) for p in parts]), reasons


def _corrupt_array(raw: list[Any], reasons: dict[int, str]) -> pa.Array:
    rows = [{"bytes": raw[r], "reason": reasons[r]} if r in reasons else None for r in range(len(raw))]
    return pa.array(rows, type=_CORRUPT_ARROW)


class _DeadLetters:
    """The producer of one task's bad records (opened on the first one, flushed at the task's end)."""

    def __init__(self, topic: str, config: dict[str, str]) -> None:
        self._topic = topic
        self._config = config
        self._producer: Producer | None = None
        self._errors: list[KafkaError] = []

    def send(self, batch: pa.RecordBatch, rows: dict[int, str], topic: str, partition: int) -> None:
        from confluent_kafka import Producer

        if self._producer is None:
            self._producer = Producer({**self._config, "enable.idempotence": True})
        names = batch.schema.names
        offsets = batch.column(names.index("offset"))
        keys, values = batch.column(names.index("key")), batch.column(names.index("value"))
        headers = batch.column(names.index("headers")) if "headers" in names else None
        for row, reason in rows.items():
            extra = (
                [(h["key"], h["value"]) for h in (headers[row].as_py() or [])] if headers is not None else []
            )
            extra += [
                ("strom.dlt.topic", topic.encode()),
                ("strom.dlt.partition", str(partition).encode()),
                ("strom.dlt.offset", str(offsets[row].as_py()).encode()),
                ("strom.dlt.reason", reason.encode()),
            ]
            self._producer.produce(
                self._topic,
                values[row].as_py(),
                keys[row].as_py(),
                headers=extra,
                on_delivery=self._on_delivery,
            )

    def _on_delivery(self, err: KafkaError | None, _msg: Message) -> None:
        if err is not None:
            self._errors.append(err)

    def close(self) -> None:
        """Raises: KafkaException: a dead letter was not delivered."""
        from confluent_kafka import KafkaError, KafkaException

        if self._producer is None:
            return
        remaining = self._producer.flush(60)
        if self._errors:
            raise KafkaException(self._errors[0])
        if remaining:
            raise KafkaException(
                KafkaError(KafkaError._MSG_TIMED_OUT, f"{remaining} dead letters not delivered")
            )


def _reader_schema(registry: Registry, column: ColumnFormat) -> SchemaText:
    if column.schema_id is not None:
        schema = registry.by_id(column.schema_id)
    else:
        schema = registry.version(column.subject, column.version)
    expected = _SCHEMA_TYPES[column.format]
    if schema.schema_type != expected:
        raise KafkaOptionError(
            f"subject {column.subject!r} (schema id {schema.schema_id}) holds a {schema.schema_type} schema, "
            f"not {expected} as {column.format} needs"
        )
    return schema


def _decoder(registry: Registry, options: TypedOptions, name: str, column: ColumnFormat) -> ColumnDecoder:
    schema = _reader_schema(registry, column)
    where = f"subject {column.subject!r} (schema id {schema.schema_id})"
    try:
        if column.format == "avro":
            data_type = avro_spark_type(json.loads(schema.text))
            return AvroColumn(AvroColumnDecoder(schema.text, schema.schema_id, data_type, name))
        if column.format == "protobuf":
            message, data_type = protobuf_codec.reader_type(registry, schema, column.message)
            return protobuf_codec.ProtobufColumnDecoder(
                schema, message, data_type, name, options.emit_default_values
            )
        references = {n: json.loads(r.text) for n, r in registry.references(schema)}
        return JsonColumnDecoder(json_spark_type(json.loads(schema.text), references), name)
    except (AvroTypeError, ProtobufTypeError, JsonTypeError, RegistryError, ValueError) as e:
        raise KafkaOptionError(f"{where}: {e}") from e


def plan_read(options: TypedOptions, client_config: dict[str, str] | None = None) -> TypedRead | None:
    """Driver: fetch the typed columns' reader schemas and prepare their decoders (None: none typed)."""
    if not options.enabled:
        return None
    registry = Registry(options.registry_config)
    decoders = {name: _decoder(registry, options, name, column) for name, column in options.columns.items()}
    producer = {k: v for k, v in (client_config or {}).items() if k != "isolation.level"}
    return TypedRead(registry, decoders, options.permissive, options.dead_letter_topic, producer)


@dataclass
class TypedWrite:
    """What executors need to encode key and/or value struct columns (picklable)."""

    encoders: dict[str, ColumnEncoder]

    def sink_schema(self, schema: StructType) -> StructType:
        """The input schema as the plain sink will see it: typed columns become binary."""
        return StructType(
            [
                StructField(f.name, BinaryType(), True) if f.name.lower() in self.encoders else f
                for f in schema
            ]
        )

    def apply(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            lowered = [n.lower() for n in batch.schema.names]
            arrays, fields = list(batch.columns), list(batch.schema)
            for column, encoder in self.encoders.items():
                i = lowered.index(column)
                arrays[i] = encoder.encode(arrays[i])
                fields[i] = pa.field(batch.schema.names[i], pa.binary())
            yield pa.RecordBatch.from_arrays(arrays, schema=pa.schema(fields))


def _derived(data_type: StructType, column: ColumnFormat) -> str:
    """The schema text derived from a struct for `auto.register.schemas=true`."""
    if column.format == "avro":
        namespace, _, name = (column.record_name or "topLevelRecord").rpartition(".")
        return json.dumps(avro_schema(data_type, name, namespace))
    if column.format == "protobuf":
        return proto_schema(data_type, column.record_name)
    return json.dumps(json_schema(data_type, column.record_name))


def _encoder(
    registry: Registry, options: TypedOptions, name: str, column: ColumnFormat, data_type: StructType
) -> ColumnEncoder:
    schema_type = _SCHEMA_TYPES[column.format]
    if options.auto_register and column.schema_id is None and column.version is None:
        text = _derived(data_type, column)
        schema = SchemaText(registry.register(column.subject, text, schema_type), text, schema_type)
    else:
        schema = _reader_schema(registry, column)
    references = registry.references(schema)
    if column.format == "avro":
        _check_fields(data_type, json.loads(schema.text), column.subject)
        return AvroColumnEncoder(schema.text, schema.schema_id, data_type)
    if column.format == "protobuf":
        descriptor = protobuf_codec.CompiledSchema(schema, references).descriptor(column.message)
        check_fields(data_type, descriptor, column.subject)
        return protobuf_codec.ProtobufColumnEncoder(schema, references, descriptor.full_name)
    return JsonColumnEncoder(schema, references, data_type)


def plan_write(options: TypedOptions, schema: StructType) -> TypedWrite | None:
    """Driver: settle each typed column's schema (pinned, latest, or derived and registered).

    Raises:
        KafkaOptionError: a missing or non-struct column, no schema under the subject, or a struct whose
            fields do not match the subject's schema.
    """
    if not options.enabled:
        return None
    registry = Registry(options.registry_config)
    types = {f.name.lower(): f.dataType for f in schema.fields}
    encoders: dict[str, ColumnEncoder] = {}
    for name, column in options.columns.items():
        data_type = types.get(name)
        if not isinstance(data_type, StructType):
            found = data_type.simpleString() if data_type is not None else "missing"
            raise KafkaOptionError(f"{name}Format {column.format} needs a struct {name} column, got {found}")
        try:
            encoders[name] = _encoder(registry, options, name, column, data_type)
        except (AvroTypeError, ProtobufTypeError, JsonTypeError, RegistryError) as e:
            raise KafkaOptionError(f"{name}: {e}") from e
    return TypedWrite(encoders)


def _check_fields(data_type: StructType, schema: JsonValue, subject: str) -> None:
    if not isinstance(schema, Mapping) or schema.get("type") != "record":
        raise KafkaOptionError(f"subject {subject!r}: the latest schema is not a record")
    declared = schema.get("fields", [])
    if not isinstance(declared, list):
        raise KafkaOptionError(f"subject {subject!r}: the latest schema's fields are not a list")
    names = {f.name for f in data_type.fields}
    avro_fields = {str(f["name"]): f for f in declared if isinstance(f, Mapping)}
    extra = sorted(names - set(avro_fields))
    missing = sorted(n for n, f in avro_fields.items() if n not in names and "default" not in f)
    if extra or missing:
        raise KafkaOptionError(
            f"the struct does not match the latest schema of subject {subject!r}: "
            f"fields not in the schema {extra}, schema fields without a default missing {missing} "
            "(or set auto.register.schemas=true)"
        )
