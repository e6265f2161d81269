"""Helpers for the log cleaner tests: a compacted log under a manual clock, keyed appends, full reads.

Holds no tests; the test_cleaner* modules import it.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

from strom.protocol.records.builder import build_batch, decode_batches
from strom.storage.cleaner import LogCleaner
from strom.storage.config import LogConfig
from strom.storage.log import PartitionLog
from strom.storage.log_manager import LogManager

COMPACT = LogConfig(
    cleanup_policy="compact",
    segment_bytes=2_000,
    min_cleanable_dirty_ratio=0.01,
    delete_retention_ms=10_000,
    index_interval_bytes=200,
)

Row = tuple[int, bytes | None, bytes | None]  # (offset, key, value)


class Clock:
    """Starts at wall-clock time: a segment emptied by cleaning falls back to its file's mtime for time
    retention, so the test clock must not lag behind the files' mtimes."""

    def __init__(self, now_ms: int | None = None) -> None:
        self.now_ms = time.time_ns() // 1_000_000 if now_ms is None else now_ms

    def __call__(self) -> int:
        return self.now_ms


class Fixture:
    """One LogManager with one compacted partition log and a cleaner, all on a manual clock."""

    def __init__(self, log_dir: str, config: LogConfig = COMPACT, **cleaner_args: Any) -> None:
        self.log_dir = log_dir
        self.config = config
        self.clock = Clock()
        self.cleaner_args = cleaner_args
        self.open()

    def open(self) -> None:
        self.manager = LogManager([self.log_dir], self.config, self.clock)
        self.log: PartitionLog = self.manager.get_or_create_log("t", 0, self.config)
        self.log.high_watermark = self.log.log_end_offset
        self.cleaner = LogCleaner(self.manager, self.clock, **self.cleaner_args)

    def reopen(self, clean: bool = True) -> None:
        if clean:
            self.manager.shutdown()
        self.open()

    def append(
        self,
        records: list[tuple[bytes | None, bytes | None]],
        compression: int = 0,
        **batch_args: Any,
    ) -> int:
        batch = build_batch(
            [(k, v, (), self.clock.now_ms) for k, v in records], compression=compression, **batch_args
        )
        info = self.log.append_as_leader(batch, leader_epoch=0)
        self.log.high_watermark = self.log.log_end_offset
        return info.base_offset

    def roll(self) -> None:
        self.log.roll()

    def rows(self) -> list[Row]:
        return read_rows(self.log)

    def with_config(self, **changes: Any) -> None:
        self.config = dataclasses.replace(self.config, **changes)
        self.manager.update_config("t", self.config)


def read_rows(log: PartitionLog) -> list[Row]:
    data = log.read(log.log_start_offset, 1 << 30)
    return [(r.offset, r.key, r.value) for b in decode_batches(data) for r in b.records]


def latest_by_key(rows: list[Row]) -> dict[bytes | None, Row]:
    latest: dict[bytes | None, Row] = {}
    for row in rows:
        latest[row[1]] = row
    return latest


def assert_compacted_view(original: list[Row], cleaned: list[Row], *, tombstones_may_vanish: bool) -> None:
    """The cleaned log is a subsequence of the original (same offsets, same records) keeping every
    key's latest record (a tombstone may be gone when its horizon has passed)."""
    by_offset = {row[0]: row for row in original}
    offsets = [row[0] for row in cleaned]
    assert offsets == sorted(set(offsets)), "offsets must strictly increase"
    for row in cleaned:
        assert by_offset[row[0]] == row, f"record at {row[0]} changed"
    kept = {row[0] for row in cleaned}
    for key, row in latest_by_key(original).items():
        if key is None:
            continue
        if row[2] is None and tombstones_may_vanish:
            continue
        assert row[0] in kept, f"latest record of {key!r} at {row[0]} lost"
