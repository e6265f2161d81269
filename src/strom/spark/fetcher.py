"""Executor-side reading of one offset range into Arrow record batches.

Theory of operation
-------------------
An executor task owns one `OffsetRange` `[from_offset, until_offset)` of one partition, planned on the
driver below the high watermark it saw (the last stable offset under `isolation.level=read_committed`, the
default: the consumer then skips aborted records and markers, and its position moves past them). It opens
its own confluent-kafka `Consumer` (never a consumer group: `assign` with the start offset, no commits,
`auto.offset.reset=error`), consumes in chunks with `consume(num_messages=...)`, keeps the records whose
offsets fall inside the range, and turns each chunk into a `pyarrow.RecordBatch` with Spark's Kafka schema
-- column by column, so no per-row Python tuple is built and Spark receives Arrow directly. It stops as
soon as it has seen offset `until_offset - 1` (or the consumer's position reached `until_offset`, which
covers offsets with no record such as transaction markers or compacted-away records), so it never waits
on, or reads beyond, the planned end.

Failure cases:

* A: the start offset is below the log start offset (retention or DeleteRecords ran after planning):
  librdkafka reports an offset reset error. With `failOnDataLoss=true` the task fails with a data-loss
  message; otherwise it seeks to the log start offset and continues (or ends, if that is past the range).
* B: nothing arrives for `kafkaConsumer.pollTimeoutMs`: the task fails with a timeout naming the partition
  and offset, unless the broker now says the range is gone (handled as in A).
* C: any other consumer error fails the task with the Kafka error.

Threading: one `RangeFetcher` per task, used from the task's thread only; the consumer is closed when the
range is exhausted or on error.
"""

from __future__ import annotations

import gc
import time
import uuid
from bisect import bisect_left
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition

from strom.spark.planning import DataLossError, OffsetRange, data_loss_message
from strom.spark.schema import arrow_schema

_CHUNK = 20_000
_OFFSET: Any = Message.offset  # typed Optional by the stubs; never None for a fetched record
_EMPTY_POLL_S = 1.0
_STAMP_TYPE = pa.struct([pa.field("type", pa.int32()), pa.field("ms", pa.int64())])
_MS = pa.timestamp("ms", tz="UTC")


class RangeFetcher:
    """Reads one offset range through a private, group-less consumer."""

    def __init__(
        self,
        client_config: dict[str, str],
        offset_range: OffsetRange,
        *,
        include_headers: bool,
        fail_on_data_loss: bool,
        poll_timeout_ms: int,
    ) -> None:
        self._range = offset_range
        self._include_headers = include_headers
        self._fail_on_data_loss = fail_on_data_loss
        self._poll_timeout_ms = poll_timeout_ms
        self._schema = arrow_schema(include_headers)
        self._topic = pa.scalar(offset_range.topic, pa.string())
        self._partition = pa.scalar(offset_range.partition, pa.int32())
        self._config: dict[str, str | int | bool] = {
            "fetch.max.bytes": 52_428_800,
            # A task waits for its first fetch before it has anything to convert: 10 MiB (about 85,000
            # records of 100 B) took ~90 ms to arrive, 1 MiB ~50 ms, and later fetches overlap with
            # conversion anyway (one task's range standalone: ~600k -> ~700k records/s). A record batch
            # larger than this is still returned whole (KIP-74).
            "max.partition.fetch.bytes": 1_048_576,
            "queued.max.messages.kbytes": 131_072,
            # librdkafka pauses fetching while its queue holds queued.min.messages and then backs off for
            # fetch.queue.backoff.ms (default 1 s): with the defaults a fast reader idles ~70% of the time.
            # Bounded by the range size, so a small task does not prefetch far beyond its end offset.
            "queued.min.messages": min(500_000, max(1_000, offset_range.size)),
            "fetch.queue.backoff.ms": 10,
            "fetch.wait.max.ms": 100,
            **client_config,
            # Owned by the connector (Spark's connector forbids overriding these too).
            "group.id": f"strom-spark-{uuid.uuid4().hex}",
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "enable.partition.eof": False,
            "auto.offset.reset": "error",
        }

    def batches(self) -> Iterator[pa.RecordBatch]:
        """Arrow record batches covering every record of the range, in offset order."""
        r = self._range
        if r.size <= 0:
            return
        consumer = Consumer(self._config)
        try:
            next_offset = r.from_offset
            consumer.assign([TopicPartition(r.topic, r.partition, next_offset)])
            while next_offset < r.until_offset:
                batch, next_offset = self._next_batch(consumer, next_offset)
                if batch is not None:
                    yield batch
        finally:
            consumer.close()

    def _next_batch(self, consumer: Consumer, next_offset: int) -> tuple[pa.RecordBatch | None, int]:
        """(the next chunk of the range as a batch, or None if it held no record; the next offset).

        The cyclic garbage collector is paused meanwhile: every `Message` is a GC-tracked object, so a
        chunk of tens of thousands of them triggers dozens of collections that traverse the whole chunk
        again and again (about a quarter of a task's CPU time) and find nothing -- messages hold no
        reference cycles and are freed by reference counting before the collector runs again.
        """
        paused = gc.isenabled()
        gc.disable()
        try:
            messages, offsets, following = self._consume_chunk(consumer, next_offset)
            batch = self._to_batch(messages, offsets) if messages else None
            del messages, offsets  # freed by reference counting while the collector is still paused
            return batch, following
        finally:
            if paused:
                gc.enable()

    def _consume_chunk(self, consumer: Consumer, next_offset: int) -> tuple[list[Message], list[int], int]:
        """(messages inside the range, their offsets, the next offset to read).

        Per-message work is done with `map` over C method descriptors, not a Python loop: at several
        hundred thousand records per second per task, bytecode per record is what the task would spend
        its time on.
        """
        r = self._range
        deadline = time.monotonic() + self._poll_timeout_ms / 1000
        while True:
            wanted = min(_CHUNK, r.until_offset - next_offset)
            polled = consumer.consume(num_messages=wanted, timeout=_EMPTY_POLL_S)
            if polled:
                errors = list(filter(None, map(Message.error, polled)))
                if errors:
                    # Error events are rare (offset reset, broker errors): take the slow path.
                    return self._chunk_with_error(consumer, polled, next_offset)
                offsets: list[int] = list(map(_OFFSET, polled))
                # Offsets ascend: keep [next_offset, until_offset) -- librdkafka may hand back records
                # before the seek position (inside a compressed batch) or beyond the planned end.
                lo, hi = bisect_left(offsets, next_offset), bisect_left(offsets, r.until_offset)
                if lo < hi:
                    following = r.until_offset if hi < len(offsets) else offsets[hi - 1] + 1
                    return polled[lo:hi], offsets[lo:hi], following
                if hi < len(offsets):
                    return [], [], r.until_offset
            position = consumer.position([TopicPartition(r.topic, r.partition)])[0].offset
            if position >= r.until_offset:
                return [], [], r.until_offset
            if time.monotonic() >= deadline:
                return [], [], self._on_timeout(consumer, next_offset)

    def _chunk_with_error(
        self, consumer: Consumer, polled: list[Message], next_offset: int
    ) -> tuple[list[Message], list[int], int]:
        r = self._range
        kept: list[Message] = []
        offsets: list[int] = []
        for m in polled:
            error = m.error()
            if error is not None:
                after = offsets[-1] + 1 if offsets else next_offset
                return kept, offsets, self._on_error(consumer, error, after)
            offset: int = _OFFSET(m)
            if next_offset <= offset < r.until_offset:
                kept.append(m)
                offsets.append(offset)
        following = offsets[-1] + 1 if offsets else next_offset
        return kept, offsets, following

    def _on_error(self, consumer: Consumer, error: KafkaError, next_offset: int) -> int:
        if error.code() == KafkaError._AUTO_OFFSET_RESET:
            return self._skip_to_log_start(consumer, next_offset, str(error))
        raise KafkaException(error)

    def _on_timeout(self, consumer: Consumer, next_offset: int) -> int:
        r = self._range
        low, _high = consumer.get_watermark_offsets(TopicPartition(r.topic, r.partition), timeout=10)
        if low > next_offset:
            return self._skip_to_log_start(consumer, next_offset, f"log start offset is now {low}")
        raise TimeoutError(
            f"Cannot fetch record for offset {next_offset} of {r.topic}-{r.partition} in "
            f"{self._poll_timeout_ms} milliseconds (kafkaConsumer.pollTimeoutMs)"
        )

    def _skip_to_log_start(self, consumer: Consumer, next_offset: int, reason: str) -> int:
        r = self._range
        detail = f"Cannot fetch offset {next_offset} of {r.topic}-{r.partition} ({reason})"
        if self._fail_on_data_loss:
            raise DataLossError(data_loss_message(detail))
        low = int(consumer.get_watermark_offsets(TopicPartition(r.topic, r.partition), timeout=10)[0])
        if low >= r.until_offset:
            return r.until_offset
        target: int = max(low, next_offset)
        consumer.assign([TopicPartition(r.topic, r.partition, target)])
        return target

    def _to_batch(self, messages: list[Message], offsets: list[int]) -> pa.RecordBatch:
        n = len(messages)
        # librdkafka: (type, ms) with type 0 not available, 1 create time, 2 log append time;
        # Spark's timestampType: -1, 0, 1. The (type, ms) tuples convert in one pass as a struct.
        stamps = pa.array(list(map(Message.timestamp, messages)), _STAMP_TYPE)
        columns = [
            pa.array(list(map(Message.key, messages)), pa.binary()),
            pa.array(list(map(Message.value, messages)), pa.binary()),
            pa.repeat(self._topic, n),  # plain string/int32 arrays: Spark checks the schema exactly
            pa.repeat(self._partition, n),
            pa.array(offsets, pa.int64()),
            stamps.field(1).cast(_MS).cast(self._schema.field(5).type),
            pc.subtract(stamps.field(0), 1),
        ]
        if self._include_headers:
            headers = [_headers(h) for h in map(Message.headers, messages)]
            columns.append(pa.array(headers, self._schema.field(7).type))
        return pa.RecordBatch.from_arrays(columns, schema=self._schema)


def _headers(headers: Any) -> list[dict[str, object]] | None:
    if not headers:
        return None
    return [{"key": k, "value": v} for k, v in headers]
