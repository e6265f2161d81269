"""The `strom` sink: batch `df.write` and streaming `df.writeStream` into topics.

Theory of operation
-------------------
Each Spark task receives its rows as Arrow record batches (the Arrow writer interfaces) and produces them
with its own confluent-kafka `Producer`, opened inside `write()` so nothing unpicklable crosses to the
executors. Columns, as in Spark's Kafka sink:

* `value` (string or binary, required), `key` (string or binary, optional);
* `topic` (string): the destination, unless the `topic` option is set, which overrides the column;
* `partition` (int, optional): an explicit partition; null or absent means the partitioner decides;
* `headers` (array<struct<key string, value binary>>, optional).

The producer is idempotent (`enable.idempotence=true`: acks=all, retries without duplicates or
reordering within a partition) and uses librdkafka's `murmur2_random` partitioner, which places keyed
records exactly where Java clients (and Spark's Kafka sink) do. `kafka.*` options are passed to the
producer and may override these defaults.

A task succeeds only after `flush()` confirms every record; the first delivery error (or a record refused
at `produce()`) fails the task with that Kafka error, and Spark retries or fails the job. Like Spark's
Kafka sink this is at-least-once: a retried task or a re-run micro-batch produces its rows again. The
streaming writer's `commit`/`abort` therefore have nothing to do; `write()` returns a commit message
carrying the number of records written (Spark requires an object, not None).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from confluent_kafka import KafkaError, KafkaException, Producer
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    StringType,
    StructType,
)

from strom.spark.options import KafkaOptionError, SinkOptions

_FLUSH_TIMEOUT_S = 300.0
_POLL_EVERY = 10_000


@dataclass(frozen=True)
class ProducedRecords(WriterCommitMessage):
    """What one task wrote."""

    records: int


def validate_sink_schema(schema: StructType, options: SinkOptions) -> None:
    """Reject input columns Spark's Kafka sink rejects, with the same kind of message.

    Raises:
        KafkaOptionError: a missing `value` or topic, or a column of the wrong type.
    """
    fields = {f.name.lower(): f.dataType for f in schema.fields}
    if "value" not in fields:
        raise KafkaOptionError("Required attribute 'value' not found")
    if options.topic is None and "topic" not in fields:
        raise KafkaOptionError(
            "topic option required when no 'topic' attribute is present. Use the topic option for "
            "setting a topic."
        )
    for name in ("key", "value"):
        if name in fields and not isinstance(fields[name], StringType | BinaryType):
            raise KafkaOptionError(f"{name} attribute type must be a string or binary")
    if "topic" in fields and options.topic is None and not isinstance(fields["topic"], StringType):
        raise KafkaOptionError("topic attribute type must be a string")
    if "partition" in fields and not isinstance(fields["partition"], IntegerType):
        raise KafkaOptionError("partition attribute type must be an int")
    if "headers" in fields and not _is_headers_type(fields["headers"]):
        raise KafkaOptionError("headers attribute type must be an array<struct<key:string,value:binary>>")


def _is_headers_type(data_type: Any) -> bool:
    if not isinstance(data_type, ArrayType) or not isinstance(data_type.elementType, StructType):
        return False
    inner = {f.name: f.dataType for f in data_type.elementType.fields}
    return isinstance(inner.get("key"), StringType) and isinstance(
        inner.get("value"), BinaryType | StringType
    )


def produce_batches(options: SinkOptions, batches: Iterator[pa.RecordBatch]) -> ProducedRecords:
    """Produce every row of `batches` and wait until all are acknowledged.

    Raises:
        KafkaException: the first record the brokers refused, or one that could not be delivered.
    """
    config: dict[str, Any] = {
        "enable.idempotence": True,
        "partitioner": "murmur2_random",
        "linger.ms": 5,
        "batch.size": 1_000_000,
        "queue.buffering.max.messages": 500_000,
        "queue.buffering.max.kbytes": 1_048_576,
        # Delivery reports only for failures: no Python callback per successful record.
        "delivery.report.only.error": True,
        **options.client_config,
    }
    producer = Producer(config)
    errors: list[KafkaError] = []

    def on_delivery(err: KafkaError | None, _msg: Any) -> None:
        if err is not None and not errors:
            errors.append(err)

    written = 0
    for batch in batches:
        written += _produce_batch(producer, options, batch, on_delivery, errors)
    remaining = producer.flush(_FLUSH_TIMEOUT_S)
    if errors:
        raise KafkaException(errors[0])
    if remaining:
        raise KafkaException(KafkaError(KafkaError._MSG_TIMED_OUT, f"{remaining} records not delivered"))
    return ProducedRecords(written)


def _column(batch: pa.RecordBatch, name: str) -> list[Any] | None:
    names = [n.lower() for n in batch.schema.names]
    if name not in names:
        return None
    return list(batch.column(names.index(name)).to_pylist())


def _produce_batch(
    producer: Any, options: SinkOptions, batch: pa.RecordBatch, on_delivery: Any, errors: list[KafkaError]
) -> int:
    n = int(batch.num_rows)
    values = _column(batch, "value") or [None] * n
    keys = _column(batch, "key") or [None] * n
    topics = [options.topic] * n if options.topic is not None else _column(batch, "topic") or [None] * n
    partitions = _column(batch, "partition")
    headers = _column(batch, "headers")
    if None in topics:
        raise KafkaOptionError("Null topic present in the data. Use the topic option for setting a topic.")
    simple = partitions is None and headers is None
    produce = producer.produce
    for i in range(n):
        if i % _POLL_EVERY == 0:
            producer.poll(0)
            if errors:
                raise KafkaException(errors[0])
        if simple:
            # Hot path: no per-row keyword arguments.
            try:
                produce(topics[i], values[i], keys[i], on_delivery=on_delivery)
                continue
            except BufferError:
                pass
        extra: dict[str, Any] = {}
        if partitions is not None and partitions[i] is not None:
            extra["partition"] = partitions[i]
        if headers is not None and headers[i]:
            extra["headers"] = [(h["key"], h["value"]) for h in headers[i]]
        _produce_one(producer, topics[i], values[i], keys[i], on_delivery, extra)
    return n


def _produce_one(
    producer: Any, topic: str, value: Any, key: Any, on_delivery: Any, extra: dict[str, Any]
) -> None:
    while True:
        try:
            producer.produce(topic, value, key, on_delivery=on_delivery, **extra)
            return
        except BufferError:
            producer.poll(0.05)  # local queue full: serve delivery reports, then retry


class StromBatchWriter(DataSourceArrowWriter):
    """`df.write.format("strom")`."""

    def __init__(self, options: SinkOptions) -> None:
        self._options = options

    def write(self, iterator: Iterator[pa.RecordBatch]) -> ProducedRecords:
        return produce_batches(self._options, iterator)


class StromStreamWriter(DataSourceStreamArrowWriter):
    """`df.writeStream.format("strom")`: at-least-once, like Spark's Kafka sink."""

    def __init__(self, options: SinkOptions) -> None:
        self._options = options

    def write(self, iterator: Iterator[pa.RecordBatch]) -> ProducedRecords:
        return produce_batches(self._options, iterator)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Records were acknowledged in `write()`; nothing is staged."""

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Records already acknowledged stay in the topic (at-least-once)."""
