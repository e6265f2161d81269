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
at `produce()`) fails the task with that Kafka error, and Spark retries or fails the job.

Delivery guarantee (option `deliveryGuarantee`):

* `at-least-once` -- batch writes, and streaming writes that ask for it: like Spark's Kafka sink, a
  retried task or a re-run micro-batch produces its rows again.
* `exactly-once` -- the default for streaming writes: each task writes its rows in one transaction,
  fenced and skipped or re-done on a re-run (`strom.spark.transactional`).

Either way the streaming writer's driver-side `commit`/`abort` have nothing to do; `write()` returns a
commit message carrying the number of records written (Spark requires an object, not None).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, TypedDict

import pyarrow as pa
from confluent_kafka import KafkaError, KafkaException, Message, Producer
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    DataType,
    IntegerType,
    StringType,
    StructType,
)

from strom.spark.errors import KafkaOptionError
from strom.spark.options import DeliveryGuarantee, LibrdkafkaConfig, SinkOptions
from strom.spark.transactional import write_exactly_once

_FLUSH_TIMEOUT_S = 300.0
_POLL_EVERY = 10_000
DeliveryCallback = Callable[[KafkaError | None, Message], None]


@dataclass(frozen=True)
class ProducedRecords(WriterCommitMessage):
    """What one task wrote; `replayed` when an exactly-once task found rows of its batch committed by an
    earlier attempt (and wrote only the rest)."""

    records: int
    replayed: bool = False


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


def _is_headers_type(data_type: DataType) -> bool:
    if not isinstance(data_type, ArrayType) or not isinstance(data_type.elementType, StructType):
        return False
    inner = {f.name: f.dataType for f in data_type.elementType.fields}
    return isinstance(inner.get("key"), StringType) and isinstance(
        inner.get("value"), BinaryType | StringType
    )


def producer_config(options: SinkOptions) -> LibrdkafkaConfig:
    """The sink producer's librdkafka configuration: defaults, then the `kafka.*` options."""
    return {
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


class DeliveryTracker:
    """The first delivery error of a producer (delivery reports arrive on `poll`/`flush`)."""

    def __init__(self) -> None:
        self.errors: list[KafkaError] = []

    def on_delivery(self, err: KafkaError | None, _msg: Message) -> None:
        if err is not None and not self.errors:
            self.errors.append(err)

    def raise_first(self) -> None:
        """Raises: KafkaException: a record could not be delivered."""
        if self.errors:
            raise KafkaException(self.errors[0])


def produce_rows(producer: Producer, options: SinkOptions, batches: Iterable[pa.RecordBatch]) -> int:
    """Produce every row of `batches` and wait until all are acknowledged; the number of rows.

    Raises:
        KafkaException: the first record the brokers refused, or one that could not be delivered.
    """
    tracker = DeliveryTracker()
    written = 0
    for batch in batches:
        written += _produce_batch(producer, options, batch, tracker.on_delivery, tracker.errors)
    remaining = producer.flush(_FLUSH_TIMEOUT_S)
    tracker.raise_first()
    if remaining:
        raise KafkaException(KafkaError(KafkaError._MSG_TIMED_OUT, f"{remaining} records not delivered"))
    return written


def produce_batches(options: SinkOptions, batches: Iterator[pa.RecordBatch]) -> ProducedRecords:
    """At-least-once: produce every row of `batches` with an idempotent producer.

    Raises:
        KafkaException: the first record the brokers refused, or one that could not be delivered.
    """
    return ProducedRecords(produce_rows(Producer(producer_config(options)), options, batches))


def _column(batch: pa.RecordBatch, name: str) -> list[Any] | None:
    names = [n.lower() for n in batch.schema.names]
    if name not in names:
        return None
    return list(batch.column(names.index(name)).to_pylist())


class _ProduceExtras(TypedDict, total=False):
    """`Producer.produce` arguments given only when a row has them (the hot path passes neither)."""

    partition: int
    headers: list[tuple[str, str | bytes | None]]


def _produce_batch(
    producer: Producer,
    options: SinkOptions,
    batch: pa.RecordBatch,
    on_delivery: DeliveryCallback,
    errors: list[KafkaError],
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
        extra: _ProduceExtras = {}
        if partitions is not None and partitions[i] is not None:
            extra["partition"] = partitions[i]
        if headers is not None and headers[i]:
            extra["headers"] = [(h["key"], h["value"]) for h in headers[i]]
        _produce_one(producer, topics[i], values[i], keys[i], on_delivery, extra)
    return n


def _produce_one(
    producer: Producer,
    topic: str,
    value: str | bytes | None,
    key: str | bytes | None,
    on_delivery: DeliveryCallback,
    extra: _ProduceExtras,
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
    """`df.writeStream.format("strom")`: exactly-once by default, or at-least-once like Spark's sink."""

    def __init__(self, options: SinkOptions) -> None:
        self._options = options

    def write(self, iterator: Iterator[pa.RecordBatch]) -> ProducedRecords:
        options = self._options
        if options.delivery_guarantee is DeliveryGuarantee.AT_LEAST_ONCE:
            return produce_batches(options, iterator)

        def produce(producer: Producer, batches: Iterable[pa.RecordBatch]) -> int:
            return produce_rows(producer, options, batches)

        outcome = write_exactly_once(options, iterator, producer_config(options), produce)
        return ProducedRecords(outcome.records, outcome.replayed)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Each task committed its own transaction (or its records were acknowledged) in `write()`."""

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Committed transactions and acknowledged records stay; a re-run skips committed tasks."""
