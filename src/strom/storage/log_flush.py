"""Flushing a log: its unsynced segments fsynced, and the names of its new files made durable.

`flush_segments` fsyncs the segment holding the recovery point and every later one. A file created
since the previous flush has a name that only an fsync of its directory makes durable (POSIX): a
segment made by a roll (its base offset at or past the recovery point) or a transaction index a
segment made at its first abort. Without that fsync a machine crash could lose a whole file the
recovery point then claims is synced, so the flush fsyncs the partition directory when there is such
a file (Kafka's ``LocalLog.flush`` does it for new segments): one directory fsync per roll, or per
first abort in a segment, never per append.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Sequence

from strom._util import filesystem
from strom.storage.segment import LogSegment

__all__ = ["flush_segments"]


def flush_segments(directory: str, segments: Sequence[LogSegment], recovery_point: int) -> None:
    """Fsync ``segments`` from the one holding ``recovery_point`` on, and ``directory`` if one of them
    has a file created since the last flush (module docstring). Raises OSError as the disk does."""
    first = max(0, bisect_right([s.base_offset for s in segments], recovery_point) - 1)
    created = False
    for segment in segments[first:]:
        created |= segment.flush()
    if created or segments[-1].base_offset >= recovery_point:
        filesystem.fsync_dir(directory)
