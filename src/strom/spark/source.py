"""The `strom` DataSource: Spark's Kafka connector, served by Strom through the Python Data Source API.

Theory of operation
-------------------
Spark instantiates `StromDataSource` with the query's options and asks it for a schema and for a reader
or writer. Options are parsed and validated here, once, into frozen option objects that are handed to the
reader/writer (and pickled with them to the executors), so a bad option fails the query on the driver
before any task runs. The schema is fixed, as in Spark's Kafka source; a user-supplied schema is refused.
`df.write.mode("overwrite")` is refused too: a topic can only be appended to.
"""

from __future__ import annotations

import logging

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
)
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from strom.spark.errors import KafkaOptionError
from strom.spark.lake_plan import parse_lake_options
from strom.spark.lake_source import LakeTopics
from strom.spark.options import SinkOptions, SourceOptions, parse_sink_options, parse_source_options
from strom.spark.reader import StromBatchReader, StromStreamReader
from strom.spark.typed_options import parse_typed_options
from strom.spark.typed_plan import TypedRead, TypedWrite, plan_read, plan_write
from strom.spark.typed_writer import TypedBatchWriter, TypedStreamWriter
from strom.spark.writer import StromBatchWriter, StromStreamWriter, validate_sink_schema

FORMAT_NAME = "strom"
_LOG = logging.getLogger("strom.spark")


def _warn(notes: tuple[str, ...]) -> None:
    """Log what option translation rewrote or ignored (on the driver's planning worker)."""
    for note in notes:
        _LOG.warning("strom: %s", note)


def kafka_schema(include_headers: bool) -> StructType:
    """Spark's Kafka source schema (all columns nullable)."""
    fields = [
        StructField("key", BinaryType()),
        StructField("value", BinaryType()),
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("timestamp", TimestampType()),
        StructField("timestampType", IntegerType()),
    ]
    if include_headers:
        header = StructType([StructField("key", StringType()), StructField("value", BinaryType())])
        fields.append(StructField("headers", ArrayType(header)))
    return StructType(fields)


class StromDataSource(DataSource):
    """Format `strom`: a drop-in for format `kafka` in batch and streaming reads and writes."""

    @classmethod
    def name(cls) -> str:
        return FORMAT_NAME

    def schema(self) -> StructType:
        typed = self._typed_read()
        base = kafka_schema(self._include_headers())
        return typed.read_schema(base) if typed is not None else base

    def reader(self, schema: StructType) -> DataSourceReader:
        self._check_schema(schema)
        options = parse_source_options(self.options, streaming=False)
        _warn(options.notes)
        typed = self._typed_read()
        if typed is not None and typed.dead_letter_topic is not None:
            raise KafkaOptionError("deadLetterTopic applies to streaming reads only")
        return StromBatchReader(options, typed=typed, lake=self._lake(options))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        self._check_schema(schema)
        options = parse_source_options(self.options, streaming=True)
        _warn(options.notes)
        return StromStreamReader(options, typed=self._typed_read(), lake=self._lake(options))

    def _lake(self, options: SourceOptions) -> LakeTopics | None:
        """The Iceberg tables' side of a read with ``strom.iceberg.history=true`` (lake_plan)."""
        lake = parse_lake_options({str(k).lower(): str(v) for k, v in self.options.items()})
        return LakeTopics(lake, options.client_config) if lake is not None else None

    def _typed_read(self) -> TypedRead | None:
        """The typed columns' reader schemas, looked up once: Spark pickles this instance after
        `schema()` and unpickles it to call `reader()`, so both see the same schema versions."""
        if not hasattr(self, "_typed"):
            options = parse_typed_options(self.options, sink=False)
            config = {k[len("kafka.") :]: str(v) for k, v in self.options.items() if k.startswith("kafka.")}
            self._typed = plan_read(options, config)
        return self._typed

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        if overwrite:
            raise KafkaOptionError(
                "Save mode Overwrite not allowed for Kafka. Allowed save modes are Append and "
                "ErrorIfExists (default)."
            )
        options = parse_sink_options(self.options)
        _warn(options.notes)
        typed = self._checked_sink(schema, options)
        return StromBatchWriter(options) if typed is None else TypedBatchWriter(options, typed)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        options = parse_sink_options(self.options, streaming=True)
        _warn(options.notes)
        typed = self._checked_sink(schema, options)
        return StromStreamWriter(options) if typed is None else TypedStreamWriter(options, typed)

    def _checked_sink(self, schema: StructType, options: SinkOptions) -> TypedWrite | None:
        """The encoding of the typed key/value struct columns (None: written as they are), after
        checking the columns the sink will see as Spark's Kafka sink does."""
        typed = plan_write(parse_typed_options(self.options, sink=True), schema)
        validate_sink_schema(schema if typed is None else typed.sink_schema(schema), options)
        return typed

    def _include_headers(self) -> bool:
        return str(self.options.get("includeheaders", "false")).strip().lower() == "true"

    def _check_schema(self, schema: StructType) -> None:
        expected = self.schema()
        if schema.simpleString() != expected.simpleString():
            raise KafkaOptionError("Kafka source has a fixed schema and cannot be set with a custom one")
