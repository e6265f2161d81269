"""Tiered storage's pure decisions, each a function of summaries (no I/O):

* **Copy** (Kafka's ``RLMCopyTask``): the segments to upload, oldest first, are the rolled ones (never
  the active segment) lying wholly below the last stable offset, so no copied byte can still be
  truncated away or be part of an open transaction, and ending after the highest offset already
  remote, so each offset is copied once.
* **Local retention** is the local log's own (`strom.storage.retention`: ``local.retention.*``, and only
  segments already remote), so nothing leaves the broker's disk before it is safely in object storage.
* **Orphans**: a segment left in COPY_SEGMENT_STARTED (its copier crashed or was deposed) is deleted
  only once every offset in it is held by COPY_SEGMENT_FINISHED segments or lies below the remote log's
  start. A leader's view of ``__remote_log_metadata`` can be a stale prefix (a metadata replica that
  lags), in which a segment whose FINISHED record is not seen yet looks like an orphan; the replicas may
  already have deleted its range locally, so deleting it on sight could lose the only copy. Its range
  re-copied (by this leader, from its local log) makes it safe to delete.
* **Total retention** (Kafka's ``RLMExpirationTask``): remote segments older than ``retention.ms``
  (by their largest timestamp), then the oldest while the whole log (remote segments plus the local
  segments not yet remote) is over ``retention.bytes``, then those wholly below the log start offset
  (DeleteRecords).
"""

from __future__ import annotations

from collections.abc import Sequence

from strom.storage.retention import RetentionPolicy, SegmentSummary
from strom.tiered.segment_metadata import RemoteLogSegmentMetadata


def segments_to_copy(
    local: Sequence[SegmentSummary], last_stable_offset: int, highest_copied_offset: int
) -> list[SegmentSummary]:
    """The local segments to upload now, oldest first (``local`` in offset order, the active last)."""
    rolled = local[:-1]
    return [
        s
        for s in rolled
        if s.next_offset > s.base_offset
        and s.next_offset - 1 > highest_copied_offset
        and s.next_offset <= last_stable_offset
    ]


def remote_segments_to_delete(
    remote: Sequence[RemoteLogSegmentMetadata],
    policy: RetentionPolicy,
    now_ms: int,
    log_start_offset: int,
    local_only_bytes: int,
) -> list[RemoteLogSegmentMetadata]:
    """Remote segments (``remote`` by start offset) total retention deletes now, oldest first."""
    doomed = 0
    if policy.delete_enabled and policy.retention_ms >= 0:
        while doomed < len(remote) and now_ms - remote[doomed].max_timestamp_ms > policy.retention_ms:
            doomed += 1
    if policy.delete_enabled and policy.retention_bytes >= 0:
        excess = (
            local_only_bytes + sum(m.segment_size_in_bytes for m in remote[doomed:]) - policy.retention_bytes
        )
        while doomed < len(remote) and excess - remote[doomed].segment_size_in_bytes >= 0:
            excess -= remote[doomed].segment_size_in_bytes
            doomed += 1
    while doomed < len(remote) and remote[doomed].end_offset < log_start_offset:
        doomed += 1
    return list(remote[:doomed])


def orphans_to_delete(
    started: Sequence[RemoteLogSegmentMetadata], copied: Sequence[RemoteLogSegmentMetadata]
) -> list[RemoteLogSegmentMetadata]:
    """The COPY_SEGMENT_STARTED segments (``started``) whose every offset another copy holds, or that lie
    below the first copied segment (``copied`` by start offset)."""
    if not copied:
        return []
    doomed = []
    for orphan in started:
        held_to = max(orphan.start_offset, copied[0].start_offset)  # the first offset not known held
        for segment in copied:
            if segment.start_offset > held_to or held_to > orphan.end_offset:
                break
            held_to = max(held_to, segment.end_offset + 1)
        if held_to > orphan.end_offset:
            doomed.append(orphan)
    return doomed
