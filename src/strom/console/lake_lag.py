"""The Iceberg translation lag of an Iceberg topic's partitions, for ``strom topics describe``.

Each partition's leader translates it, so the leader is the one to ask, the way Kafka asks a leader
about its partition's offsets: ListOffsets, routed to each leader, with Strom's ``ICEBERG_TABLE``
timestamp (-100, strom.broker.handlers.list_offsets) answers the next offset the partition's table
records and the wall time since which its oldest record not yet in the table has waited; the same
request with latest and read_committed answers the last stable offset. The lag is the difference, in
records, and the time since then, in seconds: what the leader's ``/metrics`` has as
``strom_iceberg_translation_lag_records`` and ``_seconds``. A leader that does not translate the
partition (yet) answers -1: the lag is then unknown. kafka-python's admin client sends a raw
timestamp as it is (strom.console.kafka_admin).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from kafka.admin import OffsetSpec
from kafka.protocol.consumer.offsets import IsolationLevel
from kafka.structs import TopicPartition

from strom.console.clients import ClientOptions
from strom.console.kafka_admin import admin_call, kafka_admin

ICEBERG_TABLE = -100  # as strom.broker.handlers.list_offsets answers it


@dataclass(frozen=True, slots=True)
class TranslationLag:
    next_offset: int  # the next offset the table records; -1: the leader does not translate it
    last_stable_offset: int
    waiting_since_ms: int  # -1: no record waits

    @property
    def records(self) -> int:
        return max(self.last_stable_offset - self.next_offset, 0)

    def fields(self, now_ms: int) -> str:
        """The tab-separated fields ``strom topics describe`` appends to the partition's line."""
        if self.next_offset < 0:
            return "\tIcebergLag: unknown (not translated yet)"
        waited = max(now_ms - self.waiting_since_ms, 0) / 1000 if self.waiting_since_ms >= 0 else 0.0
        seconds = waited if self.records else 0.0
        return f"\tInTable: {self.next_offset}\tIcebergLag: {self.records} records, {seconds:.1f} s"


def translation_lag(
    options: ClientOptions, partitions: Sequence[tuple[str, int]]
) -> dict[tuple[str, int], TranslationLag]:
    """Each (topic, partition)'s translation lag, from its leader."""
    wanted = [TopicPartition(t, p) for t, p in partitions]
    if not wanted:
        return {}
    with kafka_admin(options, "topics describe") as admin:
        table = admin_call(
            options,
            "cannot ask the leaders for their Iceberg tables",
            lambda: _list(admin, wanted, ICEBERG_TABLE),
        )
        stable = admin_call(
            options,
            "cannot list the last stable offsets",
            lambda: _list(admin, wanted, OffsetSpec.LATEST, IsolationLevel.READ_COMMITTED),
        )
    return {
        (tp.topic, tp.partition): TranslationLag(
            int(table[tp].offset), int(stable[tp].offset), int(table[tp].timestamp)
        )
        for tp in wanted
        if tp in table and tp in stable
    }


def now_ms() -> int:
    return int(time.time() * 1000)


def _list(
    admin: Any,
    wanted: list[TopicPartition],
    spec: int,
    level: IsolationLevel = IsolationLevel.READ_UNCOMMITTED,
) -> dict[TopicPartition, Any]:
    answer: dict[TopicPartition, Any] = admin.list_partition_offsets(
        dict.fromkeys(wanted, spec), isolation_level=level
    )
    return answer
