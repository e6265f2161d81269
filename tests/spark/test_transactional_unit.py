"""Pure parts of the exactly-once sink: transactional ids, markers, and resuming after committed rows."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from strom.spark.transactional import (
    Marker,
    RowSkipper,
    SinkTask,
    last_marker,
    rows_committed,
    transactional_id,
)

TASK = SinkTask("8c569feb-3076-4914-8e38-665569409890", 7, 2)


def test_transactional_id_is_prefix_query_and_spark_partition() -> None:
    assert transactional_id("strom-sink", TASK) == "strom-sink-8c569feb-3076-4914-8e38-665569409890-2"
    assert transactional_id("etl", SinkTask("q", 99, 0)) == "etl-q-0"


def test_marker_round_trip_through_offset_and_metadata() -> None:
    marker = Marker(7, 120)
    metadata = marker.metadata(2)
    assert json.loads(metadata) == {"batchId": 7, "partition": 2, "records": 120}
    assert last_marker([(8, metadata)]) == marker


def test_last_marker_takes_the_newest_batch() -> None:
    older, newer = Marker(3, 10), Marker(4, 5)
    committed = [(5, newer.metadata(0)), (4, older.metadata(0)), (-1, "")]
    assert last_marker(committed) == newer
    assert last_marker([]) is None
    assert last_marker([(-1, "")]) is None
    with pytest.raises(ValueError, match="not a strom sink marker"):
        last_marker([(5, '{"batchId": 9, "records": 1}')])
    with pytest.raises(ValueError, match="not a strom sink marker"):
        last_marker([(5, "")])


def test_rows_committed_for_new_resumed_and_finished_batches() -> None:
    assert rows_committed(None, 0) == 0
    assert rows_committed(Marker(6, 50), 7) == 0  # a new batch
    assert rows_committed(Marker(7, 50), 7) == 50  # resume after the 50 committed rows
    assert rows_committed(Marker(8, 50), 7) is None  # a later batch ran: this one completed


def batches_of(sizes: list[int]) -> list[pa.RecordBatch]:
    start, out = 0, []
    for n in sizes:
        out.append(pa.RecordBatch.from_pydict({"value": list(range(start, start + n))}))
        start += n
    return out


@given(st.lists(st.integers(0, 7), max_size=8), st.integers(0, 60))
def test_row_skipper_drops_exactly_the_first_rows(sizes: list[int], skip: int) -> None:
    skipper = RowSkipper(batches_of(sizes), skip)
    kept = [v for b in skipper for v in b.column(0).to_pylist()]
    total = sum(sizes)
    assert kept == list(range(min(skip, total), total))
    assert skipper.skipped == min(skip, total)
