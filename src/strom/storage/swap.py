"""The files of a segment replacement (the log cleaner's swap protocol) and their crash recovery.

A cleaned segment replaces a group of consecutive segments ``S_b .. S_k`` and takes the name of the
first one (base offset ``b``). Its files pass through three suffixes (Kafka's names)::

    <b>.log.cleaned  <b>.index.cleaned  <b>.timeindex.cleaned    being written; worthless after a crash
    <b>.log.swap     <b>.index.swap     <b>.timeindex.swap       complete and fsynced: the swap is committed
    <X>.log.deleted  <X>.index.deleted  <X>.timeindex.deleted    a replaced segment on its way out

(and ``.txnindex`` likewise, for segments holding ABORT markers).

Protocol (`swap_in`, run by the cleaner): (1) write and fsync the ``.cleaned`` files;
(2) rename them to ``.swap``, indexes first and the ``.log`` last: the ``.log.swap`` rename is the
commit point; (3) rename every replaced segment's files to ``.deleted``; (4) rename the ``.swap`` files
to their live names; (5) splice the segment list in memory and unlink the ``.deleted`` files.
The directory is fsynced after steps 2, 3 and 4.

Recovery (`recover_swaps`, called by the loader after ``*.cleaned`` and ``*.deleted`` files were
removed): a ``<b>.log.swap`` holds everything the replaced group held that compaction keeps, so each
one is completed: every live segment whose base offset lies in ``[b, next offset of the swap)`` (the
members of its group that were not yet renamed in step 3) is deleted, the swap is renamed to
``<b>.log``, and its offset and time index files are dropped so the loader rebuilds (and
re-validates) them; its ``.txnindex.swap`` becomes the live ``.txnindex`` (nothing else rebuilds it
below the producer-state snapshot). Index
``.swap`` files without a ``.log.swap`` (a crash inside step 2) are removed: the swap never
committed and the old segments are all still in place. Either way nothing acknowledged is lost: before
the commit point the old segments are untouched; after it, the swap replaces them.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re

from strom._util import filesystem
from strom._util.filesystem import fsync_dir
from strom.protocol.records.batch import HEADER_SIZE, RecordValidationError, read_header
from strom.storage.segment import LogSegment

log = logging.getLogger(__name__)

CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"
DELETED_SUFFIX = ".deleted"

_LOG_SWAP = re.compile(r"^(\d{20})\.log\.swap$")
_INDEX_SWAP = re.compile(r"^(\d{20})\.(index|timeindex|txnindex)\.swap$")
_LIVE_FILE = re.compile(r"^(\d{20})\.(log|index|timeindex|txnindex)$")


def swap_next_offset(path: str, base_offset: int) -> int:
    """One past the last offset of the whole batches in the file (``base_offset`` when it has none)."""
    next_offset = base_offset
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        position = 0
        while position + HEADER_SIZE <= size:
            f.seek(position)
            try:
                header = read_header(f.read(HEADER_SIZE))
            except RecordValidationError:
                break
            if position + header.size > size:
                break
            next_offset = header.next_offset
            position += header.size
    return next_offset


def recover_swaps(directory: str) -> list[int]:
    """Complete the committed swaps in a partition directory; returns their base offsets."""
    names = os.listdir(directory)
    swaps = sorted(int(m.group(1)) for m in map(_LOG_SWAP.match, names) if m)
    for base in swaps:
        _complete_swap(directory, base, names)
    for name in names:
        match = _INDEX_SWAP.match(name)
        if match and int(match.group(1)) not in swaps:
            log.info("removing index of an uncommitted swap %s", os.path.join(directory, name))
            filesystem.unlink(os.path.join(directory, name))
    if swaps:
        fsync_dir(directory)
    return swaps


def _complete_swap(directory: str, base: int, names: list[str]) -> None:
    swap_path = os.path.join(directory, f"{base:020d}.log.swap")
    end = max(swap_next_offset(swap_path, base), base + 1)
    for name in names:
        match = _LIVE_FILE.match(name)
        if match and base <= int(match.group(1)) < end:
            with contextlib.suppress(FileNotFoundError):
                filesystem.unlink(os.path.join(directory, name))
    for kind in ("index", "timeindex"):
        with contextlib.suppress(FileNotFoundError):
            filesystem.unlink(os.path.join(directory, f"{base:020d}.{kind}.swap"))
    # The loader rebuilds the offset and time indexes but not the aborted-transaction index.
    with contextlib.suppress(FileNotFoundError):
        filesystem.replace(
            os.path.join(directory, f"{base:020d}.txnindex.swap"),
            os.path.join(directory, f"{base:020d}.txnindex"),
        )
    filesystem.replace(swap_path, os.path.join(directory, f"{base:020d}.log"))
    log.warning("%s: completed the swap of cleaned segment %d interrupted by a crash", directory, base)


def swap_in(segments: list[LogSegment], old: list[LogSegment], cleaned: LogSegment, directory: str) -> bool:
    """Steps 2-5 above: replace the run ``old`` of ``segments`` (in place) by the fsynced ``cleaned``.

    Returns False, touching nothing, when ``old`` is no longer a run of inactive segments in
    ``segments`` (retention, truncation or deletion got there first).
    """
    try:
        i = next(n for n, s in enumerate(segments) if s is old[0])
    except StopIteration:
        return False
    if segments[i : i + len(old)] != old or i + len(old) >= len(segments):
        return False
    cleaned.change_file_suffixes(SWAP_SUFFIX)  # the commit point: recovery completes it from here
    fsync_dir(directory)
    for segment in old:
        segment.change_file_suffixes(DELETED_SUFFIX)
    fsync_dir(directory)
    cleaned.change_file_suffixes("")
    fsync_dir(directory)
    segments[i : i + len(old)] = [cleaned]
    for segment in old:
        segment.delete()
    return True
