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

Batch reads publish nothing; there `kafka.group.id` and `groupIdPrefix` are ignored, with a warning.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from typing import TypeVar

from strom.spark.errors import KafkaOptionError

DEFAULT_PREFIX = "strom-spark"
_LOG = logging.getLogger("strom.spark")
T = TypeVar("T")


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


def commit_offset(config: Mapping[str, str], group: str, topic: str, partition: int, offset: int) -> None:
    """Commit `offset` for the partition to `group` (logged on failure, never raised)."""
    from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition
    from confluent_kafka.admin import AdminClient

    admin_config: dict[str, str | int | float | bool] = {
        k: v for k, v in config.items() if k != "isolation.level"
    }
    try:
        admin = AdminClient(admin_config)
        request = ConsumerGroupTopicPartitions(group, [TopicPartition(topic, partition, offset)])
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
) -> Iterator[T]:
    """Yield every batch, then (once all were read) commit `offset` to `group`."""
    yield from batches
    if group is not None:
        commit_offset(config, group, topic, partition, offset)
