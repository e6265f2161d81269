"""`PartitionLog`: one partition's log (Kafka's ``UnifiedLog`` + ``LocalLog``), synchronous.

Directory ``<topic>-<partition>/`` holds the segments (see segment.py) and ``leader-epoch-checkpoint``.
Offsets: the log start offset (first offset a consumer may read), the high watermark (set by the
broker; consumers read below it), the log end offset (LEO = last batch's base offset +
last_offset_delta + 1) and the recovery point (everything below it is fsynced).

Produce path (`append_as_leader`), header-only and allocation-light: the checks, producer plan and offset
patching of log_append.py (in the request's own buffer), then roll the active segment if this write would
overflow it, and one ``os.pwrite``. The producer state is committed only after the write succeeded.

Producer state (producer_state.py): snapshotted to ``<offset>.snapshot`` at each roll (after the
flush) and at `close`; opening or truncating the log rebuilds it from the newest trusted snapshot and
the batch headers after it (producer_replay.py; `replayed_batch_headers` counts them).

Transactions: a coordinator's marker is appended with `append_marker` (a leader) or replicated like
any batch; an ABORT adds an entry to the active segment's ``.txnindex`` (transaction_index.py) in
the same all-or-nothing write. The last stable offset is the high watermark capped by the first
unstable offset (producer_state.py). `read_committed` serves whole batches below the last stable
offset with the aborted transactions that overlap them (log_read.py).

Fetch path (`read_records`): locate the batch containing the fetch offset through the sparse offset
index and a short header scan, then answer with file slices of whole batches, never past the high
watermark; the broker sends them with ``sendfile`` (file_records.py). `read` is the same as bytes.

Durability (fsync policy) and write failures (all or nothing per append, KAFKA_STORAGE_ERROR, the
log stays online): see the package docstring. A write the disk refuses, in any method, is also told to
the log manager's failure channel (`report_io_error`; log_dirs.py: with JBOD the dir goes offline, and
a failed sync with no other dir online halts the broker).

Not thread-safe: the broker calls one partition's log from one thread (its event loop) at a time.
"""

from __future__ import annotations

import logging
import os
import shutil
import time
from collections.abc import Callable

from strom.protocol.errors import ErrorCode, KafkaError
from strom.protocol.records.batch import read_header
from strom.protocol.records.control import ControlType, EndTxnMarker, build_marker_batch
from strom.storage.checkpoint import LEADER_EPOCH_CHECKPOINT, LeaderEpochFileCache
from strom.storage.config import LogConfig
from strom.storage.file_records import FileRecords
from strom.storage.loader import SegmentSettings, load_segments
from strom.storage.log_append import (
    AppendInfo,
    commit_leader_append,
    prepare_leader_append,
    replay_replicated,
)
from strom.storage.log_dirs import is_disk_failure, reports_io_errors
from strom.storage.log_flush import flush_segments
from strom.storage.log_read import collect_aborted, read_slices, upper_bound_after
from strom.storage.log_retention import count_deletable, delete_leading_segments, move_log_start_offset
from strom.storage.log_validator import assign_offsets, validate_replicated
from strom.storage.open_files import OpenFiles, unbounded
from strom.storage.producer_replay import rebuild_producer_state
from strom.storage.producer_state import (
    DEFAULT_PRODUCER_ID_EXPIRATION_MS,
    ProducerAppendPlan,
    ProducerStateManager,
)
from strom.storage.retention import SegmentSummary
from strom.storage.segment import BatchSpan, LogSegment
from strom.storage.time_lookup import offset_for_timestamp
from strom.storage.transaction_index import AbortedTxn

TimeFn = Callable[[], int]
Buffer = bytes | bytearray | memoryview
log = logging.getLogger(__name__)


def system_time_ms() -> int:
    return time.time_ns() // 1_000_000


class PartitionLog:
    """One partition's durable log; see the module docstring."""

    def __init__(
        self,
        directory: str,
        config: LogConfig,
        time_ms: TimeFn = system_time_ms,
        *,
        recovery_point: int = 0,
        log_start_offset: int = 0,
        high_watermark: int = 0,
        clean_shutdown: bool = False,
        producer_id_expiration_ms: int = DEFAULT_PRODUCER_ID_EXPIRATION_MS,
        open_files: OpenFiles | None = None,  # the LogManager's bound, shared by its logs
    ) -> None:
        self.dir = directory
        self.on_io_error: Callable[[str, OSError], None] | None = None  # told of a failed write (KIP-112)
        self.open_files = open_files if open_files is not None else unbounded()
        self.name = os.path.basename(directory)  # <topic>-<partition>, as Kafka names it in messages
        self.config = config
        self._time_ms = time_ms
        loaded = load_segments(
            directory,
            self._segment_settings(),
            now_ms=time_ms(),
            recovery_point=recovery_point,
            clean_shutdown=clean_shutdown,
            log_start_offset=log_start_offset,
        )
        self.segments: list[LogSegment] = loaded.segments
        self.recovered_segments = loaded.recovered_segments
        self.truncated_bytes = loaded.truncated_bytes
        self.log_start_offset = max(log_start_offset, self.segments[0].base_offset)
        self.deleted_records_before = log_start_offset  # DeleteRecords': may be below a tiered local start
        self.recovery_point = min(recovery_point, self.log_end_offset)
        # Recovered segments are not fsynced (minutes for 100,000 partitions), so the recovery point stays
        self._high_watermark = min(max(high_watermark, self.log_start_offset), self.log_end_offset)
        self.last_flush_ms = time_ms()
        self.leader_epoch_cache = LeaderEpochFileCache(os.path.join(directory, LEADER_EPOCH_CHECKPOINT))
        # epochs starting beyond the log end (a crash between truncating the log and its checkpoint)
        self.leader_epoch_cache.truncate_from_end(self.log_end_offset + 1)
        self.producer_state = ProducerStateManager(directory, producer_id_expiration_ms)
        self.producer_state.on_write_error = self.report_io_error
        self.replayed_batch_headers = 0  # by the last producer-state load (snapshot + replay)
        # Tiered storage: set (-1: nothing remote yet) by the broker's remote log manager (retention.py).
        self.highest_offset_in_remote_storage: int | None = None
        validated = self.log_end_offset if loaded.recovered_segments else None  # recovery re-validated them
        self._load_producer_state(not self.leader_epoch_cache.entries, validated)

    def _segment_settings(self) -> SegmentSettings:
        config = self.config
        return SegmentSettings(config.index_interval_bytes, config.segment_index_bytes, self.open_files)

    # -- offsets ----------------------------------------------------------------------------------
    @property
    def active_segment(self) -> LogSegment:
        return self.segments[-1]

    @property
    def log_end_offset(self) -> int:
        return self.segments[-1].next_offset

    @property
    def high_watermark(self) -> int:
        return self._high_watermark

    @high_watermark.setter
    def high_watermark(self, offset: int) -> None:
        """Kafka clamps the high watermark into [log start offset, log end offset]."""
        self._high_watermark = min(max(offset, self.log_start_offset), self.log_end_offset)
        self.producer_state.on_high_watermark(self._high_watermark)

    @property
    def last_stable_offset(self) -> int:
        """The high watermark, capped by the first offset of a transaction not yet complete below it."""
        unstable = self.producer_state.first_unstable_offset()
        if unstable is None:
            return self._high_watermark
        return max(min(unstable, self._high_watermark), self.log_start_offset)

    @property
    def size_bytes(self) -> int:
        return sum(s.size for s in self.segments)

    def segment_summaries(self) -> list[SegmentSummary]:
        return [
            SegmentSummary(s.base_offset, s.next_offset, s.size, s.largest_timestamp()) for s in self.segments
        ]

    # -- append -----------------------------------------------------------------------------------
    def append_as_leader(
        self, records: Buffer, leader_epoch: int, from_coordinator: bool = False
    ) -> AppendInfo:
        """Validate, assign offsets and append a client's produce payload for this partition (or a
        coordinator's batch: its sequence numbers are not checked, as Kafka's AppendOrigin.COORDINATOR).

        A writable memoryview (a request's frame, as the network layer hands it over) is patched in
        place; anything else is copied once first (log_append.py).

        Raises:
            KafkaError: the error code Kafka would put in the produce response (CORRUPT_MESSAGE,
                MESSAGE_TOO_LARGE, RECORD_LIST_TOO_LARGE, INVALID_RECORD, INVALID_TIMESTAMP,
                INVALID_PRODUCER_EPOCH, OUT_OF_ORDER_SEQUENCE_NUMBER, KAFKA_STORAGE_ERROR).
        """
        now_ms, config, producers = self._time_ms(), self.config, self.producer_state
        base_offset = self.segments[-1].next_offset
        prepared = prepare_leader_append(
            records, config, now_ms, self.name, producers, base_offset, leader_epoch, from_coordinator
        )
        append_time = now_ms if config.log_append_time else -1
        dup = prepared.duplicate
        if dup is not None:
            append_time = dup.timestamp if config.log_append_time else -1
            return AppendInfo(dup.first_offset, dup.last_offset, append_time, self.log_start_offset, True)
        plan = prepared.plan  # nothing to record after the write without a producer id or a new epoch
        recorded = plan is not None or leader_epoch > self.leader_epoch_cache.latest_epoch
        after_write = self._after_leader_write(plan, leader_epoch, base_offset) if recorded else None
        self._write(prepared.data, prepared.spans, now_ms, after_write)
        return AppendInfo(base_offset, prepared.last_offset, append_time, self.log_start_offset, False)

    def _after_leader_write(
        self, plan: ProducerAppendPlan | None, leader_epoch: int, base_offset: int
    ) -> Callable[[], None]:
        return lambda: commit_leader_append(
            self.leader_epoch_cache, self.active_segment, plan, leader_epoch, base_offset
        )

    def append_marker(
        self,
        producer_id: int,
        producer_epoch: int,
        control_type: ControlType,
        coordinator_epoch: int,
        leader_epoch: int,
    ) -> AppendInfo:
        """Append a COMMIT or ABORT marker ending the producer's transaction (WriteTxnMarkers, as leader).

        Raises:
            KafkaError: INVALID_PRODUCER_EPOCH for an epoch below the producer's,
                TRANSACTION_COORDINATOR_FENCED for a coordinator epoch below the last marker's,
                KAFKA_STORAGE_ERROR when the write fails.
        """
        now_ms, base_offset = self._time_ms(), self.log_end_offset
        marker = EndTxnMarker(control_type, coordinator_epoch)
        buf = bytearray(build_marker_batch(producer_id, producer_epoch, marker, now_ms))
        header, plan = read_header(buf), self.producer_state.plan()
        plan.check_marker(header, marker, base_offset)
        spans = assign_offsets(buf, [(0, header)], base_offset, leader_epoch, None)
        self._write(buf, spans, now_ms, self._after_leader_write(plan, leader_epoch, base_offset))
        return AppendInfo(base_offset, base_offset, -1, self.log_start_offset, False)

    def _write(
        self, data: Buffer, spans: list[BatchSpan], now_ms: int, after_write: Callable[[], None] | None
    ) -> None:
        """Roll if due, write the batches, run ``after_write``, honour flush.messages: all or nothing.

        Raises:
            KafkaError: KAFKA_STORAGE_ERROR when any file operation fails (a full disk); the log is
                then back where it was before the call (see "Write failures" above).
        """
        segment, config = self.segments[-1], self.config
        start = segment.next_offset
        try:
            max_timestamp = spans[0].max_timestamp if len(spans) == 1 else max(s.max_timestamp for s in spans)
            size, last_offset = len(data), spans[-1].last_offset
            if segment.should_roll(
                size, max_timestamp, last_offset, now_ms, config.segment_bytes, config.segment_ms
            ):
                segment = self.roll()
            segment.append(data, spans)
            if after_write is not None:
                after_write()
            if segment.next_offset - self.recovery_point >= config.flush_messages:  # flush.messages
                self.flush()
        except OSError as e:
            log.error("%s: append at offset %d failed, rolling back: %s", self.dir, start, e)
            try:
                # An epoch assigned at start may stay: it is true of the next append too.
                self.truncate_to(start)
            except OSError as undone:  # in-memory state is already back; a file keeps what recovery repairs
                log.error("%s: rollback to offset %d incomplete: %s", self.dir, start, undone)
            self.report_io_error(e)
            raise KafkaError(ErrorCode.KAFKA_STORAGE_ERROR, f"append to {self.dir} failed: {e}") from e

    def append_as_follower(self, records: bytes | bytearray | memoryview) -> int:
        """Append batches replicated from the leader, keeping their offsets and epochs; returns the new LEO.

        Raises:
            KafkaError: CORRUPT_MESSAGE for a bad batch, or when offsets do not continue the log.
        """
        spans, headers = validate_replicated(records, self.log_end_offset)
        if not spans:
            return self.log_end_offset
        end = spans[-1].position + spans[-1].size
        view = memoryview(records)[:end]

        def replay() -> None:
            replay_replicated(
                self.segments, self.producer_state, self.leader_epoch_cache, spans, headers, view
            )

        self._write(view, spans, self._time_ms(), replay)
        return self.log_end_offset

    @reports_io_errors
    def roll(self) -> LogSegment:
        """Start a new active segment at the log end offset (fsyncing the old one); returns it."""
        old = self.active_segment
        if old.size == 0:
            return old  # an empty active segment already starts at the LEO
        old.on_become_inactive()
        self.flush()
        segment = LogSegment(
            self.dir, self.log_end_offset, now_ms=self._time_ms(), **self._segment_settings()._asdict()
        )
        self.segments.append(segment)
        # After the flush: a snapshot never describes data that could be lost.
        self.producer_state.take_snapshot(self.log_end_offset)
        return segment

    @reports_io_errors
    def flush(self) -> None:
        """Fsync every segment at or above the recovery point, with the names of new files (log_flush.py),
        and move the recovery point to the log end offset."""
        flush_segments(self.dir, self.segments, self.recovery_point)
        self.recovery_point = self.log_end_offset
        self.last_flush_ms = self._time_ms()

    def maybe_flush_by_time(self, now_ms: int) -> bool:
        """Honour flush.ms; returns whether it flushed."""
        if self.log_end_offset > self.recovery_point and now_ms - self.last_flush_ms >= self.config.flush_ms:
            self.flush()
            return True
        return False

    @reports_io_errors
    def assign_leader_epoch(self, epoch: int) -> None:
        """A new leader's ``epoch`` starts at the log end offset, in the leader-epoch checkpoint too
        (all or nothing: `LeaderEpochFileCache.assign_and_write`)."""
        # An empty log's checkpoint need not be fsynced (two fsyncs per partition created): lost in a
        # crash, it is rebuilt from the batch headers, which carry their leader epoch.
        self.leader_epoch_cache.assign_and_write(epoch, self.log_end_offset, durable=self.log_end_offset > 0)

    def report_io_error(self, exc: OSError) -> None:
        """A write of this log failed: tell the failure channel if the disk refused (KIP-112)."""
        if self.on_io_error is not None and is_disk_failure(exc):
            self.on_io_error(self.dir, exc)

    # -- read -------------------------------------------------------------------------------------
    def read_records(
        self,
        fetch_offset: int,
        max_bytes: int,
        max_offset_exclusive: int | None = None,
        min_one_batch: bool = True,
    ) -> FileRecords:
        """Whole stored batches from the one containing ``fetch_offset``, as file slices (no bytes read).

        At most ``max_bytes`` unless ``min_one_batch`` forces one larger batch; no batch whose last
        offset is at or beyond ``max_offset_exclusive`` (pass the high watermark for consumers).

        Raises:
            KafkaError: OFFSET_OUT_OF_RANGE outside [log start offset, log end offset].
        """
        leo = self.log_end_offset
        if fetch_offset < self.log_start_offset or fetch_offset > leo:
            raise KafkaError(
                ErrorCode.OFFSET_OUT_OF_RANGE,
                f"offset {fetch_offset} not in [{self.log_start_offset}, {leo}] of {self.dir}",
            )
        upper = leo if max_offset_exclusive is None else min(max_offset_exclusive, leo)
        return read_slices(self.segments, fetch_offset, max_bytes, upper, min_one_batch)

    def read(
        self,
        fetch_offset: int,
        max_bytes: int,
        max_offset_exclusive: int | None = None,
        min_one_batch: bool = True,
    ) -> bytes:
        """`read_records`, read into memory (one ``pread`` per segment): for tools and tests."""
        return self.read_records(fetch_offset, max_bytes, max_offset_exclusive, min_one_batch).read_bytes()

    def read_committed(
        self, fetch_offset: int, max_bytes: int, min_one_batch: bool = True
    ) -> tuple[FileRecords, list[AbortedTxn]]:
        """A read_committed fetch: whole batches below the last stable offset, and the aborted
        transactions overlapping them (see transactions.py).

        Raises:
            KafkaError: OFFSET_OUT_OF_RANGE outside [log start offset, log end offset].
        """
        records = self.read_records(fetch_offset, max_bytes, self.last_stable_offset, min_one_batch)
        if not records.slices or not any(s.txn_index.entries for s in self.segments):
            return records, []  # (most fetches of a consumer of many partitions find nothing new)
        upper = upper_bound_after(self.segments, records, self.log_end_offset)
        return records, collect_aborted(self.segments, fetch_offset, upper)

    def collect_aborted_transactions(self, fetch_offset: int, upper_bound: int) -> list[AbortedTxn]:
        """Aborted transactions whose range overlaps ``[fetch_offset, upper_bound)``."""
        return collect_aborted(self.segments, fetch_offset, upper_bound)

    def offset_for_timestamp(self, timestamp: int) -> tuple[int, int] | None:
        """ListOffsets by time: (offset, timestamp) of the first record with timestamp >= ``timestamp``.

        Records below the log start offset are skipped (their batch may straddle it). None if no
        record is that recent. The caller applies the high-watermark bound.
        """
        return offset_for_timestamp(self.segments, timestamp, self.log_start_offset)

    def leader_epoch_end_offset(self, epoch: int) -> tuple[int, int]:
        """OffsetForLeaderEpoch: (largest known epoch <= ``epoch``, end offset of that epoch)."""
        return self.leader_epoch_cache.end_offset_for(epoch, self.log_end_offset)

    # -- deletion and truncation ------------------------------------------------------------------
    @reports_io_errors
    def delete_records_before(self, offset: int) -> int:
        """DeleteRecords: move the log start offset up to ``offset`` (<= high watermark); returns it.

        Raises:
            KafkaError: OFFSET_OUT_OF_RANGE if ``offset`` is above the high watermark.
        """
        if offset > self._high_watermark:
            raise KafkaError(ErrorCode.OFFSET_OUT_OF_RANGE, f"{offset} is above the high watermark")
        self.deleted_records_before = max(self.deleted_records_before, offset)
        if offset > self.log_start_offset:
            move_log_start_offset(self, offset)
            delete_leading_segments(self, count_deletable(self, self._time_ms(), only_log_start=True))
        return self.log_start_offset

    @reports_io_errors
    def apply_retention(self, now_ms: int) -> int:
        """Delete segments past retention.ms / retention.bytes / the log start offset; returns how many."""
        return delete_leading_segments(self, count_deletable(self, now_ms))

    @reports_io_errors
    def truncate_to(self, offset: int) -> bool:
        """Remove every batch whose last offset is >= ``offset`` ; returns whether anything was removed."""
        if offset >= self.log_end_offset:
            return False
        if offset <= self.segments[0].base_offset:
            self.truncate_fully_and_start_at(offset)
            return True
        while len(self.segments) > 1 and self.active_segment.base_offset >= offset:
            self.segments.pop().delete()
        self.active_segment.truncate_to(offset)
        self._after_truncation()
        return True

    @reports_io_errors
    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Delete everything and restart the log empty at ``offset``."""
        for segment in self.segments:
            segment.delete()
        self.segments = [
            LogSegment(self.dir, offset, now_ms=self._time_ms(), **self._segment_settings()._asdict())
        ]
        self.log_start_offset = offset
        self.leader_epoch_cache.clear()
        self.producer_state.delete_all_snapshots()
        self._after_truncation()

    def _after_truncation(self) -> None:
        leo = self.log_end_offset
        self.recovery_point = min(self.recovery_point, leo)
        self.log_start_offset = min(self.log_start_offset, leo)
        self.high_watermark = min(self._high_watermark, leo)
        self.leader_epoch_cache.truncate_from_end(leo)
        self._load_producer_state(rebuild_epochs=False)

    def _load_producer_state(self, rebuild_epochs: bool, validated: int | None = None) -> None:
        self.replayed_batch_headers = rebuild_producer_state(
            self.dir,
            self.segments,
            self.producer_state,
            self.leader_epoch_cache,
            recovery_point=self.recovery_point if validated is None else validated,
            log_start_offset=self.log_start_offset,
            high_watermark=self._high_watermark,
            now_ms=self._time_ms(),
            rebuild_epochs=rebuild_epochs,
        )

    # -- lifecycle --------------------------------------------------------------------------------
    def update_config(self, config: LogConfig) -> None:
        self.config = config
        for segment in self.segments:
            segment.index_interval_bytes = config.index_interval_bytes

    @reports_io_errors
    def close(self) -> None:
        """Fsync everything and release the files (the LogManager writes the directory checkpoints)."""
        try:
            self.active_segment.on_become_inactive()
            self.flush()
            self.producer_state.take_snapshot(self.log_end_offset)
            self.leader_epoch_cache.write()
        finally:
            self.release_files()

    def release_files(self) -> None:
        for segment in self.segments:
            segment.close()

    def delete(self) -> None:
        """Remove the partition's files and directory."""
        for segment in self.segments:
            segment.delete()
        shutil.rmtree(self.dir, ignore_errors=True)

    def __repr__(self) -> str:
        return (
            f"PartitionLog({self.dir!r}, log_start_offset={self.log_start_offset}, "
            f"high_watermark={self._high_watermark}, log_end_offset={self.log_end_offset})"
        )
