"""`LogCleaner`: log compaction for topics whose ``cleanup.policy`` contains ``compact``.

Theory of operation (Kafka's ``LogCleaner`` / ``Cleaner`` / ``LogCleanerManager``, one cleaner):

1. **Choose a log.** Each compacted log splits into a *clean* section (already compacted, from the
   log start offset to the *first dirty offset* kept in ``cleaner-offset-checkpoint``), a *dirty*
   section (up to the *first uncleanable offset*) and the rest: the active segment, segments holding
   records newer than ``min.compaction.lag.ms`` and anything not below the high watermark are never
   touched. The log with the highest dirty ratio (dirty bytes / clean + dirty bytes) at or above its
   ``min.cleanable.dirty.ratio`` is cleaned; when none qualifies, a log whose oldest pending
   tombstone delete horizon has passed is (so tombstones go even when nothing new is written).
   The decisions are pure functions in compaction.py.
2. **Build the offset map** (offset_map.py): key -> offset of its latest record, over the dirty
   section, a segment at a time. Records are read with their keys only (decompressing compressed
   batches). If the map would exceed its bound, the dirty section ends at that segment boundary and
   the rest waits for the next round.
3. **Recopy.** Every segment below the end of the mapped section (clean and dirty sections alike,
   since new dirty records supersede old clean ones) is recopied in groups of consecutive segments
   that fit one segment. Each batch is kept byte for byte when nothing in it changes; otherwise its
   surviving records are re-encoded with the batch's own codec, base offset, last offset delta,
   producer id/epoch/base sequence and leader epoch, so offsets never move (gaps are fine) and
   producer sequences stay valid. Tombstones get a delete horizon (now + ``delete.retention.ms``) the
   first time they are cleaned and vanish in the first clean after it. A producer's last batch is
   kept as an empty batch if all its records go, so idempotent-producer state survives a reload.
4. **Swap** each group's cleaned segment in (`swap.swap_in`, protocol in swap.py):
   the cleaned files are written as ``.cleaned`` and fsynced, renamed to ``.swap`` (the commit point),
   the replaced segments' files renamed to ``.deleted``, the ``.swap`` files renamed to live names,
   the in-memory segment list spliced and the old files unlinked. After a crash the loader removes
   ``.cleaned``/``.deleted`` files and completes any ``.log.swap``, so a crash at any step loses
   nothing: before the commit point the old segments are intact, after it the swap replaces them.
5. **Checkpoint** the end of the cleaned section as the log's new first dirty offset.

Transactions (decisions in transaction_cleaning.py, as Kafka's cleaner makes them): nothing at or
beyond the last stable offset is cleaned (an open transaction's records are not final). Aborted
records, found through the aborted transactions of the ``.txnindex`` files, stay out of the offset map
(an aborted record never supersedes a committed one) and are removed by the recopy. A transaction's
marker is kept while the clean meets data of its transaction; once none is left it gets a delete
horizon and goes after ``delete.retention.ms``. A cleaned segment's ``.txnindex`` holds the entries of
the ABORT markers it keeps whose transactions still have data in the log. Each producer's last batch
stays (a data batch emptied if need be, a marker whole) so its sequence and epoch survive a reload.

Concurrency contract: the cleaner is synchronous and single-threaded like the rest of storage, and
`LogCleaner.clean_steps` is a generator that returns control to its driver (the broker's event loop)
after every ~``step_bytes`` of work. Readers resolve segments on each ``PartitionLog.read`` call and
read them without yielding, and the swap itself runs between two steps, so a reader always sees
either the old segments or the new one, never a mix. Appends only touch the active segment, which is
never cleaned. If retention, truncation or topic deletion removes segments while a clean is in
progress, the swap finds them gone, refuses, and the clean is abandoned (its ``.cleaned`` files
deleted); reading a segment whose file was closed raises ``OSError``, which abandons it the same way.
A write the disk refuses abandons the clean too, and fails the log dir (KIP-112, log_dirs.py).
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Generator, Iterator
from typing import NamedTuple

from strom._util import filesystem
from strom.protocol.records.batch import (
    DELETE_HORIZON_BIT,
    HEADER_SIZE,
    BatchHeader,
    RecordValidationError,
    read_header,
)
from strom.protocol.records.control import EndTxnMarker, read_marker
from strom.storage.checkpoint import CorruptCheckpointError, TopicPartition, read_offsets, write_offsets
from strom.storage.compaction import (
    Candidate,
    LogToClean,
    choose_log,
    clean_batch,
    group_segments,
    log_to_clean,
    valid_first_dirty_offset,
)
from strom.storage.log import PartitionLog, TimeFn, system_time_ms
from strom.storage.log_manager import LogManager
from strom.storage.offset_map import OffsetMap, iter_record_keys, record_payload
from strom.storage.retention import SegmentSummary
from strom.storage.segment import BatchSpan, LogSegment
from strom.storage.swap import CLEANED_SUFFIX, swap_in
from strom.storage.transaction_cleaning import (
    CleanedTransactions,
    ProducerLast,
    clean_control_batch,
    is_producer_last_batch,
)
from strom.storage.transaction_index import AbortedTxn

log = logging.getLogger(__name__)

CLEANER_OFFSET_CHECKPOINT = "cleaner-offset-checkpoint"
DEFAULT_MAX_MAP_ENTRIES = 1_000_000
DEFAULT_STEP_BYTES = 1 << 20
_READ_CHUNK = 1 << 20


class CleanerStats(NamedTuple):
    topic_partition: TopicPartition
    first_dirty_offset: int
    end_offset: int  # the new first dirty offset
    segments_before: int
    segments_after: int
    bytes_before: int
    bytes_after: int
    records_removed: int


class LogCleaner:
    """Compacts the logs of one `LogManager`; see the module docstring."""

    def __init__(
        self,
        manager: LogManager,
        time_ms: TimeFn = system_time_ms,
        *,
        max_map_entries: int = DEFAULT_MAX_MAP_ENTRIES,
        step_bytes: int = DEFAULT_STEP_BYTES,
    ) -> None:
        self._manager = manager
        self._time_ms = time_ms
        self.max_map_entries = max_map_entries
        self.step_bytes = step_bytes
        self._first_dirty: dict[TopicPartition, int] = {}
        self._horizons: dict[TopicPartition, int | None] = {}  # earliest pending delete horizon
        self._uncleanable: set[TopicPartition] = set()
        self.last_stats: CleanerStats | None = None
        for log_dir in manager.log_dirs:
            try:
                self._first_dirty.update(read_offsets(os.path.join(log_dir, CLEANER_OFFSET_CHECKPOINT)))
            except CorruptCheckpointError as e:
                log.warning("ignoring corrupt cleaner checkpoint: %s", e)

    # -- driving ----------------------------------------------------------------------------------
    def clean_once(self) -> CleanerStats | None:
        """Clean the filthiest log to completion; returns what was done (None: nothing to clean)."""
        for _ in self.clean_steps():
            pass
        return self.last_stats

    def clean_steps(self) -> Generator[None, None, None]:
        """Clean the filthiest log, yielding between bounded units of work (see module docstring).

        Sets `last_stats` (None if nothing was cleaned). Errors are logged, never raised: a log
        whose batches do not decode is left alone until the broker restarts.
        """
        self.last_stats = None
        now_ms = self._time_ms()
        chosen = self._choose(now_ms)
        if chosen is None:
            return
        tp, plog, to_clean = chosen
        try:
            yield from self._clean(tp, plog, to_clean, now_ms)
        except RecordValidationError as e:
            log.error("cannot compact %s, leaving it uncompacted until restart: %s", tp, e)
            self._uncleanable.add(tp)
        except OSError as e:
            log.warning("compaction of %s abandoned: %s", tp, e)
            plog.report_io_error(e)  # a disk that refused the cleaned files fails its log dir

    def first_dirty_offset(self, tp: TopicPartition) -> int | None:
        return self._first_dirty.get(tp)

    # -- choosing ---------------------------------------------------------------------------------
    def _choose(self, now_ms: int) -> tuple[TopicPartition, PartitionLog, LogToClean] | None:
        logs: list[tuple[TopicPartition, PartitionLog]] = []
        candidates: list[Candidate] = []
        for tp, plog in self._manager.all_logs().items():
            if not plog.config.compact_enabled or tp in self._uncleanable or len(plog.segments) < 2:
                continue
            logs.append((tp, plog))
            candidates.append(
                Candidate(
                    self._measure(tp, plog, now_ms),
                    plog.config.min_cleanable_dirty_ratio,
                    self._horizon(tp, plog),
                )
            )
        chosen = choose_log(candidates, now_ms)
        if chosen is None:
            return None
        return logs[chosen][0], logs[chosen][1], candidates[chosen].to_clean

    def _measure(self, tp: TopicPartition, plog: PartitionLog, now_ms: int) -> LogToClean:
        first_dirty = valid_first_dirty_offset(
            self._first_dirty.get(tp), plog.log_start_offset, plog.log_end_offset
        )
        # Cleaning works on whole segments: start at the segment holding the first dirty offset.
        first_dirty = max(
            [s.base_offset for s in plog.segments if s.base_offset <= first_dirty], default=first_dirty
        )
        return log_to_clean(
            plog.segment_summaries(),
            log_start_offset=plog.log_start_offset,
            first_dirty_offset=first_dirty,
            now_ms=now_ms,
            min_compaction_lag_ms=plog.config.min_compaction_lag_ms,
            high_watermark=plog.last_stable_offset,
        )

    def _horizon(self, tp: TopicPartition, plog: PartitionLog) -> int | None:
        """Earliest delete horizon stamped in the log (found by a header scan once after start-up)."""
        if tp not in self._horizons:
            horizons = [
                header.base_timestamp
                for segment in plog.segments[:-1]
                for _, header in segment.scan()
                if header.attributes & DELETE_HORIZON_BIT and header.records_count > 0
            ]
            self._horizons[tp] = min(horizons, default=None)
        return self._horizons[tp]

    # -- cleaning ---------------------------------------------------------------------------------
    def _clean(
        self, tp: TopicPartition, plog: PartitionLog, to_clean: LogToClean, now_ms: int
    ) -> Iterator[None]:
        offset_map = OffsetMap(self.max_map_entries)
        aborted = [e for s in plog.segments for e in s.txn_index.entries]
        map_txns = CleanedTransactions(aborted, to_clean.first_dirty_offset)
        end_offset = yield from self._build_offset_map(plog, to_clean, offset_map, map_txns)
        segments = [s for s in plog.segments[:-1] if s.base_offset < end_offset]
        summaries = [SegmentSummary(s.base_offset, s.next_offset, s.size, -1) for s in segments]
        producer_last = {
            pid: ProducerLast(e.last_offset, e.producer_epoch)
            for pid, e in plog.producer_state.producers.items()
        }
        txns = CleanedTransactions(aborted, segments[0].base_offset if segments else end_offset)
        bytes_before, segments_before = plog.size_bytes, len(plog.segments)
        horizons: list[int] = []
        removed = 0
        for indexes in group_segments(summaries, plog.config.segment_bytes):
            group = [segments[i] for i in indexes]
            cleaned, group_removed = yield from self._clean_group(
                plog, group, offset_map, now_ms, producer_last, horizons, txns
            )
            if not swap_in(plog.segments, group, cleaned, plog.dir):
                cleaned.delete()
                log.info("compaction of %s abandoned: its segments changed underneath", tp)
                return
            removed += group_removed
        self._first_dirty[tp] = end_offset
        self._horizons[tp] = min(horizons, default=None)
        self._write_checkpoint(os.path.dirname(plog.dir))
        self.last_stats = CleanerStats(
            tp,
            to_clean.first_dirty_offset,
            end_offset,
            segments_before,
            len(plog.segments),
            bytes_before,
            plog.size_bytes,
            removed,
        )
        log.info("compacted %s: %s", tp, self.last_stats)

    def _build_offset_map(
        self, plog: PartitionLog, to_clean: LogToClean, offset_map: OffsetMap, txns: CleanedTransactions
    ) -> Generator[None, None, int]:
        """Fill ``offset_map`` from the dirty section; returns (as the generator's value) where it ended."""
        dirty = [
            s
            for s in plog.segments[:-1]
            if to_clean.first_dirty_offset <= s.base_offset < to_clean.first_uncleanable_offset
        ]
        end_offset = to_clean.first_dirty_offset
        work = 0
        for n, segment in enumerate(dirty):
            keys: list[tuple[bytes, int]] = []
            for header, batch in _iter_batches(segment, segment.size):
                if header.is_control:
                    txns.on_marker(header, _marker(batch, header))
                elif not txns.on_data_batch(header):
                    payload = record_payload(batch, header)
                    keys.extend(
                        (key, off) for off, key in iter_record_keys(payload, header) if key is not None
                    )
                work += header.size
                if work >= self.step_bytes:
                    work = 0
                    yield
            if len(offset_map) and not offset_map.room_for([key for key, _ in keys]):
                break  # the map is full: the rest of the dirty section waits for the next round
            for key, offset in keys:
                offset_map.put(key, offset)
            end_offset = dirty[n + 1].base_offset if n + 1 < len(dirty) else to_clean.first_uncleanable_offset
        return end_offset

    def _clean_group(
        self,
        plog: PartitionLog,
        group: list[LogSegment],
        offset_map: OffsetMap,
        now_ms: int,
        producer_last: dict[int, ProducerLast],
        horizons: list[int],
        txns: CleanedTransactions,
    ) -> Generator[None, None, tuple[LogSegment, int]]:
        """Recopy ``group`` into one fsynced ``.cleaned`` segment; returns (segment, records removed)."""
        cfg = plog.config
        base = group[0].base_offset
        for kind in ("log", "index", "timeindex", "txnindex"):  # leftovers of an abandoned clean
            with contextlib.suppress(FileNotFoundError):
                filesystem.unlink(os.path.join(plog.dir, f"{base:020d}.{kind}{CLEANED_SUFFIX}"))
        cleaned = LogSegment(
            plog.dir,
            base,
            index_interval_bytes=cfg.index_interval_bytes,
            max_index_bytes=cfg.segment_index_bytes,
            now_ms=now_ms,
            file_suffix=CLEANED_SUFFIX,
            open_files=plog.open_files,
        )
        removed = 0
        entries: list[AbortedTxn] = []
        try:
            out = bytearray()
            spans: list[BatchSpan] = []
            mtime = os.stat(group[-1].log_path)
            for segment in group:
                for header, batch in _iter_batches(segment, segment.size):
                    last = is_producer_last_batch(header, producer_last)
                    if header.is_control:
                        outcome = txns.on_marker(header, _marker(batch, header))
                        if outcome.index_entry is not None:
                            entries.append(outcome.index_entry)
                        result = clean_control_batch(
                            batch,
                            header,
                            discardable=outcome.discardable,
                            now_ms=now_ms,
                            delete_retention_ms=cfg.delete_retention_ms,
                            producer_last_batch=last,
                        )
                    else:
                        result = clean_batch(
                            batch,
                            header,
                            offset_map,
                            now_ms=now_ms,
                            delete_retention_ms=cfg.delete_retention_ms,
                            producer_last_batch=last,
                            aborted=txns.on_data_batch(header),
                        )
                    removed += result.records_removed
                    if result.delete_horizon_ms is not None:
                        horizons.append(result.delete_horizon_ms)
                    if result.data is not None:
                        kept = header if result.data is batch else read_header(result.data)
                        spans.append(BatchSpan(len(out), kept.last_offset, kept.max_timestamp, kept.size))
                        out += result.data
                    if len(out) >= self.step_bytes:
                        cleaned.append(out, spans)
                        out, spans = bytearray(), []
                        yield
            if spans:
                cleaned.append(out, spans)
            for entry in entries:
                cleaned.txn_index.append(entry)
            cleaned.on_become_inactive()
            cleaned.flush()
            # Time retention of an emptied segment falls back to its mtime: keep the replaced one's.
            os.utime(cleaned.log_path, ns=(mtime.st_atime_ns, mtime.st_mtime_ns))
        except BaseException:
            cleaned.delete()
            raise
        return cleaned, removed

    def _write_checkpoint(self, log_dir: str) -> None:
        logs = self._manager.all_logs()
        offsets = {
            tp: offset
            for tp, offset in self._first_dirty.items()
            if tp in logs and os.path.dirname(logs[tp].dir) == log_dir
        }
        write_offsets(os.path.join(log_dir, CLEANER_OFFSET_CHECKPOINT), offsets)


def _marker(batch: bytes, header: BatchHeader) -> EndTxnMarker | None:
    """What a control batch says; None for an empty one or another control type.

    Raises:
        RecordDecodeError: its record is not a valid control record.
    """
    return read_marker(batch, header) if header.records_count else None


def _iter_batches(segment: LogSegment, size: int) -> Iterator[tuple[BatchHeader, bytes]]:
    """Each whole batch in the first ``size`` bytes of ``segment``, read in chunks of about 1 MiB.

    Raises:
        OSError: the segment's file was closed (deleted by retention or truncation) meanwhile.
        RecordValidationError: a malformed header.
    """
    position = 0
    while position + HEADER_SIZE <= size:
        chunk = segment.read_bytes(position, min(max(_READ_CHUNK, HEADER_SIZE), size - position))
        offset = 0
        while offset + HEADER_SIZE <= len(chunk):
            header = read_header(chunk, offset)
            if offset + header.size > len(chunk):
                break
            yield header, chunk[offset : offset + header.size]
            offset += header.size
        if offset == 0:  # one batch larger than the chunk
            header = read_header(chunk)
            if position + header.size > size:
                return
            yield header, segment.read_bytes(position, header.size)
            offset = header.size
        position += offset
