"""A follower restarting its log at its leader's local log start (KIP-405's "remote log auxiliary state").

Theory of operation. When a tiered partition's leader has deleted locally the offsets a follower asks
for (they are only in remote storage), it answers the follower's fetch OFFSET_MOVED_TO_TIERED_STORAGE
instead of copying the history back. The follower then asks the leader for its local log start and that
offset's leader epoch (ListOffsets, EARLIEST_LOCAL_TIMESTAMP -4), reads the remote segment ending just
before it (the one holding ``local start - 1``): its leader-epoch checkpoint and, when one was uploaded,
its producer snapshot, and restarts its own log empty at the leader's local start with that state
(`start_log_at`). It then fetches from there like any follower; history below stays remote, which is how
a replaced broker joins without copying it.

The epochs matter for a later truncation (OffsetForLeaderEpoch) and for answering ListOffsets as a
future leader; the producer state lets a future leader deduplicate a producer whose last batches are
below the local start. The log keeps no epoch below its start (as after local retention): the entry in
force at the start is moved to it. Pure decisions and the log's own files; no network, no object store.
"""

from __future__ import annotations

from collections.abc import Sequence

from strom.storage import producer_snapshot
from strom.storage.checkpoint import EpochEntry
from strom.storage.log import PartitionLog
from strom.storage.producer_snapshot import SnapshotEntry


def epochs_at_local_start(
    remote_epochs: Sequence[EpochEntry], local_start: int, local_start_epoch: int
) -> list[EpochEntry]:
    """The epoch history a follower starting at ``local_start`` keeps: the remote segment's epochs below
    it, then the leader's epoch at the local start (when newer), cut so the history starts there."""
    kept = [e for e in remote_epochs if e.start_offset < local_start]
    if local_start_epoch >= 0 and (not kept or local_start_epoch > kept[-1].epoch):
        kept.append(EpochEntry(local_start_epoch, local_start))
    covering = [e for e in kept if e.start_offset <= local_start]
    return [EpochEntry(covering[-1].epoch, local_start)] if covering else []


def start_log_at(
    log: PartitionLog,
    offset: int,
    epochs: Sequence[EpochEntry],
    producers: list[SnapshotEntry] | None,
    now_ms: int,
) -> None:
    """Restart ``log`` empty at ``offset`` with the leader-epoch history ``epochs`` (already cut to the
    offset) and, if known, the producer state there."""
    log.truncate_fully_and_start_at(offset)
    log.recovery_point = offset  # nothing below exists any more: a snapshot at the start is trusted
    state = log.producer_state
    if producers is not None:
        producer_snapshot.write(log.dir, offset, producers)
        state.reload(offset, offset, offset, now_ms)
    log.leader_epoch_cache.replace(epochs)


__all__ = ["epochs_at_local_start", "start_log_at"]
