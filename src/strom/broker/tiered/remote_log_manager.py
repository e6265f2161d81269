"""`RemoteLogManager`: copies the leaders' rolled segments to remote storage, expires remote segments,
and removes a deleted topic's remote data (Kafka's ``RemoteLogManager`` with its copy and expiration
tasks).

Theory of operation. Every ``remote.log.manager.task.interval.ms`` on the broker's clock, for each
partition this broker hosts whose topic has ``remote.storage.enable``:

1. **State.** The first time (and after each leadership change) the partition's remote segments are
   loaded from ``__remote_log_metadata`` (metadata_topic.py); a new leader thus carries on where the
   last one stopped. The log learns the highest offset in remote storage, which is all its local
   retention needs (a follower's local segments are deleted on the same rule as the leader's).
2. **Clean-up** (leader): deletions that did not finish, and segments left in COPY_SEGMENT_STARTED by
   a copy that did not finish (a crashed or deposed leader) once their offsets are held by finished
   segments (plan.py's `orphans_to_delete`: a stale view can take a finished segment for an orphan), are
   deleted: DELETE_SEGMENT_STARTED, the objects, DELETE_SEGMENT_FINISHED.
3. **Copy** (leader, unless ``remote.log.copy.disable``): the segments plan.py chooses, oldest first:
   COPY_SEGMENT_STARTED, the objects (remote_storage.py), COPY_SEGMENT_FINISHED. The log's highest
   remote offset moves only after the FINISHED record is committed; a failure (object store down, a
   metadata write refused) stops this partition's round and the next round starts afresh, after
   cleaning up. The copy rate is bounded by ``remote.log.manager.copy.max.bytes.per.second``.
4. **Expiration** (leader): remote segments past ``retention.ms`` / ``retention.bytes`` are deleted the
   same three steps (DELETE_SEGMENT_STARTED first, so readers stop using a segment before its objects go).

5. **Tiering turned off** (``remote.storage.enable=false``, which KIP-950 allows only with
   ``remote.log.delete.on.disable=true``): the leader deletes every remote segment, the same three
   steps, once per leader epoch (`_delete_on_disable`); the log then starts at its local start.

Followers behind the leader's local log start (answered OFFSET_MOVED_TO_TIERED_STORAGE) ask here for
the leader-epoch history and producer state at that start (`remote_aux_state`: the remote segment
ending there, its leader-epoch checkpoint and producer snapshot; strom.tiered.follower_state).

Reads: a consumer's fetch below the local log start comes here (`read_remote`, awaited by the fetch
handler within ``remote.fetch.max.wait.ms``): the remote segment holding the offset is read through
strom.tiered.remote_read's reader and its bounded cache (for read_committed, with the aborted
transactions of the remote transaction indexes, then the local ones); ListOffsets' earliest answers the
remote log start, or DeleteRecords' offset when it lies in remote storage (`log_start`).

After each await the partition must still be led by this broker at the same leader epoch, else the
round ends for it: a deposed leader records nothing more. A topic that disappears from the metadata
cache (deleted) has its remote objects deleted by the brokers that managed it (idempotent).
Nothing here runs on the produce or fetch path, and a broker with ``remote.log.storage.system.enable``
off builds none of it.

Call only from the broker's event loop.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass

from strom._util.clock import Clock, sleep_ms
from strom.broker.metadata_cache import ClusterMetadataStore
from strom.broker.replication.partition import Partition
from strom.broker.tiered.metadata_topic import RemoteLogMetadataManager
from strom.objectstore.store import ObjectNotFoundError, ObjectStoreError
from strom.protocol.buffer_records import BufferRecords
from strom.protocol.errors import ErrorCode, KafkaError
from strom.protocol.uuid_text import uuid_text
from strom.storage import producer_snapshot
from strom.storage.checkpoint import CorruptCheckpointError, EpochEntry, parse_leader_epochs
from strom.storage.config import LogConfig
from strom.storage.producer_snapshot import CorruptSnapshotError, SnapshotEntry
from strom.storage.retention import RetentionPolicy
from strom.storage.transaction_index import AbortedTxn
from strom.tiered.cache import BoundedCache
from strom.tiered.follower_state import epochs_at_local_start
from strom.tiered.metadata_cache import RemotePartitionMetadata
from strom.tiered.plan import orphans_to_delete, remote_segments_to_delete, segments_to_copy
from strom.tiered.remote_read import RemoteSegmentReader
from strom.tiered.remote_storage import IndexType, RemoteStorageManager
from strom.tiered.segment_data import copy_started_metadata, log_segment_data
from strom.tiered.segment_metadata import RemoteLogSegmentMetadata, RemoteLogSegmentState
from strom.tiered.segment_snapshot import StartState, producer_state_before

log = logging.getLogger(__name__)

_S = RemoteLogSegmentState
TopicPartition = tuple[str, int]


@dataclass
class _Managed:
    topic_id: str
    leader_epoch: int
    was_leader: bool
    state: RemotePartitionMetadata
    stale: bool = False  # a round failed: reload before the next one (reads keep using it meanwhile)
    uploaded_snapshot: StartState | None = None  # the producer state at the end of the last copy


class _Deposed(Exception):
    """The partition's leadership moved during an await: stop working on it."""


@dataclass
class RemoteLogStats:
    """One topic's totals since start, exported under Kafka's BrokerTopicMetrics names (/metrics)."""

    copy_requests: int = 0  # segments copied
    copy_bytes: int = 0
    copy_errors: int = 0
    fetch_requests: int = 0
    fetch_bytes: int = 0
    fetch_errors: int = 0
    delete_requests: int = 0  # remote segments deleted
    delete_errors: int = 0


class RemoteLogManager:
    def __init__(
        self,
        node_id: int,
        partitions: Callable[[], list[Partition]],
        log_config_for: Callable[[str], LogConfig],
        metadata: ClusterMetadataStore,
        rlmm: RemoteLogMetadataManager,
        rsm: RemoteStorageManager,
        clock: Clock,
        task_interval_ms: int,
        copy_max_bytes_per_second: int,
        cache_max_bytes: int,
        remote_fetch_max_wait_ms: int,
    ) -> None:
        self.node_id = node_id
        self._partitions = partitions
        self._log_config_for = log_config_for
        self._metadata = metadata
        self.rlmm = rlmm
        self.rsm = rsm
        self._clock = clock
        self.task_interval_ms = task_interval_ms
        self._copy_rate = copy_max_bytes_per_second
        self._managed: dict[TopicPartition, _Managed] = {}
        # (partition, leader epoch) whose remote data this leader deleted after tiering was turned off
        self._disabled: set[tuple[TopicPartition, int]] = set()
        self.stats: dict[str, RemoteLogStats] = {}
        self.reader = RemoteSegmentReader(rsm, BoundedCache(cache_max_bytes))
        self.remote_fetch_max_wait_ms = remote_fetch_max_wait_ms

    async def run(self) -> None:
        """The periodic task (cancelled at shutdown)."""
        while True:
            await sleep_ms(self._clock, max(self.task_interval_ms, 10))
            try:
                await self.run_once()
            except Exception:
                log.exception("remote log manager round failed")

    async def run_once(self) -> None:
        seen: set[TopicPartition] = set()
        for part in self._partitions():
            config = self._log_config_for(part.topic)
            if not config.remote_storage_enable:
                part.log.highest_offset_in_remote_storage = None  # local retention as without tiering
                if config.remote_log_delete_on_disable:
                    await self._delete_on_disable(part)
                continue
            seen.add(part.tp)
            try:
                await self._manage(part, config)
            except _Deposed:
                pass
            except (ObjectStoreError, KafkaError, ConnectionError, OSError) as exc:
                self.topic_stats(part.topic).copy_errors += 1
                if (managed := self._managed.get(part.tp)) is not None:
                    managed.stale = True
                log.warning("%s-%d: remote log round stopped: %s", part.topic, part.index, exc)
        await self._delete_gone_topics(seen)

    def topic_stats(self, topic: str) -> RemoteLogStats:
        stats = self.stats.get(topic)
        if stats is None:
            stats = self.stats[topic] = RemoteLogStats()
        return stats

    def copy_lag(self, part: Partition) -> tuple[int, int]:
        """(segments, bytes) of the leader's local log that should be remote and are not yet (KIP-963)."""
        state = self.state_of(part.topic, part.index)
        plog = part.log
        highest = state.highest_copied_offset if state is not None else -1
        due = segments_to_copy(plog.segment_summaries(), plog.last_stable_offset, highest)
        return len(due), sum(s.size_bytes for s in due)

    def state_of(self, topic: str, partition: int) -> RemotePartitionMetadata | None:
        managed = self._managed.get((topic, partition))
        return managed.state if managed is not None else None

    # --- reads (fetches below the local log start, ListOffsets) ------------------------------------
    def log_start(self, part: Partition) -> tuple[int, int] | None:
        """(Kafka's log start offset, its leader epoch) when the partition's log starts in remote storage:
        the remote log's first offset, or DeleteRecords' offset above it; None when it starts locally."""
        if not self._log_config_for(part.topic).remote_storage_enable:
            return None  # turned off: the remote log is deleted, or about to be (KIP-950)
        state = self.state_of(part.topic, part.index)
        if state is None:
            return None
        start = state.log_start(part.log.deleted_records_before)
        return start if start is not None and start[0] < part.log_start_offset else None

    async def read_remote(
        self, part: Partition, fetch_offset: int, max_bytes: int, read_committed: bool = False
    ) -> tuple[BufferRecords, list[AbortedTxn] | None]:
        """A consumer's read below the local log start, from the remote segment holding the offset: the
        batches (views of the cached chunks), and for ``read_committed`` the aborted transactions
        overlapping them (else None).

        Raises:
            KafkaError: OFFSET_OUT_OF_RANGE when the remote log does not hold it either.
            ObjectStoreError: the store failed (retriable).
        """
        if not self._log_config_for(part.topic).remote_storage_enable:  # turned off: deleted (KIP-950)
            raise KafkaError(ErrorCode.OFFSET_OUT_OF_RANGE, f"{fetch_offset} is below the log start")
        state = self.state_of(part.topic, part.index) or self.rlmm.loaded.get(part.tp)
        if state is None:
            info = self._metadata.topics.get(part.topic)
            if info is None:
                raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, part.topic)
            state = await self.rlmm.load(part.topic, uuid_text(info.topic_id), part.index)
        start = state.log_start(part.log.deleted_records_before)
        segment = state.segment_for(fetch_offset)
        if start is None or segment is None or fetch_offset < start[0]:
            raise KafkaError(
                ErrorCode.OFFSET_OUT_OF_RANGE, f"{fetch_offset} is in neither the local nor the remote log"
            )
        stats = self.topic_stats(part.topic)
        stats.fetch_requests += 1
        try:
            following = state.segment_for(segment.end_offset + 1)  # read ahead into it
            read = await self.reader.read(segment, fetch_offset, max_bytes, following)
        except ObjectStoreError:
            stats.fetch_errors += 1
            raise
        stats.fetch_bytes += len(read.records)
        if not read_committed:
            return read.records, None
        aborted = await self._aborted_transactions(part, state, segment, fetch_offset, read.next_offset)
        return read.records, aborted

    async def _aborted_transactions(
        self,
        part: Partition,
        state: RemotePartitionMetadata,
        segment: RemoteLogSegmentMetadata,
        fetch_offset: int,
        upper: int | None,
    ) -> list[AbortedTxn]:
        """read_committed, for the batches read up to ``upper`` (the offset after them; None: none read):
        from the remote transaction indexes of the segment read and the later ones, then, if the
        remote log ends first, the local log's (an ABORT marker may be local)."""
        if upper is None:
            return []
        later = [m for m in state.copied_segments() if m.end_offset > segment.end_offset]
        found, complete = await self.reader.aborted_transactions([segment, *later], fetch_offset, upper)
        if not complete:
            found += part.log.collect_aborted_transactions(fetch_offset, upper)
        return list(dict.fromkeys(found))  # overlapping copies and the local log repeat entries

    # --- followers below the leader's local log start (KIP-405) -------------------------------------
    async def remote_aux_state(
        self, part: Partition, local_start: int, local_start_epoch: int
    ) -> tuple[list[EpochEntry], list[SnapshotEntry] | None]:
        """The leader-epoch history and producer state at the leader's local log start, from the remote
        segment holding ``local_start - 1`` (follower_state.py); without one (the remote log does not
        reach the local start), only the leader's epoch there and no producer state.

        Raises:
            ObjectStoreError, KafkaError, ConnectionError: retriable; the follower asks again.
        """
        info = self._metadata.topics.get(part.topic)
        if info is None:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, part.topic)
        # Read afresh: the leader may have recorded the segment after this broker last loaded.
        state = await self.rlmm.load(part.topic, uuid_text(info.topic_id), part.index, from_leader=True)
        segment = state.segment_for(local_start - 1)
        if segment is None or segment.start_offset > local_start - 1:
            log.info(
                "%s-%d: no remote segment ends at the local start %d", part.topic, part.index, local_start
            )
            return epochs_at_local_start([], local_start, local_start_epoch), None
        checkpoint = await self.rsm.fetch_index(segment, IndexType.LEADER_EPOCH)
        try:
            remote_epochs = parse_leader_epochs(checkpoint.decode(errors="replace"), segment.segment_id)
        except CorruptCheckpointError as exc:
            log.warning("%s-%d: %s; starting from the leader's epoch", part.topic, part.index, exc)
            remote_epochs = []
        try:
            snapshot: list[SnapshotEntry] | None = producer_snapshot.decode(
                await self.rsm.fetch_index(segment, IndexType.PRODUCER_SNAPSHOT)
            )
        except (ObjectNotFoundError, CorruptSnapshotError):
            snapshot = None  # copied without one (no state to start from): producer state from the fetches
        log.info(
            "%s-%d: state at the local start %d from remote segment %s (%d epoch(s), %s)",
            *part.tp,
            local_start,
            segment.segment_id,
            len(remote_epochs),
            "no producer snapshot" if snapshot is None else f"a producer snapshot of {len(snapshot)}",
        )
        return epochs_at_local_start(remote_epochs, local_start, local_start_epoch), snapshot

    async def _manage(self, part: Partition, config: LogConfig) -> None:
        info = self._metadata.topics.get(part.topic)
        if info is None:
            return
        topic_id = uuid_text(info.topic_id)
        managed = self._managed.get(part.tp)
        is_leader = part.is_leader
        if (
            managed is None
            or managed.stale
            or managed.topic_id != topic_id
            or managed.leader_epoch != part.leader_epoch
            or managed.was_leader != is_leader
            or not is_leader  # a follower re-reads what its leader recorded
        ):
            # A leader reads the metadata partition's leader: its own replica of it may lag, and a stale
            # view would have it copy again (harmless) and take finished segments for orphans.
            state = await self.rlmm.load(part.topic, topic_id, part.index, from_leader=is_leader)
            managed = self._managed[part.tp] = _Managed(topic_id, part.leader_epoch, is_leader, state)
        plog = part.log
        plog.highest_offset_in_remote_storage = managed.state.highest_copied_offset
        if not is_leader:
            return
        epoch = part.leader_epoch
        await self._clean_up(part, epoch, managed.state)
        if not config.remote_log_copy_disable:
            await self._copy(part, epoch, managed, topic_id)
        await self._expire(part, epoch, managed.state, config)

    def _check_leader(self, part: Partition, epoch: int) -> None:
        if not part.is_leader or part.leader_epoch != epoch:
            raise _Deposed

    async def _record(self, part: Partition, epoch: int, metadata: RemoteLogSegmentMetadata) -> None:
        self._check_leader(part, epoch)
        await self.rlmm.publish(metadata)

    async def _delete_segment(self, part: Partition, epoch: int, metadata: RemoteLogSegmentMetadata) -> None:
        now = self._clock.time_ms()
        if metadata.state is not _S.DELETE_SEGMENT_STARTED:
            metadata = metadata.moved_to(_S.DELETE_SEGMENT_STARTED, now)
            await self._record(part, epoch, metadata)
        stats = self.topic_stats(part.topic)
        try:
            await self.rsm.delete_log_segment_data(metadata)
        except ObjectStoreError:
            stats.delete_errors += 1
            raise
        await self._record(part, epoch, metadata.moved_to(_S.DELETE_SEGMENT_FINISHED, self._clock.time_ms()))
        stats.delete_requests += 1

    async def _clean_up(self, part: Partition, epoch: int, state: RemotePartitionMetadata) -> None:
        unfinished = [
            *state.segments_in(_S.DELETE_SEGMENT_STARTED),
            *orphans_to_delete(state.segments_in(_S.COPY_SEGMENT_STARTED), state.copied_segments()),
        ]
        for metadata in unfinished:
            log.info(
                "%s-%d: deleting unfinished remote segment %s (%s)",
                part.topic,
                part.index,
                metadata.segment_id,
                metadata.state.name,
            )
            await self._delete_segment(part, epoch, metadata)

    async def _copy(self, part: Partition, epoch: int, managed: _Managed, topic_id: str) -> None:
        plog = part.log
        state = managed.state
        chosen = segments_to_copy(
            plog.segment_summaries(), plog.last_stable_offset, state.highest_copied_offset
        )
        for summary in chosen:
            last, base = managed.uploaded_snapshot, summary.base_offset
            previous = await producer_state_before(
                self.rsm, plog, managed.state, last, base, summary.next_offset
            )
            segment = next((s for s in plog.segments if s.base_offset == summary.base_offset), None)
            if segment is None:
                return  # deleted meanwhile (DeleteRecords): the next round plans again
            started = copy_started_metadata(
                plog,
                segment,
                summary.next_offset,
                topic=part.topic,
                topic_id=topic_id,
                partition=part.index,
                broker_id=self.node_id,
                now_ms=self._clock.time_ms(),
            )
            try:
                # In a worker thread: a segment copied long after its roll has its producer snapshot
                # regenerated from its batch headers, a read of the whole (immutable) segment file.
                data = await asyncio.to_thread(log_segment_data, plog, segment, summary.next_offset, previous)
            except (OSError, ValueError):
                if segment in plog.segments:
                    raise
                return  # deleted while it was read (retention, DeleteRecords): the next round plans again
            await self._record(part, epoch, started)
            began_ms = self._clock.monotonic_ms()
            await self.rsm.copy_log_segment_data(started, data)
            await self._record(part, epoch, started.moved_to(_S.COPY_SEGMENT_FINISHED, self._clock.time_ms()))
            plog.highest_offset_in_remote_storage = state.highest_copied_offset
            managed.uploaded_snapshot = StartState.of(summary.next_offset, data.producer_snapshot)
            stats = self.topic_stats(part.topic)
            stats.copy_requests += 1
            stats.copy_bytes += started.segment_size_in_bytes
            await self._throttle(started.segment_size_in_bytes, began_ms)

    async def _throttle(self, copied_bytes: int, began_ms: int) -> None:
        """Keep the copy rate under remote.log.manager.copy.max.bytes.per.second."""
        if self._copy_rate <= 0 or self._copy_rate >= 2**62:
            return
        should_take_ms = copied_bytes * 1000 // self._copy_rate
        took_ms = self._clock.monotonic_ms() - began_ms
        if should_take_ms > took_ms:
            await sleep_ms(self._clock, should_take_ms - took_ms)

    async def _expire(
        self, part: Partition, epoch: int, state: RemotePartitionMetadata, config: LogConfig
    ) -> None:
        plog = part.log
        highest = state.highest_copied_offset
        local_only = sum(s.size for s in plog.segments if s.base_offset > highest)
        doomed = remote_segments_to_delete(
            state.copied_segments(),
            RetentionPolicy.of(config),
            self._clock.time_ms(),
            plog.deleted_records_before,
            local_only,
        )
        for metadata in doomed:
            await self._delete_segment(part, epoch, metadata)

    async def _delete_on_disable(self, part: Partition) -> None:
        """KIP-950: ``remote.storage.enable`` turned off with ``remote.log.delete.on.disable``. The leader
        deletes every remote segment (the usual three steps, so a reader stops first), once per leader
        epoch; the log then starts at its local start. A follower only forgets what it knew."""
        done = (part.tp, part.leader_epoch)
        if not part.is_leader:
            self._managed.pop(part.tp, None)
            return
        info = self._metadata.topics.get(part.topic)
        if done in self._disabled or info is None:
            return
        topic_id = uuid_text(info.topic_id)
        epoch = part.leader_epoch
        try:
            state = await self.rlmm.load(part.topic, topic_id, part.index, from_leader=True)
            doomed = state.segments_in(
                _S.COPY_SEGMENT_STARTED, _S.COPY_SEGMENT_FINISHED, _S.DELETE_SEGMENT_STARTED
            )
            for metadata in doomed:
                await self._delete_segment(part, epoch, metadata)
            await self.rsm.delete_partition(part.topic, topic_id, part.index)  # objects no record names
        except _Deposed:
            return
        except (ObjectStoreError, KafkaError, ConnectionError, OSError) as exc:
            self.topic_stats(part.topic).delete_errors += 1
            log.warning("%s-%d: deleting the remote log (tiering off) stopped: %s", *part.tp, exc)
            return
        if doomed:
            log.info("%s-%d: tiering off, %d remote segment(s) deleted", *part.tp, len(doomed))
        self._managed.pop(part.tp, None)
        self.rlmm.forget(*part.tp)
        self._disabled.add(done)

    async def _delete_gone_topics(self, seen: set[TopicPartition]) -> None:
        """Remote data of partitions whose topic is gone (deleted, or re-created with a new id)."""
        for tp, managed in list(self._managed.items()):
            if tp in seen:
                continue
            info = self._metadata.topics.get(tp[0])
            if info is not None and uuid_text(info.topic_id) == managed.topic_id:
                continue  # only no longer hosted here (reassigned), or tiering turned off
            try:
                count = await self.rsm.delete_partition(tp[0], managed.topic_id, tp[1])
            except ObjectStoreError as exc:
                log.warning(
                    "%s-%d: deleting the remote data of a deleted topic failed: %s", tp[0], tp[1], exc
                )
                continue
            log.info("%s-%d: topic deleted, %d remote object(s) deleted", tp[0], tp[1], count)
            del self._managed[tp]
            self.stats.pop(tp[0], None)
            self.rlmm.forget(*tp)
