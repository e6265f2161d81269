"""Batch and streaming readers of the `strom` data source.

Theory of operation
-------------------
Planning happens on the driver; reading on the executors.

* **Offsets.** A stream offset is the JSON object `{"topic": {"partition": offset}}` where each offset is
  the next offset to read. Spark writes the end offset of micro-batch N to `checkpoint/offsets/N` before
  running it and hands it back as the start of batch N+1, and after a restart it re-runs an uncommitted
  batch with exactly the stored range -- so a query stopped anywhere and restarted reads every record
  exactly once. `initialOffset()` resolves `startingOffsets`/`startingTimestamp`/
  `startingOffsetsByTimestamp` (default: latest) for a brand-new query only.
* **latestOffset(start, limit).** Lists the subscription's partitions now (so new topics matching
  `subscribePattern` and partitions added to subscribed topics are picked up; they start from their log
  start offset), asks for their high watermarks (last stable offsets under read_committed, the default),
  caps them by the `Trigger.AvailableNow` target when one was set by `prepareForTriggerAvailableNow()`,
  and applies the read limit Spark passes:
  `ReadAllAvailable` (everything), `ReadMaxRows` (`maxOffsetsPerTrigger`) or `ReadMinRows`
  (`minOffsetsPerTrigger`, with `maxTriggerDelay`; `maxOffsetsPerTrigger` still applies on top). Returning
  `start` unchanged means "no new data" and Spark runs no batch. Partitions that disappeared are data loss.
* **partitions(start, end).** Checks each start offset against the log start offset (`failOnDataLoss`),
  then cuts the ranges into tasks (`minPartitions`, `maxRecordsPerPartition`). Planning only looks at
  offsets; records are never read on the driver.
* **read(partition).** Runs on an executor: a `RangeFetcher` opens its own consumer (assign + seek, no
  group) and yields Arrow record batches up to the planned end offset.

Pickling: readers are pickled to the executors. Broker clients are opened lazily (the driver-side
AdminClient in `KafkaMetadata`, dropped on pickling; the executor-side consumer inside `read()`), and
`stop()` is not relied on (Spark does not always call it).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    ReadMinRows,
    SupportsTriggerAvailableNow,
)

from strom.spark.fetcher import RangeFetcher
from strom.spark.lake_plan import TABLE_TASK_MAX_RECORDS, lake_earliest, split_at_seams
from strom.spark.lake_rows import table_batches
from strom.spark.lake_source import LakeTopics, TableRange
from strom.spark.metadata import KafkaMetadata
from strom.spark.options import (
    EARLIEST,
    OffsetBound,
    OffsetsJson,
    SourceOptions,
    StartingKind,
    TopicPartitionOffsets,
    offsets_from_json,
    offsets_to_json,
)
from strom.spark.planning import (
    DataLossError,
    OffsetRange,
    admit_min_rows,
    count_records,
    data_loss_message,
    limit_offsets,
    plan_tasks,
    reconcile_start,
)
from strom.spark.progress import BatchTiming, group_for_task, then_publish
from strom.spark.typed_plan import TypedRead


@dataclass(frozen=True)
class RangePartition(InputPartition):
    """One Spark task: an offset range of one topic partition (picklable, no clients); `publish`: the
    task reading the end of its partition's range in a micro-batch, which commits it (`progress`)."""

    offset_range: OffsetRange
    publish: bool = False
    timing: BatchTiming | None = None  # a micro-batch's, for the progress its commit carries


def _metadata(options: SourceOptions) -> KafkaMetadata:
    return KafkaMetadata(
        options.client_config, options.fetch_offset_num_retries, options.fetch_offset_retry_interval_ms
    )


def _read_range(
    options: SourceOptions, partition: InputPartition, typed: TypedRead | None, lake: LakeTopics | None
) -> Iterator[pa.RecordBatch]:
    assert isinstance(partition, RangePartition | TableRange)
    r = partition.offset_range
    if isinstance(partition, TableRange):
        assert lake is not None
        batches = table_batches(lake.options.catalog, partition, options.include_headers, typed)
    else:
        fetcher = RangeFetcher(
            options.client_config,
            partition.offset_range,
            include_headers=options.include_headers,
            fail_on_data_loss=options.fail_on_data_loss,
            poll_timeout_ms=options.poll_timeout_ms,
        )
        batches = fetcher.batches()
        if typed is not None:
            batches = typed.apply(batches, r.topic, r.partition)
    if partition.publish and options.publish_progress:
        group = group_for_task(options.progress_group, options.progress_group_prefix)
        batches = then_publish(
            batches, options.client_config, group, r.topic, r.partition, r.until_offset, partition.timing
        )
    return batches


def _tasks(
    options: SourceOptions, ranges: list[OffsetRange], timing: BatchTiming | None = None
) -> list[RangePartition]:
    tasks = plan_tasks(ranges, options.min_partitions, options.max_records_per_partition)
    ends = {(r.topic, r.partition): r.until_offset for r in ranges}
    return [
        RangePartition(t, publish=ends.get((t.topic, t.partition)) == t.until_offset, timing=timing)
        for t in tasks
    ]


def _lake_tasks(
    options: SourceOptions,
    lake: LakeTopics,
    typed: TypedRead | None,
    start: TopicPartitionOffsets,
    end: TopicPartitionOffsets,
    log_start: TopicPartitionOffsets,
    timing: BatchTiming | None = None,
) -> list[InputPartition]:
    """The tasks of ``start``..``end`` with each Iceberg topic's history read from its table (lake_plan):
    table tasks first, then the log's; the task reading a partition's last offset publishes progress."""
    view = lake.view({t for t, _ in end}, typed)
    table, log = split_at_seams(
        start, end, log_start, view.seams, fail_on_data_loss=options.fail_on_data_loss
    )
    cap = min(options.max_records_per_partition or TABLE_TASK_MAX_RECORDS, TABLE_TASK_MAX_RECORDS)
    ends = {(r.topic, r.partition): r.until_offset for r in [*table, *log]}
    tasks: list[InputPartition] = [
        view.task(t, ends[(t.topic, t.partition)] == t.until_offset, timing)
        for t in plan_tasks(table, None, cap)
    ]
    tasks.extend(
        RangePartition(t, publish=ends[(t.topic, t.partition)] == t.until_offset, timing=timing)
        for t in plan_tasks(log, options.min_partitions, options.max_records_per_partition)
    )
    return tasks


def _earliest_asked(bound: OffsetBound, partitions: set[tuple[str, int]]) -> set[tuple[str, int]]:
    """The partitions a starting bound puts at ``earliest``."""
    if bound.kind is StartingKind.EARLIEST:
        return set(partitions)
    if bound.kind is StartingKind.SPECIFIC_OFFSETS:
        return {tp for tp, offset in bound.offsets.items() if offset == EARLIEST}
    return set()


class StromBatchReader(DataSourceReader):
    """`spark.read.format("strom")`: the records between the starting and ending offsets."""

    def __init__(
        self, options: SourceOptions, typed: TypedRead | None = None, lake: LakeTopics | None = None
    ) -> None:
        self._options = options
        self._typed = typed
        self._lake = lake
        self._metadata = _metadata(options)

    def partitions(self) -> list[InputPartition]:
        o = self._options
        tps = self._metadata.topic_partitions(o.subscription)
        start = self._metadata.resolve_bound(
            o.starting, tps, starting=True, not_found_latest=o.timestamp_not_found_latest
        )
        end = self._metadata.resolve_bound(o.ending, tps, starting=False, not_found_latest=True)
        for tp, until in end.items():
            if tp in start and until < start[tp]:
                raise ValueError(
                    f"The ending offset {until} of {tp[0]}-{tp[1]} is before its starting offset {start[tp]}"
                )
        earliest = self._metadata.earliest(tps)
        tasks: list[InputPartition]
        if self._lake is None:
            ranges = reconcile_start(start, end, earliest, fail_on_data_loss=o.fail_on_data_loss)
            tasks = list(_tasks(o, ranges))
        else:
            start = self._lake_start(start, tps)
            tasks = _lake_tasks(o, self._lake, self._typed, start, end, earliest)
        self._metadata.close()
        return tasks or [RangePartition(OffsetRange("", 0, 0, 0))]

    def _lake_start(self, start: TopicPartitionOffsets, tps: set[tuple[str, int]]) -> TopicPartitionOffsets:
        assert self._lake is not None
        seams = self._lake.view({t for t, _ in tps}, self._typed).seams
        return lake_earliest(start, _earliest_asked(self._options.starting, tps), seams)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return _read_range(self._options, partition, self._typed, self._lake)


class StromStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """`spark.readStream.format("strom")`: micro-batches of offset ranges, offsets in the checkpoint."""

    def __init__(
        self, options: SourceOptions, typed: TypedRead | None = None, lake: LakeTopics | None = None
    ) -> None:
        self._options = options
        self._typed = typed
        self._lake = lake
        self._metadata = _metadata(options)
        self._available_now_target: TopicPartitionOffsets | None = None
        self._last_latest: TopicPartitionOffsets = {}
        # None until the first micro-batch: Spark's first trigger does not wait for maxTriggerDelay.
        self._last_batch_ms: float | None = None
        self._last_planned_ms: int | None = None  # wall clock, for the published progress's rates

    def initialOffset(self) -> OffsetsJson:
        o = self._options
        tps = self._metadata.topic_partitions(o.subscription)
        start = self._metadata.resolve_bound(
            o.starting, tps, starting=True, not_found_latest=o.timestamp_not_found_latest
        )
        if self._lake is not None:
            seams = self._lake.view({t for t, _ in tps}, self._typed).seams
            start = lake_earliest(start, _earliest_asked(o.starting, tps), seams)
        return offsets_to_json(start)

    def getDefaultReadLimit(self) -> ReadLimit:
        if self._options.min_offsets_per_trigger is not None:
            return ReadMinRows(self._options.min_offsets_per_trigger)
        if self._options.max_offsets_per_trigger is not None:
            return ReadMaxRows(self._options.max_offsets_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        tps = self._metadata.topic_partitions(self._options.subscription)
        self._available_now_target = self._metadata.latest(tps)

    def latestOffset(self, start: OffsetsJson, limit: ReadLimit) -> OffsetsJson:
        begin = offsets_from_json(start)
        effective_start, latest = self._current_offsets(begin)
        self._last_latest = latest
        end = self._apply_limit(effective_start, latest, limit)
        if end is None or end == begin:
            return start
        self._last_batch_ms = time.monotonic() * 1000
        return offsets_to_json(end)

    def reportLatestOffset(self) -> OffsetsJson | None:
        return offsets_to_json(self._last_latest) if self._last_latest else None

    def partitions(self, start: OffsetsJson, end: OffsetsJson) -> list[InputPartition]:
        begin, finish = offsets_from_json(start), offsets_from_json(end)
        earliest = self._metadata.earliest(finish)
        now_ms = int(time.time() * 1000)
        if self._lake is not None:
            timing = BatchTiming(now_ms, self._last_planned_ms, count_records(begin, finish))
            tasks = _lake_tasks(self._options, self._lake, self._typed, begin, finish, earliest, timing)
        else:
            fail = self._options.fail_on_data_loss
            ranges = reconcile_start(begin, finish, earliest, fail_on_data_loss=fail)
            timing = BatchTiming(now_ms, self._last_planned_ms, sum(r.size for r in ranges))
            tasks = list(_tasks(self._options, ranges, timing))
        self._last_planned_ms = now_ms
        return tasks

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return _read_range(self._options, partition, self._typed, self._lake)

    def commit(self, end: OffsetsJson) -> None:
        """Nothing to do: Kafka keeps the records, Spark's checkpoint keeps the offsets."""

    def _current_offsets(
        self, begin: TopicPartitionOffsets
    ) -> tuple[TopicPartitionOffsets, TopicPartitionOffsets]:
        """(start including new partitions at their log start offset, high watermarks now)."""
        tps = self._metadata.topic_partitions(self._options.subscription)
        target = self._available_now_target
        if target is not None:
            tps = {tp for tp in tps if tp in target or tp in begin}
        gone = sorted(tp for tp in begin if tp not in tps)
        if gone and self._options.fail_on_data_loss:
            names = ", ".join(f"{t}-{p}" for t, p in gone)
            raise DataLossError(data_loss_message(f"Partitions {names} are gone"))
        latest = self._metadata.latest(tps)
        if target is not None:
            latest = {tp: min(off, target.get(tp, begin.get(tp, off))) for tp, off in latest.items()}
        new = [tp for tp in latest if tp not in begin]
        effective = {tp: begin[tp] for tp in latest if tp in begin}
        effective.update(self._metadata.earliest(new))
        return effective, latest

    def _apply_limit(
        self, start: TopicPartitionOffsets, latest: TopicPartitionOffsets, limit: ReadLimit
    ) -> TopicPartitionOffsets | None:
        """The end offsets allowed by `limit`, or None when `minOffsetsPerTrigger` holds the batch back."""
        o = self._options
        if isinstance(limit, ReadMaxRows):
            return limit_offsets(start, latest, limit.max_rows)
        if isinstance(limit, ReadMinRows):
            last = self._last_batch_ms
            if last is None:  # Spark's first trigger runs at once and starts the delay timer
                self._last_batch_ms = time.monotonic() * 1000
            waited_ms = o.max_trigger_delay_ms if last is None else int(time.monotonic() * 1000 - last)
            available = count_records(start, latest)
            # Under Trigger.AvailableNow nothing more will arrive, so waiting for more would never end.
            if self._available_now_target is None and not admit_min_rows(
                available, limit.min_rows, waited_ms, o.max_trigger_delay_ms
            ):
                return None
            if o.max_offsets_per_trigger is not None:
                return limit_offsets(start, latest, o.max_offsets_per_trigger)
        return dict(latest)
