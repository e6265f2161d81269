"""The exactly-once streaming sink: Kafka transactions per micro-batch and Spark partition.

Theory of operation
-------------------
Kafka cannot commit a transaction from another producer instance, so "write in the tasks, commit when
Spark commits the batch on the driver" is out of reach with librdkafka. Instead every task commits its
own transaction, and a re-executed task is *fenced, then resumes where the committed part ends*:

* **Identity.** Task `p` (the Spark partition id) of micro-batch `B` of query `Q` uses the transactional
  id `<prefix>-<Q>-<p>` (prefix: option `transactionalIdPrefix`, default `strom-sink`). `Q` is the
  query id Spark keeps in the checkpoint (`checkpoint/metadata`), which executors see as the local
  property `sql.streaming.queryId`; `B` is `streaming.sql.batchId`. A query restarted from its
  checkpoint keeps `Q`; a new checkpoint means a new query, with fresh ids.
* **Fence.** `init_transactions()` bumps the producer epoch of that id: any older attempt of the same
  task (a zombie of a killed driver, a retried or speculative attempt) can no longer produce or commit,
  and its open transaction is aborted -- its records stay invisible to `read_committed` readers.
* **Marker.** Every transaction also commits, with `send_offsets_to_transaction`, the offset `B + 1`
  to the consumer group named like the transactional id (on partition 0 of the first destination
  topic), with metadata `{"batchId": B, "partition": p, "records": k}`: the first `k` rows of batch
  `B`'s task `p` are in the output. Rows and marker become visible together, or not at all. After
  `init_transactions()` no transaction of this id is pending, so the group's committed offset is
  settled when the task reads it back (without KIP-447's `require_stable`).
* **Resume.** A task skips the first `k` rows of its input when the marker is for its own batch (`k`
  is 0 for a new batch), writes the rest in one transaction and commits the marker with the new total.

Why a count and not just "batch B done": when a task's input fails upstream (a UDF raising, an executor
JVM dying), Spark closes the Arrow stream to the Python writer, which then sees an ordinary end of
input, and may commit a truncated batch before Spark fails the task. Its retry resumes after the
committed rows instead of skipping the whole batch. Spark re-runs an uncommitted micro-batch with
exactly the offsets of its offset log, so a re-run task receives the same rows; when their order is the
same too (the source yields each task's records in offset order, and narrow transformations keep it),
every row ends up in the output exactly once for `read_committed` readers, wherever the query died.

Cases:

* A: task retry after a failure mid-write -- the retry's `init_transactions()` aborts the open
  transaction of the failed attempt; the retry writes from the last committed row on.
* B: re-run after the whole task committed (task lost afterwards, driver killed before Spark's commit
  log entry): `k` equals the input, nothing is written (`ProducedRecords.replayed`).
* C: concurrent (speculative) attempts -- whichever initialises last fences the other; a fenced
  attempt fails, and the survivor resumes from whatever the other committed.
* D: a task with no rows opens no producer and commits nothing; its re-run has no rows either.
* E: the number of Spark partitions changes between two batches -- nothing to do: a marker counts only
  for its own batch id. It must not change *while* a batch is half committed: a re-run of `B` with
  another partitioning (for example `minPartitions` edited before the restart) would map other rows to
  the already-committed partitions. Restart a query unchanged until its last batch has committed
  (Spark pins `spark.sql.shuffle.partitions` in the checkpoint).
* F: a re-run with fewer rows than already committed fails the task (the query's output is not a
  function of its input). After a shuffle the order of rows inside a task may change between attempts,
  which matters only when an attempt committed part of its rows (case A with a truncated input).

Threading: one producer per task, from the task's thread; closed when `write()` returns.
"""

from __future__ import annotations

import contextlib
import itertools
import json
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import TypeVar

import pyarrow as pa
from confluent_kafka import (
    Consumer,
    ConsumerGroupTopicPartitions,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient
from pyspark import TaskContext

from strom.spark.options import LibrdkafkaConfig, SinkOptions

QUERY_ID_PROPERTY = "sql.streaming.queryId"
BATCH_ID_PROPERTY = "streaming.sql.batchId"
_TXN_TIMEOUT_S = 120.0
_LOOKUP_TIMEOUT_S = 30.0
V = TypeVar("V")


@dataclass(frozen=True, slots=True)
class SinkTask:
    """Which task is writing: the query (from the checkpoint), the micro-batch and the Spark partition."""

    query_id: str
    batch_id: int
    partition: int


@dataclass(frozen=True, slots=True)
class TaskOutcome:
    """What an exactly-once task did: rows written now; `replayed` when an earlier attempt of the same
    task had committed rows of its batch (all of them when `records` is 0)."""

    records: int
    replayed: bool


def transactional_id(prefix: str, task: SinkTask) -> str:
    """`<prefix>-<query id>-<Spark partition>`: the same for every attempt and batch of that task."""
    return f"{prefix}-{task.query_id}-{task.partition}"


@dataclass(frozen=True, slots=True)
class Marker:
    """What a task's group records: the first `records` rows of batch `batch_id` are in the output."""

    batch_id: int
    records: int

    def metadata(self, partition: int) -> str:
        """The committed offset's metadata (the offset itself is `batch_id + 1`)."""
        return json.dumps({"batchId": self.batch_id, "partition": partition, "records": self.records})


def last_marker(committed: Iterable[tuple[int, str]]) -> Marker | None:
    """The newest marker among a group's committed (offset, metadata) pairs, if any.

    Raises:
        ValueError: the newest entry's metadata is not a marker written by this sink.
    """
    entries = [(offset, metadata) for offset, metadata in committed if offset >= 1]
    if not entries:
        return None
    offset, metadata = max(entries)
    fields = json.loads(metadata or "{}")
    if not isinstance(fields, dict) or fields.get("batchId") != offset - 1:
        raise ValueError(f"offset {offset} with metadata {metadata!r} is not a strom sink marker")
    return Marker(offset - 1, int(fields["records"]))


def rows_committed(marker: Marker | None, batch_id: int) -> int | None:
    """How many leading rows of batch `batch_id` are already in the output; None: all of them (the
    marker is for a later batch, so this one completed)."""
    if marker is None or marker.batch_id < batch_id:
        return 0
    if marker.batch_id == batch_id:
        return marker.records
    return None


class RowSkipper:
    """Iterates Arrow batches without their first `skip` rows, counting the rows it dropped."""

    def __init__(self, batches: Iterable[pa.RecordBatch], skip: int) -> None:
        self._batches = iter(batches)
        self._to_skip = skip
        self.skipped = 0

    def __iter__(self) -> Iterator[pa.RecordBatch]:
        for batch in self._batches:
            drop = min(self._to_skip - self.skipped, batch.num_rows)
            self.skipped += drop
            if drop < batch.num_rows:
                yield batch.slice(drop) if drop else batch


def current_task() -> SinkTask:
    """The running Spark task's identity, from its TaskContext.

    Raises:
        RuntimeError: not inside a streaming query's task.
    """
    context = TaskContext.get()
    query_id = context.getLocalProperty(QUERY_ID_PROPERTY) if context is not None else None
    batch_id = context.getLocalProperty(BATCH_ID_PROPERTY) if context is not None else None
    if context is None or not query_id or batch_id is None:
        raise RuntimeError(
            "deliveryGuarantee 'exactly-once' needs a streaming query's task (no query or batch id found)"
        )
    return SinkTask(query_id, int(batch_id), context.partitionId())


def _first_rows(batches: Iterator[pa.RecordBatch]) -> pa.RecordBatch | None:
    for batch in batches:
        if batch.num_rows:
            return batch
    return None


def _marker_topic(options: SinkOptions, first: pa.RecordBatch) -> str:
    if options.topic is not None:
        return options.topic
    names = [n.lower() for n in first.schema.names]
    return str(first.column(names.index("topic"))[0].as_py())


# Settings an AdminClient or group-metadata Consumer shares with the producer (connection and security).
_SHARED_PREFIXES = ("ssl.", "sasl.", "socket.", "broker.", "client.", "security.")
_SHARED_KEYS = frozenset({"bootstrap.servers", "metadata.max.age.ms", "request.timeout.ms"})


def _shared_config(config: Mapping[str, V]) -> dict[str, V]:
    return {k: v for k, v in config.items() if k in _SHARED_KEYS or k.startswith(_SHARED_PREFIXES)}


def _committed(config: LibrdkafkaConfig, group: str) -> list[tuple[int, str]]:
    """The group's committed (offset, metadata) pairs."""
    # log_level 5: no "purging unserved events" notice when the short-lived client is dropped.
    admin = AdminClient({**_shared_config(config), "log_level": 5})
    futures = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])
    result = futures[group].result(timeout=_LOOKUP_TIMEOUT_S)
    return [(int(tp.offset), tp.metadata or "") for tp in result.topic_partitions or [] if tp.error is None]


def _group_metadata(config: LibrdkafkaConfig, group: str) -> object:
    """The group's metadata handle for `send_offsets_to_transaction` (opaque to Python)."""
    consumer = Consumer({**_shared_config(config), "group.id": group, "enable.auto.commit": False})
    try:
        return consumer.consumer_group_metadata()
    finally:
        consumer.close()


def write_exactly_once(
    options: SinkOptions,
    batches: Iterator[pa.RecordBatch],
    config: LibrdkafkaConfig,
    produce_rows: Callable[[Producer, Iterable[pa.RecordBatch]], int],
    task: SinkTask | None = None,
) -> TaskOutcome:
    """Write the rows of one task not yet committed by an earlier attempt, in one transaction.

    Args:
        options: the sink options.
        batches: the task's rows.
        config: the producer configuration (without a transactional id).
        produce_rows: produces rows with a given producer and waits for their acknowledgements.
        task: the task's identity; read from Spark's TaskContext when None.

    Raises:
        KafkaException: fenced by a newer attempt, or a record or the commit failed; the transaction
            is aborted (or left to the next attempt's fence) and nothing of it becomes visible.
        RuntimeError: the input has fewer rows than an earlier attempt already committed.
    """
    first = _first_rows(batches)
    if first is None:
        return TaskOutcome(0, replayed=False)
    me = task if task is not None else current_task()
    txn_id = transactional_id(options.transactional_id_prefix, me)
    producer = Producer({**config, "transactional.id": txn_id})
    producer.init_transactions(_TXN_TIMEOUT_S)
    done = rows_committed(last_marker(_committed(config, txn_id)), me.batch_id)
    rows = RowSkipper(itertools.chain([first], batches), done if done is not None else 0)
    rest = iter(rows) if done is not None else iter(())
    head = _first_rows(rest)
    if head is None:
        for _ in batches:  # Spark expects the input to be consumed
            pass
        if done is not None and rows.skipped < done:
            raise RuntimeError(
                f"batch {me.batch_id}, partition {me.partition}: {done} rows were committed by an earlier "
                f"attempt but this one has only {rows.skipped}; the query's output is not a function of "
                "its input, exactly-once cannot hold"
            )
        return TaskOutcome(0, replayed=True)
    producer.begin_transaction()
    try:
        written = produce_rows(producer, itertools.chain([head], rest))
        total = Marker(me.batch_id, rows.skipped + written)
        offset = TopicPartition(
            _marker_topic(options, first), 0, me.batch_id + 1, metadata=total.metadata(me.partition)
        )
        producer.send_offsets_to_transaction([offset], _group_metadata(config, txn_id), _TXN_TIMEOUT_S)
        producer.commit_transaction(_TXN_TIMEOUT_S)
    except BaseException:
        _abort_quietly(producer)
        raise
    return TaskOutcome(written, replayed=rows.skipped > 0)


def _abort_quietly(producer: Producer) -> None:
    """Abort after a failure; a fenced producer cannot, and the next attempt's fence aborts instead."""
    with contextlib.suppress(KafkaException):
        producer.abort_transaction(_TXN_TIMEOUT_S)
