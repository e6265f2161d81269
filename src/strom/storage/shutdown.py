"""`close_logs`: a clean shutdown's closing of every log, in two passes around file-system syncs.

What the next start needs from a clean shutdown (the loader's fast path): every byte up to each
log end offset durable (nothing is recovered), the producer state loadable without a long replay of
batch headers, the leader epochs on disk, then the checkpoints and the clean-shutdown marker
(LogManager.shutdown writes those after `close_logs`). Closing each log on its own (fsync of the
segment, both indexes, a snapshot and its directory, the epoch checkpoint and its directory) cost
five to seven fsyncs per partition, even for a partition untouched since the last start: 173 s for
100,000 partitions on this project's test machine. Here:

1. every log writes its buffered index entries; no fsync;
2. one ``syncfs`` per file system (`sync_file_systems`): everything written so far, by every log and
   earlier appends alike, is durable;
3. every log whose dir synced moves its recovery point to its log end offset, writes a producer snapshot
   there if the next start would otherwise replay more than it reads anyway (`_wants_snapshot`), and its
   leader-epoch checkpoint if that differs from the file; both without fsync; its files are released;
4. a second ``syncfs`` makes those files durable.

Creating a file costs more than writing one (about 0.75 ms each on that machine's ext4, so 100,000
snapshots alone would take over a minute), hence the rules that create none needlessly: a log
untouched since the start writes nothing at all; a log with no producer state and no more to replay
than the active segment's tail (which the start-up scan in ``LogSegment.restore_state`` reads anyway)
gets no snapshot; and unlike a roll, the active segment gets no closing time-index entry (Kafka's
``onBecomeInactiveSegment``): it stays the active segment, and the start-up tail scan finds its
maximum timestamp from the last index entry on.

A crash in between leaves no marker, so the next start recovers from the old recovery-point
checkpoint as after any crash; a snapshot or epoch file written in step 3 may then be missing or
torn: a torn snapshot fails its CRC and is deleted, a missing or unreadable epoch checkpoint is
rebuilt from batch headers.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from strom._util import filesystem
from strom.storage.checkpoint import TopicPartition
from strom.storage.log import PartitionLog

log = logging.getLogger(__name__)


def close_logs(
    logs: Mapping[TopicPartition, PartitionLog], log_dir_of: Mapping[TopicPartition, str]
) -> set[str]:
    """Close every log as above; returns the log dirs where something failed (they get no marker)."""
    failed: set[str] = set()
    for tp, partition_log in logs.items():
        try:
            for segment in partition_log.segments:
                segment.flush_indexes()
        except OSError as e:
            log.error("writing %s failed; its log dir will be recovered on start: %s", tp, e)
            failed.add(log_dir_of[tp])
    failed |= _sync({d for d in log_dir_of.values() if d not in failed})
    for tp, partition_log in logs.items():
        log_dir = log_dir_of[tp]
        try:
            if log_dir not in failed:
                _save_state(partition_log)
        except OSError as e:  # a snapshot only saves work at the next start; the epochs are rebuilt
            log.error("writing the state of %s failed; its log dir will be recovered on start: %s", tp, e)
            failed.add(log_dir)
        finally:
            partition_log.release_files()
    return failed | _sync({d for d in log_dir_of.values() if d not in failed})


def _save_state(partition_log: PartitionLog) -> None:
    for segment in partition_log.segments:
        segment.mark_synced()
    leo = partition_log.log_end_offset
    partition_log.recovery_point = leo
    if _wants_snapshot(partition_log):
        partition_log.producer_state.take_snapshot(leo, durable=False)
    partition_log.leader_epoch_cache.write_if_changed(durable=False)


def _wants_snapshot(partition_log: PartitionLog) -> bool:
    """Whether a snapshot at the log end saves the next start work (see the module docstring)."""
    state = partition_log.producer_state
    if state.producers:
        return True
    active = partition_log.active_segment
    replay_from = max(state.last_snapshot_offset, partition_log.log_start_offset)
    return replay_from < active.base_offset or active.offset_index.last_entry() is not None


def _sync(log_dirs: set[str]) -> set[str]:
    """Sync the file systems of ``log_dirs``; returns them all if that failed.

    A write-back error is reported to one ``syncfs`` caller only (a descriptor opened after it sees
    none), so a failure cannot be narrowed down by retrying dir by dir: none of them is trusted.
    """
    try:
        filesystem.sync_file_systems(sorted(log_dirs))
    except OSError as e:
        log.error("syncing %s failed; recovered on start: %s", ", ".join(sorted(log_dirs)), e)
        return log_dirs
    return set()
