"""One read across an Iceberg topic's table and its log: the options and the seam arithmetic. Pure.

Theory of operation
-------------------
With ``strom.iceberg.history=true``, a topic whose ``strom.iceberg.mode`` is not ``disabled`` is read in
two halves that meet at a *seam*: each partition's next offset ``N`` recorded by the table snapshot the
plan pins (strom.lake.history). Offsets below ``N`` come from the table, offsets from ``N`` on from the
log, so a range ``[from, until)`` becomes a table range ``[from, min(until, N))`` and a log range
``[max(from, N), until)``; every record is read once whatever the translator commits meanwhile (a later
snapshot only moves ``N`` up, and a re-planned range still splits into the same records).

What is available: the table from the start of translation up to ``N``, the log from its log start
offset ``L`` up to the high watermark. So ``earliest`` is offset 0 for a partition the table has rows of
(the table read starts at its first row), and records are lost only in a gap ``[N, L)`` -- retention
deleted records the translator had not reached -- which `split_at_seams` treats as Spark treats data
loss (`failOnDataLoss`). Partitions without a seam (no table, or no rows of theirs in it yet) are read
from the log as before (`planning.reconcile_start`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from strom._util.errors import ConfigError
from strom.lake.config_defs import PROPERTY_PREFIX, catalog_settings
from strom.spark.errors import KafkaOptionError
from strom.spark.option_values import option_bool
from strom.spark.options import TopicPartitionOffsets
from strom.spark.planning import OffsetRange, reconcile_start, report_loss

HISTORY_OPTION = "strom.iceberg.history"
_CATALOG_OPTIONS = ("strom.iceberg.catalog.type", "strom.iceberg.catalog.uri", "strom.iceberg.warehouse")
# A table range is read into memory by one task: longer ones are cut (about 50 MB of 100-byte records).
TABLE_TASK_MAX_RECORDS = 500_000


@dataclass(frozen=True)
class LakeOptions:
    """``strom.iceberg.history`` and the catalog to read the tables from (pyiceberg properties)."""

    catalog: dict[str, str]


def parse_lake_options(options: Mapping[str, str]) -> LakeOptions | None:
    """The history read's settings from a query's lower-cased options (None: not asked for).

    The catalog options have the broker settings' names: ``strom.iceberg.catalog.type`` (``sql`` or
    ``rest``), ``strom.iceberg.catalog.uri`` (required: the reader has no data dir to default to),
    ``strom.iceberg.warehouse`` and ``strom.iceberg.catalog.property.<name>``.

    Raises:
        KafkaOptionError: history asked for without a catalog URI, or a wrong catalog type.
    """
    if not option_bool(options, HISTORY_OPTION, False):
        return None
    settings = {name: str(options[name]) for name in _CATALOG_OPTIONS if name in options}
    if not settings.get("strom.iceberg.catalog.uri"):
        raise KafkaOptionError(
            f"{HISTORY_OPTION} needs the option strom.iceberg.catalog.uri: the catalog the brokers write "
            "Iceberg topics to (e.g. sqlite:///<broker data dir>/iceberg/catalog.db, or a REST catalog's URL)"
        )
    properties = {
        k[len(PROPERTY_PREFIX) :]: str(v) for k, v in options.items() if k.startswith(PROPERTY_PREFIX)
    }
    try:
        # A reader never writes: the warehouse default (for new tables) does not matter.
        return LakeOptions(catalog_settings(settings, ".", {}, properties).properties)
    except ConfigError as exc:
        raise KafkaOptionError(str(exc)) from exc


def lake_earliest(
    resolved: TopicPartitionOffsets,
    earliest_asked: set[tuple[str, int]],
    seams: Mapping[tuple[str, int], int],
) -> TopicPartitionOffsets:
    """``resolved`` with offset 0 for the partitions asked to start at ``earliest`` whose table has rows."""
    return {tp: 0 if tp in earliest_asked and tp in seams else offset for tp, offset in resolved.items()}


def split_at_seams(
    start: TopicPartitionOffsets,
    end: TopicPartitionOffsets,
    log_start: Mapping[tuple[str, int], int],
    seams: Mapping[tuple[str, int], int],
    *,
    fail_on_data_loss: bool,
) -> tuple[list[OffsetRange], list[OffsetRange]]:
    """(table ranges, log ranges) covering ``start``..``end``, split at each partition's seam.

    Raises:
        DataLossError: records the read covers are in neither the table nor the log (a gap between the
            seam and the log start offset, a partition gone, offsets gone backwards) and
            ``fail_on_data_loss`` is true.
    """
    plain = {tp: until for tp, until in end.items() if tp not in seams}
    log = reconcile_start(start, plain, log_start, fail_on_data_loss=fail_on_data_loss)
    table: list[OffsetRange] = []
    for (topic, partition), until in sorted(end.items()):
        seam = seams.get((topic, partition))
        if seam is None:
            continue
        where = f"{topic}-{partition}"
        first = log_start.get((topic, partition))
        if first is None:
            report_loss(fail_on_data_loss, f"Partition {where} is gone")
            continue
        begin = start.get((topic, partition), 0)
        if until < begin:
            report_loss(fail_on_data_loss, f"Partition {where}'s offset was changed from {begin} to {until}")
            continue
        if begin < min(until, seam):
            table.append(OffsetRange(topic, partition, begin, min(until, seam)))
        tail = max(begin, seam)
        if tail < until and tail < first:
            report_loss(
                fail_on_data_loss,
                f"Cannot fetch offsets {tail} to {first - 1} of {where}: its Iceberg table holds the offsets "
                f"below {seam} and its log starts at {first}",
            )
            tail = first
        if tail < until:
            log.append(OffsetRange(topic, partition, tail, until))
    return table, sorted(log, key=lambda r: (r.topic, r.partition))
