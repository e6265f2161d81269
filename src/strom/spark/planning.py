"""Pure offset arithmetic for the `strom` source: read limits, data-loss checks and task planning.

Theory of operation
-------------------
A read is a set of half-open offset ranges `[from_offset, until_offset)`, one per topic partition. The
driver decides them from three kinds of numbers it asks the broker for -- the log start offset
("earliest"), the high watermark ("latest") and offsets found by timestamp -- and the executors read
exactly those ranges, never beyond the high watermark seen at planning time.

* **Read limits** (`limit_offsets`): `maxOffsetsPerTrigger` caps the records of one micro-batch. The cap is
  shared between partitions in proportion to their backlog; fractions are rounded down and the leftover
  records go, one each, to the partitions with the largest remainders, so the batch holds exactly
  `min(cap, backlog)` records (Spark's own connector may overshoot by one record per partition).
  `minOffsetsPerTrigger` holds a batch back until that many records are waiting or `maxTriggerDelay` has
  passed since the last batch (`admit_min_rows`).
* **Data loss** (`reconcile_start`): when the log start offset has moved past the offset we were to read
  from (retention, DeleteRecords), or a partition vanished, records were lost. With `failOnDataLoss=true`
  that is an error naming the partition and the offsets; with `false` the read skips ahead to the log
  start offset.
* **Task planning** (`plan_tasks`): one Spark task per non-empty range; with `minPartitions` larger than
  the number of ranges, ranges are cut into at least `minPartitions` tasks in proportion to their size
  (Spark's connector rounds each share and can end up with fewer), and
  `maxRecordsPerPartition` cuts any range longer than that. Tasks are ordered by topic, partition and
  offset so that results are deterministic.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping
from dataclasses import dataclass

from strom.spark.options import TopicPartitionOffsets

DATA_LOSS_HINT = (
    "Some data may have been lost because they are not available in Kafka any more; either the data was "
    "aged out by Kafka or the topic may have been deleted before all the data in the topic was processed. "
    "If you want your streaming query to fail on such cases, set the source option 'failOnDataLoss' to "
    "'true'; if you don't want it to fail, set it to 'false'."
)


class DataLossError(RuntimeError):
    """Records the query was meant to read are gone and `failOnDataLoss` is true."""


@dataclass(frozen=True, slots=True)
class OffsetRange:
    """Records `[from_offset, until_offset)` of one topic partition: the unit an executor reads."""

    topic: str
    partition: int
    from_offset: int
    until_offset: int

    @property
    def size(self) -> int:
        return max(0, self.until_offset - self.from_offset)


def data_loss_message(detail: str) -> str:
    return f"{detail}. {DATA_LOSS_HINT}"


def limit_offsets(
    start: TopicPartitionOffsets, latest: TopicPartitionOffsets, max_rows: int
) -> dict[tuple[str, int], int]:
    """End offsets that advance from `start` towards `latest` by at most `max_rows` records in total,
    Spark's rule first: every partition with a backlog reads at least one record (so a small partition
    is never starved while a large one drains), then the rest of the cap is shared in proportion to the
    remaining backlogs, exactly (largest remainders). Only when more partitions wait than the cap allows
    does the batch exceed it, by giving each of them its one record, as Spark does.

    Partitions missing from `start` begin at their `latest` value (nothing to read yet).
    """
    backlog = {tp: max(0, end - start.get(tp, end)) for tp, end in latest.items()}
    total = sum(backlog.values())
    if total <= max_rows:
        return dict(latest)
    waiting = [tp for tp, size in backlog.items() if size]
    granted = {tp: 1 if backlog[tp] else 0 for tp in backlog}
    rest = max(0, max_rows - len(waiting))
    remaining = {tp: size - granted[tp] for tp, size in backlog.items()}
    remaining_total = sum(remaining.values())
    if rest and remaining_total:
        shares = {tp: rest * size / remaining_total for tp, size in remaining.items()}
        extra = {tp: math.floor(share) for tp, share in shares.items()}
        leftover = rest - sum(extra.values())
        for tp in sorted(remaining, key=lambda tp: (extra[tp] - shares[tp], tp))[:leftover]:
            extra[tp] += 1
        granted = {tp: granted[tp] + extra[tp] for tp in granted}
    return {tp: start.get(tp, end) + min(granted[tp], backlog[tp]) for tp, end in latest.items()}


def count_records(start: TopicPartitionOffsets, end: TopicPartitionOffsets) -> int:
    """How many offsets lie between two offset maps (partitions new in `end` count from their end)."""
    return sum(max(0, until - start.get(tp, until)) for tp, until in end.items())


def admit_min_rows(available: int, min_rows: int, waited_ms: int, max_trigger_delay_ms: int) -> bool:
    """Whether a micro-batch may run under `minOffsetsPerTrigger`/`maxTriggerDelay`."""
    return available >= min_rows or (available > 0 and waited_ms >= max_trigger_delay_ms)


def reconcile_start(
    start: TopicPartitionOffsets,
    end: TopicPartitionOffsets,
    earliest: Mapping[tuple[str, int], int],
    *,
    fail_on_data_loss: bool,
) -> list[OffsetRange]:
    """The ranges to read for `start`..`end`, after checking every start against the log start offset.

    A partition in `end` but not in `start` is new since the last batch and is read from its log start
    offset; if that is not 0, its first records were deleted before we saw them, which is data loss.

    Raises:
        DataLossError: records between a start offset and the log start offset are gone, or a partition
            to read has disappeared, and `fail_on_data_loss` is true.
    """
    ranges = []
    for (topic, partition), end_offset in sorted(end.items()):
        until = end_offset
        log_start = earliest.get((topic, partition))
        if log_start is None:
            report_loss(fail_on_data_loss, f"Partition {topic}-{partition} is gone")
            continue
        from_offset = start.get((topic, partition))
        skipped = False
        if from_offset is None:
            if log_start != 0:
                report_loss(
                    fail_on_data_loss,
                    f"Added partition {topic}-{partition} starts from {log_start} instead of 0",
                )
            from_offset = log_start
        elif from_offset < log_start:
            report_loss(
                fail_on_data_loss,
                f"Cannot fetch offset {from_offset} of {topic}-{partition}: the earliest available "
                f"offset is {log_start}",
            )
            from_offset, skipped = log_start, True
        if until < from_offset:
            if not skipped:
                report_loss(
                    fail_on_data_loss,
                    f"Partition {topic}-{partition}'s offset was changed from {from_offset} to {until}",
                )
            until = from_offset
        ranges.append(OffsetRange(topic, partition, from_offset, until))
    return ranges


def report_loss(fail: bool, detail: str) -> None:
    if fail:
        raise DataLossError(data_loss_message(detail))


def plan_tasks(
    ranges: list[OffsetRange],
    min_partitions: int | None = None,
    max_records_per_partition: int | None = None,
) -> list[OffsetRange]:
    """Cut offset ranges into Spark tasks.

    Args:
        ranges: one range per topic partition.
        min_partitions: the desired minimum number of tasks (`minPartitions`).
        max_records_per_partition: the most records one task may read (`maxRecordsPerPartition`).

    Returns:
        The non-empty ranges, cut as needed, sorted by (topic, partition, from_offset).
    """
    non_empty = [r for r in ranges if r.size > 0]
    parts = _parts_per_range(non_empty, min_partitions)
    tasks: list[OffsetRange] = []
    for r, share in zip(non_empty, parts, strict=True):
        n = (
            share
            if max_records_per_partition is None
            else max(share, math.ceil(r.size / max_records_per_partition))
        )
        tasks.extend(split_range(r, min(n, r.size)))
    return sorted(tasks, key=lambda t: (t.topic, t.partition, t.from_offset))


def _parts_per_range(ranges: list[OffsetRange], min_partitions: int | None) -> list[int]:
    """Tasks per range: `min_partitions` shared in proportion to size (largest remainders get the rest)."""
    if min_partitions is None or min_partitions <= len(ranges):
        return [1] * len(ranges)
    total = sum(r.size for r in ranges)
    shares = [r.size * min_partitions / total for r in ranges]
    parts = [max(1, math.floor(share)) for share in shares]
    by_remainder = sorted(range(len(ranges)), key=lambda i: parts[i] - shares[i])
    for i in by_remainder[: max(0, min_partitions - sum(parts))]:
        parts[i] += 1
    return parts


def split_range(r: OffsetRange, parts: int) -> list[OffsetRange]:
    """`parts` contiguous ranges covering `r`, sizes differing by at most one."""
    bounds = [r.from_offset + (r.size * i) // parts for i in range(parts + 1)]
    return [OffsetRange(r.topic, r.partition, a, b) for a, b in itertools.pairwise(bounds)]
