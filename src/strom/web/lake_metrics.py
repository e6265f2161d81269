"""Iceberg topics' metrics for ``/metrics`` (once the broker's translator runs), per partition this
broker translates: ``strom_iceberg_translation_lag_records`` (records below the last stable offset as
it is at the scrape, not yet in the table: those of a round in flight too),
``strom_iceberg_translation_lag_seconds`` (how long the oldest of them has waited; 0 when none waits;
strom.broker.lake.lag), and the counters ``strom_iceberg_translated_rows`` and
``strom_iceberg_dead_letters``, ``strom_iceberg_translation_idle_rounds`` and
``strom_iceberg_translation_raised_rounds`` (rounds that ended in the idle share, and in the share the
backlog controller raised them to: strom.broker.lake.backlog), all since the partition's translation
task started."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client.core import Metric

from strom.metrics.families import counter, gauge

if TYPE_CHECKING:  # imported only once a topic needs it (strom.broker.lake.wiring): pyiceberg is heavy
    from strom.broker.lake.translator import IcebergTranslator

LABELS = ["topic", "partition"]


def iceberg_families(translator: IcebergTranslator, now_ms: int) -> Iterator[Metric]:
    lags = sorted(translator.lag.items())
    records = [([t, str(p)], float(lag.records)) for (t, p), lag in lags]
    seconds = [([t, str(p)], lag.seconds(now_ms)) for (t, p), lag in lags]
    yield gauge(
        "strom_iceberg_translation_lag_records", "Committed records not yet in the table.", LABELS, records
    )
    yield gauge(
        "strom_iceberg_translation_lag_seconds",
        "Seconds the oldest record not yet in the table has waited.",
        LABELS,
        seconds,
    )
    yield counter(
        "strom_iceberg_translated_rows",
        "Rows appended to the table.",
        LABELS,
        [([t, str(p)], lag.rows) for (t, p), lag in lags],
    )
    yield counter(
        "strom_iceberg_dead_letters",
        "Rows appended to the dead-letter table.",
        LABELS,
        [([t, str(p)], lag.dead) for (t, p), lag in lags],
    )
    yield counter(
        "strom_iceberg_translation_idle_rounds",
        "Translation rounds that ran only on CPU nothing else wanted (the lag within its bound).",
        LABELS,
        [([t, str(p)], lag.backlog.idle_rounds) for (t, p), lag in lags],
    )
    yield counter(
        "strom_iceberg_translation_raised_rounds",
        "Translation rounds that took their share of the CPU (the lag past its bound).",
        LABELS,
        [([t, str(p)], lag.backlog.raised_rounds) for (t, p), lag in lags],
    )
