"""Typed Avro reads and writes: schema lookups on the driver, batch transforms on the executors.

Theory of operation
-------------------
Reading. When a query starts, the driver asks the registry for the latest schema of each Avro subject
(`AvroOptions`); that schema is the reader schema for the whole query, and its Spark type (`avro_types`)
replaces `binary` in the `key`/`value` column of the source's schema. A streaming query keeps that reader
schema while producers move on to newer versions: their records are resolved to it (new fields dropped,
promoted types narrowed back only where Avro allows), so the pipeline keeps running; restart it to pick up
the new version. `AvroRead` is pickled to the executors with the reader schemas; each task decodes the
Arrow batches its fetcher yields (`avro_codec`), fetching writers' schemas by id from the registry once
per Python worker process (`_SCHEMAS`).

Writing. The driver settles the schema once: the subject's latest (the struct's fields must match its
fields; Avro fields with a default may be missing), or, with `auto.register.schemas=true`, a schema
derived from the struct's Spark type, registered under the subject (the registry returns the existing id
when it is already there). Tasks encode the struct column of each Arrow batch into wire-format bytes
before the ordinary sink produces them.

The registry is reached with confluent-kafka's `SchemaRegistryClient`, created lazily and never pickled.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql.types import BinaryType, StructField, StructType

from strom.spark.avro_codec import AvroColumnDecoder, AvroColumnEncoder
from strom.spark.avro_options import AvroOptions
from strom.spark.avro_types import AvroTypeError, avro_schema, spark_type
from strom.spark.options import KafkaOptionError

_COLUMNS = ("key", "value")
_SCHEMAS: dict[tuple[str, int], str] = {}  # (registry URL, id) -> schema string, per process
_SCHEMAS_LOCK = threading.Lock()


class Registry:
    """confluent-kafka's `SchemaRegistryClient`, opened on first use (picklable)."""

    def __init__(self, config: dict[str, str]) -> None:
        self._config = dict(config)
        self._client: Any = None

    def __getstate__(self) -> dict[str, Any]:
        return {"_config": self._config, "_client": None}

    def _open(self) -> Any:
        if self._client is None:
            from confluent_kafka.schema_registry import SchemaRegistryClient

            self._client = SchemaRegistryClient(self._config)
        return self._client

    def latest(self, subject: str) -> tuple[int, str]:
        """(id, schema string) of the subject's latest version."""
        from confluent_kafka.schema_registry.error import SchemaRegistryError

        try:
            registered = self._open().get_latest_version(subject)
        except SchemaRegistryError as e:
            raise KafkaOptionError(
                f"schema registry {self._config.get('url')}: no schema for subject {subject!r} ({e})"
            ) from e
        return int(registered.schema_id), str(registered.schema.schema_str)

    def schema(self, schema_id: int) -> str:
        """The schema string registered with `schema_id` (cached for the life of the process)."""
        key = (self._config.get("url", ""), schema_id)
        with _SCHEMAS_LOCK:
            found = _SCHEMAS.get(key)
        if found is None:
            found = str(self._open().get_schema(schema_id).schema_str)
            with _SCHEMAS_LOCK:
                _SCHEMAS[key] = found
        return found

    def register(self, subject: str, schema: str) -> int:
        from confluent_kafka.schema_registry import Schema

        return int(self._open().register_schema(subject, Schema(schema, "AVRO")))


def _subjects(avro: AvroOptions) -> dict[str, str]:
    pairs = {"key": avro.key_subject, "value": avro.value_subject}
    return {column: subject for column, subject in pairs.items() if subject is not None}


@dataclass
class AvroRead:
    """What executors need to decode key and/or value (picklable)."""

    registry: Registry
    decoders: dict[str, AvroColumnDecoder]

    def read_schema(self, base: StructType) -> StructType:
        """The source schema with the Avro columns' types in place of `binary`."""
        return StructType(
            [
                StructField(f.name, self.decoders[f.name].data_type, True) if f.name in self.decoders else f
                for f in base.fields
            ]
        )

    def apply(
        self, batches: Iterator[pa.RecordBatch], topic: str, partition: int
    ) -> Iterator[pa.RecordBatch]:
        """Decode the Avro columns of every batch."""
        lookup = self.registry.schema
        for batch in batches:
            names = batch.schema.names
            offsets = batch.column(names.index("offset"))
            arrays, fields = list(batch.columns), list(batch.schema)
            for column, decoder in self.decoders.items():
                i = names.index(column)
                arrays[i] = decoder.decode(arrays[i], offsets, topic, partition, lookup)
                fields[i] = pa.field(column, arrays[i].type)
            yield pa.RecordBatch.from_arrays(arrays, schema=pa.schema(fields))


def plan_read(avro: AvroOptions) -> AvroRead | None:
    """Driver: fetch the subjects' latest schemas and prepare their decoders (None: no Avro column)."""
    if not avro.enabled:
        return None
    registry = Registry(avro.registry_config)
    decoders = {}
    for column, subject in _subjects(avro).items():
        schema_id, schema = registry.latest(subject)
        try:
            data_type = spark_type(json.loads(schema))
        except AvroTypeError as e:
            raise KafkaOptionError(f"subject {subject!r} (schema id {schema_id}): {e}") from e
        decoders[column] = AvroColumnDecoder(schema, schema_id, data_type, column)
    return AvroRead(registry, decoders)


@dataclass
class AvroWrite:
    """What executors need to encode key and/or value struct columns (picklable)."""

    encoders: dict[str, AvroColumnEncoder]

    def sink_schema(self, schema: StructType) -> StructType:
        """The input schema as the plain sink will see it: Avro columns become binary."""
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


def plan_write(avro: AvroOptions, schema: StructType) -> AvroWrite | None:
    """Driver: settle each Avro column's schema (latest, or derived and registered).

    Raises:
        KafkaOptionError: a missing or non-struct column, no schema under the subject, or a struct whose
            fields do not match the subject's schema.
    """
    if not avro.enabled:
        return None
    registry = Registry(avro.registry_config)
    types = {f.name.lower(): f.dataType for f in schema.fields}
    encoders = {}
    for column, subject in _subjects(avro).items():
        data_type = types.get(column)
        if not isinstance(data_type, StructType):
            found = data_type.simpleString() if data_type is not None else "missing"
            raise KafkaOptionError(f"{column}Format avro needs a struct {column} column, got {found}")
        if avro.auto_register:
            try:
                text = json.dumps(avro_schema(data_type))
            except AvroTypeError as e:
                raise KafkaOptionError(f"{column}: {e}") from e
            schema_id = registry.register(subject, text)
        else:
            schema_id, text = registry.latest(subject)
            _check_fields(data_type, json.loads(text), subject)
        encoders[column] = AvroColumnEncoder(text, schema_id, data_type)
    return AvroWrite(encoders)


def _check_fields(data_type: StructType, schema: Any, subject: str) -> None:
    if not isinstance(schema, dict) or schema.get("type") != "record":
        raise KafkaOptionError(f"subject {subject!r}: the latest schema is not a record")
    names = {f.name for f in data_type.fields}
    avro_fields = {str(f["name"]): f for f in schema.get("fields", [])}
    extra = sorted(names - set(avro_fields))
    missing = sorted(n for n, f in avro_fields.items() if n not in names and "default" not in f)
    if extra or missing:
        raise KafkaOptionError(
            f"the struct does not match the latest schema of subject {subject!r}: "
            f"fields not in the schema {extra}, schema fields without a default missing {missing} "
            "(or set auto.register.schemas=true)"
        )
