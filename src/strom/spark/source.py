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

from strom.spark.avro_options import parse_avro_options
from strom.spark.avro_plan import AvroRead, AvroWrite, plan_read, plan_write
from strom.spark.avro_writer import AvroBatchWriter, AvroStreamWriter
from strom.spark.options import KafkaOptionError, SinkOptions, parse_sink_options, parse_source_options
from strom.spark.reader import StromBatchReader, StromStreamReader
from strom.spark.writer import StromBatchWriter, StromStreamWriter, validate_sink_schema

FORMAT_NAME = "strom"


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
        avro = self._avro_read()
        base = kafka_schema(self._include_headers())
        return avro.read_schema(base) if avro is not None else base

    def reader(self, schema: StructType) -> DataSourceReader:
        self._check_schema(schema)
        options = parse_source_options(self.options, streaming=False)
        return StromBatchReader(options, avro=self._avro_read())

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        self._check_schema(schema)
        options = parse_source_options(self.options, streaming=True)
        return StromStreamReader(options, avro=self._avro_read())

    def _avro_read(self) -> AvroRead | None:
        """The Avro reader schemas, looked up once: Spark pickles this instance after `schema()` and
        unpickles it to call `reader()`, so both see the same schema versions."""
        if not hasattr(self, "_avro"):
            self._avro = plan_read(parse_avro_options(self.options, sink=False))
        return self._avro

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        if overwrite:
            raise KafkaOptionError(
                "Save mode Overwrite not allowed for Kafka. Allowed save modes are Append and "
                "ErrorIfExists (default)."
            )
        options = parse_sink_options(self.options)
        avro = self._checked_sink(schema, options)
        return StromBatchWriter(options) if avro is None else AvroBatchWriter(options, avro)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        options = parse_sink_options(self.options, streaming=True)
        avro = self._checked_sink(schema, options)
        return StromStreamWriter(options) if avro is None else AvroStreamWriter(options, avro)

    def _checked_sink(self, schema: StructType, options: SinkOptions) -> AvroWrite | None:
        """The Avro encoding of the key/value struct columns (None: written as they are), after
        checking the columns the sink will see as Spark's Kafka sink does."""
        avro = plan_write(parse_avro_options(self.options, sink=True), schema)
        validate_sink_schema(schema if avro is None else avro.sink_schema(schema), options)
        return avro

    def _include_headers(self) -> bool:
        return str(self.options.get("includeheaders", "false")).strip().lower() == "true"

    def _check_schema(self, schema: StructType) -> None:
        expected = self.schema()
        if schema.simpleString() != expected.simpleString():
            raise KafkaOptionError("Kafka source has a fixed schema and cannot be set with a custom one")
