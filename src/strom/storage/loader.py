"""Opening a partition directory: crash recovery (Kafka's ``LogLoader``).

Steps, in order:

1. Remove leftovers of interrupted operations: ``*.tmp`` (checkpoint writes), ``*.deleted`` and
   ``*.cleaned`` files. Then the cleaner's committed ``*.log.swap`` files replace the segments they
   were cleaned from (`swap.recover_swaps`). Index files without a ``.log`` are removed.
2. Open every ``<20-digit base offset>.log`` in offset order.
3. Decide which segments to recover. After an unclean shutdown that is the segment containing the
   recovery point and every later one (earlier ones were fsynced before the recovery point moved past
   them), except that the segment containing it is only restored (step 5) if its batches all end at
   or below the recovery point with no byte after them: then every byte of it was fsynced (an idle
   partition killed with -9 recovers nothing). After a clean shutdown nothing is recovered. Any
   segment whose index is missing or fails its sanity check is recovered regardless.
4. Recovering a segment re-reads it batch by batch (header, CRC-32C, increasing offsets), rebuilds
   both indexes and truncates at the first invalid byte: a torn write, trailing garbage or a flipped
   bit all end the log there. If a segment other than the last had to be truncated, every later
   segment is deleted, because offsets after a hole cannot be trusted.
5. Segments that are not recovered restore their in-memory state (next offset, max timestamp) from
   their indexes plus a short tail scan; if that scan finds a malformed header, the segment is
   recovered after all.
6. An empty directory gets one empty segment at the log start offset.

Everything else is `PartitionLog`'s: the producer state (newest ``<offset>.snapshot`` plus the batch
headers after it) and, if its checkpoint is missing, the leader epochs (every batch header).
"""

from __future__ import annotations

import logging
import os
import re
from bisect import bisect_right
from collections.abc import Callable, Sequence
from typing import NamedTuple

from strom._util import filesystem
from strom.protocol.records.batch import BatchHeader, RecordValidationError
from strom.storage.open_files import OpenFiles
from strom.storage.segment import LogSegment
from strom.storage.swap import recover_swaps

log = logging.getLogger(__name__)

_SEGMENT_FILE = re.compile(r"^(\d{20})\.log$")
_INDEX_FILE = re.compile(r"^(\d{20})\.(index|timeindex|txnindex)$")
_LEFTOVER_SUFFIXES = (".tmp", ".deleted", ".cleaned")


class LoadResult(NamedTuple):
    segments: list[LogSegment]
    recovered_segments: int
    truncated_bytes: int


class SegmentSettings(NamedTuple):
    index_interval_bytes: int
    max_index_bytes: int
    open_files: OpenFiles  # the broker's bound on open segment files (open_files.py)


def _remove_leftovers(directory: str, names: list[str]) -> None:
    bases = {m.group(1) for m in map(_SEGMENT_FILE.match, names) if m}
    for name in names:
        index_match = _INDEX_FILE.match(name)
        orphan_index = index_match is not None and index_match.group(1) not in bases
        if name.endswith(_LEFTOVER_SUFFIXES) or orphan_index:
            log.info("removing leftover file %s", os.path.join(directory, name))
            filesystem.unlink(os.path.join(directory, name))


def segment_base_offsets(directory: str) -> list[int]:
    names = os.listdir(directory)
    return sorted(int(m.group(1)) for m in map(_SEGMENT_FILE.match, names) if m)


def _first_to_recover(bases: list[int], recovery_point: int, clean_shutdown: bool) -> int:
    """Index of the first segment that needs recovery (len(bases) when none does)."""
    if clean_shutdown:
        return len(bases)
    first = 0
    for i, base in enumerate(bases):
        if base <= recovery_point:
            first = i
    return first


def load_segments(
    directory: str,
    settings: SegmentSettings,
    *,
    now_ms: int,
    recovery_point: int,
    clean_shutdown: bool,
    log_start_offset: int,
) -> LoadResult:
    """Open, recover and return the segments of one partition directory (see module docstring)."""
    os.makedirs(directory, exist_ok=True)
    _remove_leftovers(directory, os.listdir(directory))
    if recover_swaps(directory):
        _remove_leftovers(directory, os.listdir(directory))  # index files of the replaced segments
    bases = segment_base_offsets(directory)
    first_recover = _first_to_recover(bases, recovery_point, clean_shutdown)
    segments: list[LogSegment] = []
    recovered = truncated_total = 0
    for i, base in enumerate(bases):
        segment = LogSegment(directory, base, now_ms=now_ms, **settings._asdict())
        segments.append(segment)
        # The segment holding the recovery point needs no recovery if it ends at or below it.
        flushed_below = recovery_point if i == first_recover else None
        truncated, did_recover = _load_one(
            segment, must_recover=i >= first_recover, flushed_below=flushed_below
        )
        recovered += did_recover
        truncated_total += truncated
        if truncated and i < len(bases) - 1:
            log.warning("%s: corrupt segment %d truncated; deleting the segments after it", directory, base)
            _delete_from(directory, bases[i + 1 :], settings, now_ms)
            break
    if not segments:
        segments.append(LogSegment(directory, log_start_offset, now_ms=now_ms, **settings._asdict()))
    return LoadResult(segments, recovered, truncated_total)


def _load_one(segment: LogSegment, *, must_recover: bool, flushed_below: int | None) -> tuple[int, bool]:
    """Recover or restore one segment; returns (bytes truncated, whether it was recovered).

    ``flushed_below``: the recovery point, for the segment holding it; if its whole batches end at or
    below it with nothing after them, every byte was fsynced and it is restored, not recovered.
    """
    if (not must_recover or flushed_below is not None) and not segment.needs_rebuild:
        try:
            end = segment.restore_state()
            if not must_recover or (end == segment.size and segment.next_offset <= (flushed_below or 0)):
                segment.mark_synced()
                return 0, False
        except RecordValidationError:
            log.warning("%s: malformed batch header; recovering the segment", segment.log_path)
    truncated = segment.recover()
    if truncated:
        log.warning("%s: truncated %d invalid bytes at the tail", segment.log_path, truncated)
    return truncated, True


def _delete_from(directory: str, bases: list[int], settings: SegmentSettings, now_ms: int) -> None:
    for base in bases:
        LogSegment(directory, base, now_ms=now_ms, **settings._asdict()).delete()


def replay_headers(
    segments: Sequence[LogSegment],
    start_offset: int,
    visit: Callable[[LogSegment, int, BatchHeader], None],
) -> int:
    """Pass ``visit`` (segment, position, header) of every batch whose last offset is >= ``start_offset``.

    Reads header bytes only, from the index position for ``start_offset`` in the segment holding
    it; a malformed header ends the replay of its segment. Returns the number of headers read.
    """
    bases = [s.base_offset for s in segments]
    first = max(0, bisect_right(bases, start_offset) - 1)
    read = 0
    for segment in segments[first:]:
        position = segment.offset_index.lookup(start_offset) if segment is segments[first] else 0
        try:
            for pos, header in segment.scan(position):
                read += 1
                if header.last_offset >= start_offset:
                    visit(segment, pos, header)
        except RecordValidationError as e:
            log.warning("%s: stopped replaying headers: %s", segment.log_path, e)
    return read
