"""A Spark query's progress as the Spark source commits it (`strom.spark.progress`) and as the console
reads it back (`strom.web.console.spark_queries`): the job description's fields, the rates, and the query
that committed last among a group's offsets."""

from __future__ import annotations

import json

from strom.spark.progress import BatchTiming, QueryBatch, progress_metadata, query_from_description
from strom.web.console.spark_queries import query_progress, spark_section
from strom.web.console.views import GroupOffset


def test_a_micro_batchs_job_description_names_its_query_and_batch() -> None:
    text = "orders_by_hour\nid = 5f1c\nrunId = 9a0e\nbatch = 12"
    assert query_from_description(text) == QueryBatch("orders_by_hour", "5f1c", "9a0e", 12)
    assert query_from_description("\nid = 5f1c\nrunId = 9a0e\nbatch = 0") == QueryBatch("", "5f1c", "9a0e", 0)
    for other in (None, "", "my own job", "q\nid = 5f1c\nrunId = 9a0e\nbatch = init"):
        assert query_from_description(other) is None, other


def test_rates_are_the_batchs_records_over_the_planning_interval_and_the_processing_time() -> None:
    batch = QueryBatch("q", "id-1", "run-1", 3)
    decoded = json.loads(progress_metadata(batch, BatchTiming(10_000, 8_000, 500), now_ms=10_250))
    assert decoded == {
        "strom.spark": 1, "query": "id-1", "run": "run-1", "name": "q", "batch": 3, "rows": 500,
        "inputRowsPerSecond": 250.0, "processedRowsPerSecond": 2000.0, "ms": 10_250,
    }  # fmt: skip
    first = json.loads(progress_metadata(batch, BatchTiming(10_000, None, 500), now_ms=10_000))
    assert first["inputRowsPerSecond"] is None and first["processedRowsPerSecond"] is None


def _offset(partition: int, committed: int, end: int, metadata: str) -> GroupOffset:
    return GroupOffset("clicks", partition, committed, end, end - committed, None, metadata)


def test_the_console_reads_the_query_that_committed_last() -> None:
    old = progress_metadata(QueryBatch("q", "old-id", "r0", 9), BatchTiming(1, None, 4), now_ms=2)
    b4 = progress_metadata(QueryBatch("q", "new-id", "r1", 4), BatchTiming(1_000, 500, 10), now_ms=1_100)
    b5 = progress_metadata(QueryBatch("q", "new-id", "r1", 5), BatchTiming(2_000, 1_000, 20), now_ms=2_500)
    offsets = [
        _offset(0, 40, 43, b5 + "\x00"),  # as confluent-kafka's admin client commits it
        _offset(1, 12, 12, b4),
        _offset(2, 7, 9, old),  # another query committed to the same group once (a kafka.group.id reused)
        _offset(3, 1, 1, "a consumer's own metadata"),
        _offset(4, 1, 1, '{"strom.spark": 2}'),
    ]
    progress = query_progress(offsets)
    assert progress is not None
    assert (progress.query_id, progress.run_id, progress.batch_id, progress.rows) == ("new-id", "r1", 5, 20)
    assert (progress.input_rows_per_s, progress.processed_rows_per_s) == (20.0, 40.0)
    assert [o.partition for o in progress.partitions] == [0, 1] and progress.lag == 3
    html = spark_section(offsets)
    assert 'id="spark-query"' in html and "<td>new-id</td>" in html
    assert query_progress([_offset(0, 1, 1, ""), _offset(1, 1, 2, "{not json")]) is None
    assert spark_section([_offset(0, 1, 1, "")]) == ""
