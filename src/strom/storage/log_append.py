"""What a partition's append decides before its write and records after it (`PartitionLog` does the write).

An append is three steps; only the middle one touches files (``PartitionLog._write``: roll if due,
one ``pwrite``, flush policy, all-or-nothing rollback):

1. Prepare. A leader's payload (`prepare_leader_append`): the header-only checks and optional
   recompression of log_validator.py, then the idempotent/transactional producer checks against a
   scratch `ProducerAppendPlan`, made only if a batch has a producer id (a retried batch is answered
   with the offsets it got the first time and nothing is written), then base offsets, leader epoch and
   LogAppendTime stamped into the payload. The common case, one batch stored as sent, takes a short
   path through the same checks (records/batch.py `single_client_batch`).
   The network layer hands over writable request frames that nobody reads after the append, so they
   are patched in place; any other buffer is copied once. A follower's payload keeps the leader's
   offsets and epochs and needs only log_validator's `validate_replicated`.
2. Write (log.py).
3. Record, only once the write succeeded: a leader commits the plan to the producer state and indexes
   any aborted transaction it ended (`commit_leader_append`); a follower replays the batch headers
   into the producer state (`replay_replicated`). Both move the leader-epoch cache when a new epoch
   starts, the only time it is written (an fsynced file).

Pure over the payload and the log's in-memory state: no clock of its own and no record decoding
(only a control batch's single marker record is read, as producer_replay.py explains).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from strom.protocol.records.batch import BatchHeader, header_of, single_client_batch, stamp_batch
from strom.storage.checkpoint import LeaderEpochFileCache
from strom.storage.config import LogConfig
from strom.storage.log_validator import assign_offsets, recompress, validate_for_leader
from strom.storage.producer_replay import load_batch
from strom.storage.producer_state import BatchMetadata, ProducerAppendPlan, ProducerStateManager
from strom.storage.segment import BatchSpan, LogSegment

Buffer = bytes | bytearray | memoryview


class AppendInfo(NamedTuple):
    base_offset: int
    last_offset: int
    log_append_time_ms: int  # -1 unless the topic uses LogAppendTime
    log_start_offset: int
    duplicate: bool  # a retried idempotent batch: nothing was written, offsets are the original ones


class LeaderAppend(NamedTuple):
    """A leader's payload ready to write at ``base_offset``, or the retained batch it repeats."""

    data: Buffer  # the batches with offsets assigned (unused for a duplicate)
    spans: list[BatchSpan]
    last_offset: int
    duplicate: BatchMetadata | None
    plan: ProducerAppendPlan | None  # None when no batch has a producer id: nothing to commit


def prepare_leader_append(
    records: Buffer,
    config: LogConfig,
    now_ms: int,
    partition: str,
    producers: ProducerStateManager,
    base_offset: int,
    leader_epoch: int,
    from_coordinator: bool,
) -> LeaderAppend:
    """Step 1 for a leader (see the module docstring); the producer plan is checked but not committed.

    The common case (one batch in a request's writable frame, a topic that stores batches as sent) is
    one header unpack and the CRC (`single_client_batch`); everything else takes the general path,
    which makes the same checks in the same order.

    Raises:
        KafkaError: CORRUPT_MESSAGE, MESSAGE_TOO_LARGE, RECORD_LIST_TOO_LARGE, INVALID_RECORD,
            INVALID_TIMESTAMP, INVALID_PRODUCER_EPOCH, OUT_OF_ORDER_SEQUENCE_NUMBER, ...
    """
    if config.stores_as_sent and type(records) is memoryview and not records.readonly:
        fields = single_client_batch(records, config.max_message_bytes)
        if fields is not None and len(records) <= config.segment_bytes:
            plan = None
            if fields[9] >= 0:  # a producer id: the idempotent/transactional checks
                plan = producers.plan()
                if not plan.check(header_of(fields), base_offset, from_coordinator):
                    return LeaderAppend(records, [], base_offset, plan.duplicate, plan)
            last_offset = base_offset + fields[6]
            stamp_batch(records, 0, fields[1], base_offset, leader_epoch)
            return LeaderAppend(
                records, [BatchSpan(0, last_offset, fields[8], len(records))], last_offset, None, plan
            )
    batches = validate_for_leader(records, config, now_ms, partition)
    if config.compression_type != "producer":  # only such topics pay for recompression
        records, batches = recompress(records, batches, config)
    offset = base_offset
    plan = None
    for _, header in batches:
        if header.producer_id >= 0:
            if plan is None:
                plan = producers.plan()
            if not plan.check(header, offset, from_coordinator):
                return LeaderAppend(records, [], offset, plan.duplicate, plan)
        offset += header.last_offset_delta + 1
    buf = records if isinstance(records, memoryview) and not records.readonly else bytearray(records)
    append_time_ms = now_ms if config.log_append_time else None
    spans = assign_offsets(buf, batches, base_offset, leader_epoch, append_time_ms)
    return LeaderAppend(buf, spans, offset - 1, None, plan)


def commit_leader_append(
    epochs: LeaderEpochFileCache,
    active_segment: LogSegment,
    plan: ProducerAppendPlan | None,
    leader_epoch: int,
    base_offset: int,
) -> None:
    """Step 3 for a leader: a new epoch starts at ``base_offset``; the plan becomes the producer state."""
    if leader_epoch > epochs.latest_epoch:
        epochs.assign(leader_epoch, base_offset)
        epochs.write()
    if plan is not None:
        for entry in plan.commit():
            active_segment.txn_index.append(entry)


def replay_replicated(
    segments: Sequence[LogSegment],
    state: ProducerStateManager,
    epochs: LeaderEpochFileCache,
    spans: Sequence[BatchSpan],
    headers: Sequence[BatchHeader],
    data: memoryview,
) -> None:
    """Step 3 for a follower: replay the written batches (``data`` as written) into the producer state."""
    epochs_changed = False
    for span, header in zip(spans, headers, strict=True):
        load_batch(segments, state, header, data[span.position : span.position + span.size])
        epochs_changed |= epochs.assign(header.partition_leader_epoch, header.base_offset)
    if epochs_changed:  # an fsynced file write: only when a new epoch starts, never per append
        epochs.write()
