"""A streaming query's progress published as a consumer group's committed offsets, so lag tools see it.

Theory of operation
-------------------
Spark keeps a query's offsets in its checkpoint, where `strom groups describe`, `/metrics`
(`kafka_consumergroup_lag`) and the console cannot see them. So the source also commits them to a consumer
group that no consumer ever joins (a simple offset commit, as `kafka-consumer-groups --reset-offsets`
makes): the group is `kafka.group.id` when given (Spark users set it to name their query's group), else
`<groupIdPrefix>-<query id>` (prefix `strom-spark`; the query id is Spark's, kept in the checkpoint, so a
restarted query keeps its group). Option `commitProgressToGroup` (default `true`) turns it off.

Who commits: the executors, which know the query id (the task's local property `sql.streaming.queryId`);
the driver-side reader does not. Of the tasks that read one partition's range in a micro-batch, the one
reading its end (`publish`) commits that end offset once it has read every record up to it. A micro-batch
that fails later is re-run from Spark's checkpoint (the group is never read back), so until then the
group can be ahead of the checkpoint by that micro-batch. A failed commit is logged, never fatal: this is
monitoring, and the next micro-batch commits again.

Each commit's metadata (the string an OffsetCommit keeps beside the offset) says which query and
micro-batch it is, as JSON ``{"strom.spark": 1, "query": id, "run": run id, "name": query name,
"batch": batch id, "rows": the batch's records, "inputRowsPerSecond": ..., "processedRowsPerSecond":
..., "ms": commit time}``, so the broker's console can show the query beside its lag. The executors learn
the query's name, id, run id and batch id from the task's job description, which Spark sets to
``<name>\nid = <id>\nrunId = <run id>\nbatch = <batch id>`` for every micro-batch's jobs
(`query_from_description`). The rates are measured as Spark defines its own: the driver-side reader
stamps each micro-batch's tasks with when it was planned, when the one before it was planned and how many
offsets it spans (`BatchTiming`); input rows/s is the batch's records over the time between the two
plannings, processed rows/s its records over the time from planning to this commit (the last commit of
a batch is its best estimate). `strom.web` parses the same JSON back (`progress_metadata` is the format).

Batch reads publish nothing; there `kafka.group.id` and `groupIdPrefix` are ignored, with a warning.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import TypeVar

from strom.spark.errors import KafkaOptionError

DEFAULT_PREFIX = "strom-spark"
_LOG = logging.getLogger("strom.spark")
T = TypeVar("T")
METADATA_MARK = "strom.spark"  # the key that marks a commit's metadata as a query's progress


@dataclass(frozen=True, slots=True)
class BatchTiming:
    """What the driver knows of a micro-batch when it plans it (picklable, carried by its tasks)."""

    planned_ms: int  # wall-clock time the batch's tasks were planned
    previous_planned_ms: int | None  # the batch before it (None: the first since the query started)
    rows: int  # offsets the batch spans, over all partitions


@dataclass(frozen=True, slots=True)
class QueryBatch:
    """A streaming query's micro-batch, as its job description names it."""

    name: str
    query_id: str
    run_id: str
    batch_id: int


def query_from_description(description: str | None) -> QueryBatch | None:
    """The query and batch of a micro-batch's job description (None if it is not one)."""
    if not description:
        return None
    lines = description.split("\n")
    fields = dict(line.split(" = ", 1) for line in lines[1:] if " = " in line)
    if not {"id", "runId", "batch"} <= fields.keys() or not fields["batch"].strip().isdigit():
        return None
    return QueryBatch(lines[0].strip(), fields["id"].strip(), fields["runId"].strip(), int(fields["batch"]))


def progress_metadata(batch: QueryBatch, timing: BatchTiming, now_ms: int) -> str:
    """The JSON a progress commit carries as its metadata."""
    previous = timing.previous_planned_ms
    input_s = None if previous is None else (timing.planned_ms - previous) / 1000
    processed_s = (now_ms - timing.planned_ms) / 1000
    return json.dumps(
        {
            METADATA_MARK: 1,
            "query": batch.query_id,
            "run": batch.run_id,
            "name": batch.name,
            "batch": batch.batch_id,
            "rows": timing.rows,
            "inputRowsPerSecond": round(timing.rows / input_s, 1) if input_s else None,
            "processedRowsPerSecond": round(timing.rows / processed_s, 1) if processed_s > 0 else None,
            "ms": now_ms,
        },
        separators=(",", ":"),
    )


def task_metadata(timing: BatchTiming | None) -> str:
    """The running task's progress metadata ("" outside a streaming micro-batch)."""
    if timing is None:
        return ""
    from pyspark import TaskContext

    context = TaskContext.get()
    if context is None:
        return ""
    batch = query_from_description(context.getLocalProperty("spark.job.description"))
    if batch is None:  # a job description set by the user: the ids Spark sets as properties of their own
        query_id = context.getLocalProperty("sql.streaming.queryId")
        batch_id = context.getLocalProperty("streaming.sql.batchId")
        if not query_id or not batch_id or not batch_id.isdigit():
            return ""
        batch = QueryBatch("", query_id, "", int(batch_id))
    return progress_metadata(batch, timing, int(time.time() * 1000))


def progress_group(
    opts: Mapping[str, str], config: dict[str, str], *, streaming: bool
) -> tuple[bool, str | None, str, list[str]]:
    """(publish, given group, group prefix, notes) from a source's lower-cased options; removes
    `group.id` from the client configuration (the source's own clients use no group).

    Raises:
        KafkaOptionError: `commitProgressToGroup` is not true or false.
    """
    given = config.pop("group.id", None)
    prefix = opts.get("groupidprefix", DEFAULT_PREFIX).strip() or DEFAULT_PREFIX
    flag = opts.get("commitprogresstogroup", "true").strip().lower()
    if flag not in ("true", "false"):
        raise KafkaOptionError(
            f"Invalid value '{flag}' for option 'commitProgressToGroup', must be true or false"
        )
    notes = []
    if not streaming or flag == "false":
        for option, present in (
            ("kafka.group.id", given is not None),
            ("groupIdPrefix", "groupidprefix" in opts),
        ):
            if present:
                notes.append(f"{option} is ignored: the source reads without a consumer group")
        return False, None, prefix, notes
    return True, given, prefix, notes


def group_for_task(given: str | None, prefix: str) -> str | None:
    """The group of the running task's query (None outside a streaming task)."""
    if given:
        return given
    from pyspark import TaskContext

    context = TaskContext.get()
    query_id = context.getLocalProperty("sql.streaming.queryId") if context is not None else None
    return f"{prefix}-{query_id}" if query_id else None


def commit_offset(
    config: Mapping[str, str], group: str, topic: str, partition: int, offset: int, metadata: str = ""
) -> None:
    """Commit `offset` (with `metadata`) for the partition to `group` (logged on failure, never raised)."""
    from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition
    from confluent_kafka.admin import AdminClient

    admin_config: dict[str, str | int | float | bool] = {
        k: v for k, v in config.items() if k != "isolation.level"
    }
    try:
        admin = AdminClient(admin_config)
        committed = TopicPartition(topic, partition, offset, metadata=metadata or None)
        request = ConsumerGroupTopicPartitions(group, [committed])
        for future in admin.alter_consumer_group_offsets([request]).values():
            future.result(timeout=30)
    except Exception as e:  # monitoring only: the query goes on
        _LOG.warning(
            "strom: could not commit %s-%d offset %d to group %s: %s", topic, partition, offset, group, e
        )


def then_publish(
    batches: Iterator[T],
    config: Mapping[str, str],
    group: str | None,
    topic: str,
    partition: int,
    offset: int,
    timing: BatchTiming | None = None,
) -> Iterator[T]:
    """Yield every batch, then (once all were read) commit `offset` to `group`, with the micro-batch's
    progress as its metadata when `timing` is known."""
    yield from batches
    if group is not None:
        commit_offset(config, group, topic, partition, offset, task_metadata(timing))
