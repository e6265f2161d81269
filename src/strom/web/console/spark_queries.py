"""Spark streaming queries on a group's page: the progress the Spark source commits with its offsets.

Theory of operation
-------------------
The Spark source (`strom.spark.progress`) commits each micro-batch's end offsets to a consumer group of
the query's own (``strom-spark-<query id>`` unless the query names one), and each commit's metadata is
JSON marked ``"strom.spark": 1`` holding the query's id, run id and name, the micro-batch's id and size,
its input and processed rows per second and the commit time. So the console needs no channel from Spark:
the group's committed offsets, which every group page already reads (from this broker's coordinator or
with OffsetFetch from the group's), carry them, and the lag beside them is the group's lag.

`query_progress` is pure: from a group's offsets, the query that committed last (by commit time) and
its latest batch (by batch id) as its last commit reports it, with the offsets and lag of each partition
that query committed. Metadata that is not such JSON is another client's and is ignored.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from strom.web.console.pages import esc, link, table, topic_path
from strom.web.console.views import GroupOffset

MARK = "strom.spark"  # strom.spark.progress.METADATA_MARK (this layer does not import pyspark's package)


@dataclass(frozen=True)
class QueryProgress:
    query_id: str
    run_id: str
    name: str
    batch_id: int
    rows: int
    input_rows_per_s: float | None
    processed_rows_per_s: float | None
    committed_ms: int
    partitions: list[GroupOffset]

    @property
    def lag(self) -> int | None:
        lags = [o.lag for o in self.partitions if o.lag is not None]
        return sum(lags) if lags else None


def _progress(metadata: str) -> dict[str, object] | None:
    # librdkafka's admin client sends the metadata with the C string's terminating NUL.
    metadata = metadata.rstrip("\x00").strip()
    if not metadata.startswith("{"):
        return None
    try:
        decoded = json.loads(metadata)
    except ValueError:
        return None
    return decoded if isinstance(decoded, dict) and decoded.get(MARK) == 1 else None


def _number(value: object) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def query_progress(offsets: list[GroupOffset]) -> QueryProgress | None:
    """The Spark query whose progress the group's offsets carry (None: not a Spark query's group)."""
    parsed = [(o, p) for o in offsets if (p := _progress(o.metadata)) is not None]
    if not parsed:
        return None

    def committed_ms(item: tuple[GroupOffset, dict[str, object]]) -> float:
        return _number(item[1].get("ms")) or 0.0

    def order(item: tuple[GroupOffset, dict[str, object]]) -> tuple[float, float]:
        return (_number(item[1].get("batch")) or 0.0, committed_ms(item))

    # The query that committed last (a group may outlive a query); its latest batch by id, since the
    # executors' clocks may differ a little.
    query = str(max(parsed, key=committed_ms)[1].get("query", ""))
    _, latest = max(((o, p) for o, p in parsed if str(p.get("query", "")) == query), key=order)
    return QueryProgress(
        query_id=query,
        run_id=str(latest.get("run", "")),
        name=str(latest.get("name", "")),
        batch_id=int(_number(latest.get("batch")) or 0),
        rows=int(_number(latest.get("rows")) or 0),
        input_rows_per_s=_number(latest.get("inputRowsPerSecond")),
        processed_rows_per_s=_number(latest.get("processedRowsPerSecond")),
        committed_ms=int(_number(latest.get("ms")) or 0),
        partitions=[o for o, p in parsed if str(p.get("query", "")) == query],
    )


def _rate(value: float | None) -> str:
    return "-" if value is None else f"{value:,.1f}"


def spark_section(offsets: list[GroupOffset]) -> str:
    """The group page's "Spark query" section ("" when the group is not a Spark query's)."""
    progress = query_progress(offsets)
    if progress is None:
        return ""
    facts = table(
        ["Query", "Id", "Run id", "Batch", "Rows in batch", "Input rows/s", "Processed rows/s", "Lag"],
        [[esc(progress.name or "-"), esc(progress.query_id), esc(progress.run_id), esc(progress.batch_id),
          esc(progress.rows), esc(_rate(progress.input_rows_per_s)),
          esc(_rate(progress.processed_rows_per_s)), esc("-" if progress.lag is None else progress.lag)]],
        "spark-query",
    )  # fmt: skip
    partitions = table(
        ["Topic", "Partition", "Committed by the query", "Log end", "Lag"],
        [
            [link(topic_path(o.topic, o.partition), o.topic), esc(o.partition), esc(o.committed),
             esc("-" if o.log_end is None else o.log_end), esc("-" if o.lag is None else o.lag)]
            for o in progress.partitions
        ],
        "spark-offsets",
    )  # fmt: skip
    note = (
        "<p class='muted'>Published by the Spark source with each micro-batch's end offsets (the commit's "
        "metadata): rates as Spark defines them, measured by the source (input: the batch's records over "
        "the time since the previous batch was planned; processed: over the time from planning to the "
        "commit). Lag: the high watermark minus the offset the query committed.</p>"
    )
    return "<h2>Spark streaming query</h2>" + facts + partitions + note
