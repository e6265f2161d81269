"""Pure decisions of the log cleaner: what is cleanable, which log to clean, which records survive.

No I/O here; cleaner.py applies these to segments (see its docstring for the theory of operation).

* `first_uncleanable_offset`: the base offset of the first segment the cleaner must not touch: the
  active segment, a segment holding records newer than ``min.compaction.lag.ms``, or one that is not
  wholly below the high watermark (Kafka's ``LogCleanerManager.cleanableOffsets``).
* `log_to_clean`: the clean section ``[log start, first dirty)`` and the dirty section
  ``[first dirty, first uncleanable)`` in bytes, and the dirty ratio dirty / (clean + dirty).
* `choose_log`: the filthiest log whose ratio is at least its ``min.cleanable.dirty.ratio``; if none,
  a log holding tombstones whose delete horizon has passed (Kafka 3's low-throughput rule).
* `retain_record` and `clean_batch`: a record survives if it has a key, is the latest record of that
  key in the offset map, and is not a tombstone whose batch's delete horizon has passed. A batch that
  keeps a tombstone and has no delete horizon yet gets one (now + ``delete.retention.ms``, attributes
  bit 6, KIP-534). A batch keeps its base offset and last offset delta, so offsets and producer
  sequences are unchanged; a batch left empty is dropped unless it is its producer's last, which is
  kept as an empty header so the idempotent-producer state survives (Kafka's ``RETAIN_EMPTY``). A
  batch of an aborted transaction keeps none of its records; control batches (transaction markers)
  are decided in transaction_cleaning.py.
* `group_segments`: consecutive segments whose cleaned result fits in one segment (at most
  ``segment.bytes`` of input, offsets within a 32-bit delta of the group's base).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import NamedTuple

from strom.protocol.records.batch import HEADER_SIZE, BatchHeader
from strom.protocol.records.builder import decode_batch, encode_batch
from strom.protocol.records.compression import XERIAL_MAGIC, CompressionType
from strom.protocol.records.record import Record
from strom.storage.offset_map import MAX_UNCOMPRESSED_BYTES, OffsetMap
from strom.storage.retention import SegmentSummary

INT32_MAX = (1 << 31) - 1


class LogToClean(NamedTuple):
    log_start_offset: int
    first_dirty_offset: int
    first_uncleanable_offset: int
    clean_bytes: int
    cleanable_bytes: int

    @property
    def total_bytes(self) -> int:
        return self.clean_bytes + self.cleanable_bytes

    @property
    def cleanable_ratio(self) -> float:
        return self.cleanable_bytes / self.total_bytes if self.total_bytes else 0.0


class Candidate(NamedTuple):
    """One compacted log as `choose_log` sees it."""

    to_clean: LogToClean
    min_cleanable_ratio: float
    earliest_delete_horizon_ms: int | None  # of the tombstones still in the log, if any


class CleanedBatch(NamedTuple):
    data: bytes | None  # None: the whole batch is gone
    delete_horizon_ms: int | None  # set when the output still holds tombstones waiting for it
    records_removed: int


def valid_first_dirty_offset(checkpointed: int | None, log_start_offset: int, log_end_offset: int) -> int:
    """The checkpointed first dirty offset, or the log start offset if it is missing or out of range."""
    if checkpointed is None or not log_start_offset <= checkpointed <= log_end_offset:
        return log_start_offset
    return checkpointed


def first_uncleanable_offset(
    segments: Sequence[SegmentSummary], *, now_ms: int, min_compaction_lag_ms: int, high_watermark: int
) -> int:
    """Base offset of the first segment that must not be cleaned (the active one at the latest)."""
    for segment, following in itertools.pairwise(segments):
        too_new = min_compaction_lag_ms > 0 and segment.largest_timestamp > now_ms - min_compaction_lag_ms
        if too_new or following.base_offset > high_watermark:
            return segment.base_offset
    return segments[-1].base_offset


def log_to_clean(
    segments: Sequence[SegmentSummary],
    *,
    log_start_offset: int,
    first_dirty_offset: int,
    now_ms: int,
    min_compaction_lag_ms: int,
    high_watermark: int,
) -> LogToClean:
    """Measure the clean and dirty sections of a log (whole segments; see the module docstring)."""
    uncleanable = first_uncleanable_offset(
        segments, now_ms=now_ms, min_compaction_lag_ms=min_compaction_lag_ms, high_watermark=high_watermark
    )
    first_dirty = min(first_dirty_offset, uncleanable)
    clean = sum(s.size_bytes for s in segments if s.base_offset < first_dirty)
    dirty = sum(s.size_bytes for s in segments if first_dirty <= s.base_offset < uncleanable)
    return LogToClean(log_start_offset, first_dirty, uncleanable, clean, dirty)


def choose_log(candidates: Sequence[Candidate], now_ms: int) -> int | None:
    """Index of the log to clean next, or None."""
    dirty = [
        (c.to_clean.cleanable_ratio, i)
        for i, c in enumerate(candidates)
        if c.to_clean.cleanable_bytes > 0 and c.to_clean.cleanable_ratio >= c.min_cleanable_ratio
    ]
    if dirty:
        return max(dirty)[1]
    expired = [
        (c.earliest_delete_horizon_ms, i)
        for i, c in enumerate(candidates)
        if c.earliest_delete_horizon_ms is not None
        and c.earliest_delete_horizon_ms <= now_ms
        and c.to_clean.first_uncleanable_offset > c.to_clean.log_start_offset
    ]
    return min(expired)[1] if expired else None


def group_segments(segments: Sequence[SegmentSummary], max_bytes: int) -> list[list[int]]:
    """Indexes of consecutive segments to clean into one segment each (every group has at least one)."""
    groups: list[list[int]] = []
    size = 0
    for i, segment in enumerate(segments):
        if groups:
            base = segments[groups[-1][0]].base_offset
            fits = size + segment.size_bytes <= max_bytes and segment.next_offset - base <= INT32_MAX
            if fits:
                groups[-1].append(i)
                size += segment.size_bytes
                continue
        groups.append([i])
        size = segment.size_bytes
    return groups


def retain_record(
    offset: int, key: bytes | None, is_tombstone: bool, latest_offset: int, past_horizon: bool
) -> bool:
    """Whether compaction keeps a record (``latest_offset``: the offset map's entry for its key, or -1)."""
    if key is None:
        return False  # a compacted log has no use for keyless records (Kafka drops them too)
    if offset < latest_offset:
        return False
    return not (is_tombstone and past_horizon)


def clean_batch(
    batch: bytes,
    header: BatchHeader,
    offset_map: OffsetMap,
    *,
    now_ms: int,
    delete_retention_ms: int,
    producer_last_batch: bool,
    aborted: bool = False,
) -> CleanedBatch:
    """Compact one whole stored data batch (see the module docstring); ``aborted``: it belongs to an
    aborted transaction, so none of its records stays (transaction_cleaning.py).

    Raises:
        RecordValidationError: the batch does not decode (CRC mismatch, bad records).
    """
    if header.is_control:
        return CleanedBatch(batch, None, 0)  # markers: transaction_cleaning.clean_control_batch
    decoded = decode_batch(batch, max_uncompressed_size=MAX_UNCOMPRESSED_BYTES)
    horizon = decoded.delete_horizon_ms
    past_horizon = horizon is not None and now_ms >= horizon
    kept = [
        r
        for r in decoded.records
        if not aborted
        and retain_record(
            r.offset, r.key, r.value is None, offset_map.get(r.key) if r.key is not None else -1, past_horizon
        )
    ]
    removed = len(decoded.records) - len(kept)
    has_tombstone = any(r.value is None for r in kept)
    if horizon is None and has_tombstone:
        horizon = now_ms + delete_retention_ms
    pending = horizon if has_tombstone else None
    if not kept and not producer_last_batch:
        return CleanedBatch(None, None, removed)  # also an empty batch that is no longer the last
    if removed == 0 and (pending is None or decoded.delete_horizon_ms is not None):
        return CleanedBatch(batch, pending, 0)  # unchanged: keep the original bytes
    return CleanedBatch(rebuild_batch(batch, header, kept, horizon if kept else None), pending, removed)


def rebuild_batch(batch: bytes, header: BatchHeader, kept: Sequence[Record], horizon: int | None) -> bytes:
    """``batch`` holding only ``kept``, with its offsets, producer fields, codec and attributes."""
    codec = CompressionType(header.compression)
    xerial = codec is CompressionType.SNAPPY and batch[HEADER_SIZE : HEADER_SIZE + 8] == XERIAL_MAGIC
    return encode_batch(
        kept,
        base_offset=header.base_offset,
        last_offset_delta=header.last_offset_delta,
        max_timestamp=header.max_timestamp if header.timestamp_type == 1 or not kept else None,
        delete_horizon_ms=horizon,
        compression=codec,
        producer_id=header.producer_id,
        producer_epoch=header.producer_epoch,
        base_sequence=header.base_sequence,
        partition_leader_epoch=header.partition_leader_epoch,
        timestamp_type=header.timestamp_type,
        is_transactional=header.is_transactional,
        is_control=header.is_control,
        xerial_snappy=xerial,
    )
