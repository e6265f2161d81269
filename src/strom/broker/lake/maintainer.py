"""The background maintenance of an Iceberg topic's tables (strom.lake.maintenance): small-file
compaction, snapshot expiry and orphan-file removal, by the leader of the topic's partition 0, so one
broker per table.

Theory of operation. The translator (translator.py) starts `maintain_tables` for each topic whose
partition 0 this broker leads (at that leader epoch) and whose ``strom.iceberg.compaction.interval.ms``
is not -1. Every interval the task runs one pass over the topic's table and then its dead-letter table
(if it exists) on the maintainer's own worker thread, so a long compaction never delays translation
rounds and the event loop never waits on pyiceberg. A pass commits like the translator, requiring the
snapshot it read: a translator's commit in between makes the catalog refuse the pass's commit, which
is planned again on the new snapshot; no row is lost or doubled. A failed pass is logged and tried
again at the next interval. The task ends when the broker stops leading partition 0 at that epoch,
the topic turns ``disabled`` or the interval -1; a deposed leader's pass still running is harmless
(its commits are checked the same way).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from functools import partial
from typing import TypeVar

from strom._util.clock import Clock, sleep_ms
from strom.broker.replication.partition import Partition
from strom.lake.maintenance import MaintenanceResult, MaintenanceSettings, maintain
from strom.lake.tables import LakeTables, TableRef
from strom.storage.config import LogConfig

log = logging.getLogger(__name__)

T = TypeVar("T")
InThread = Callable[[Callable[[], T]], Awaitable[T]]


def settings_of(config: LogConfig) -> MaintenanceSettings:
    return MaintenanceSettings(
        config.strom_iceberg_compaction_min_files,
        config.strom_iceberg_compaction_target_file_bytes,
        config.strom_iceberg_snapshot_retention_ms,
        config.strom_iceberg_orphan_file_age_ms,
    )


def maintains(config: LogConfig) -> bool:
    return config.strom_iceberg_mode != "disabled" and config.strom_iceberg_compaction_interval_ms >= 0


async def maintain_tables(
    part: Partition,
    topic_id: str,
    leads: Callable[[], bool],
    log_config_for: Callable[[str], LogConfig],
    in_thread: InThread[MaintenanceResult],
    tables: LakeTables,
    clock: Clock,
) -> None:
    """Maintain ``part``'s topic's tables every interval while ``leads()`` (cancelled at shutdown)."""
    while leads():
        config = log_config_for(part.topic)
        if not maintains(config):
            return
        await sleep_ms(clock, max(config.strom_iceberg_compaction_interval_ms, 10))
        config = log_config_for(part.topic)
        if not leads() or not maintains(config):
            return
        for ref in TableRef(part.topic, config.strom_iceberg_mode, topic_id=topic_id).topic_tables():
            try:
                done = await in_thread(partial(maintain, tables, ref, settings_of(config), clock.time_ms()))
            except Exception as exc:
                log.warning("iceberg table %s: maintenance failed: %r", ref.name, exc)
                continue
            if done.rewritten_files or done.expired_snapshots or done.deleted_orphans:
                log.info(
                    "iceberg table %s: %d small files rewritten as %d; %d snapshots expired, "
                    "%d files deleted; %d orphan files deleted",
                    ref.name,
                    done.rewritten_files,
                    done.written_files,
                    done.expired_snapshots,
                    len(done.deleted_files),
                    len(done.deleted_orphans),
                )
