"""Replica fetchers: followers pulling from leaders with Fetch (replica id set), one task per leader.

Theory of operation (Kafka's ``ReplicaFetcherThread``/``AbstractFetcherThread``):

1. A partition handed to a fetcher starts in the *truncating* state. The fetcher sends
   OffsetForLeaderEpoch (v3, with this broker's replica id) asking for the end offset of the follower's
   latest leader epoch, and truncates its log to ``min(leader's end offset, own end offset of the epoch
   the leader answered with)`` (KIP-101 and KIP-279), never to its high watermark. A follower with no
   epoch history keeps its log and lets the fetch offset decide.
2. Then it fetches from its log end offset, long-polling on the leader (``replica.fetch.wait.max.ms``).
   Batches are appended with the leader's offsets and epochs (`append_as_follower`, which also rebuilds
   idempotent-producer state so a future leader deduplicates retries), and the follower's high
   watermark becomes ``min(leader's high watermark, own log end offset)`` (checkpointed with every
   log's in ``replication-offset-checkpoint``); a move wakes the consumers that read from this follower
   (KIP-392, `on_high_watermark`). The *next* fetch tells the leader the new log end offset, which is
   how the leader learns that the batch is replicated. The leader's log start offset in each answer
   (Kafka's, below its local start when DeleteRecords moved it into the remote log) moves the
   follower's as DeleteRecords does (KIP-107: segments wholly below it deleted, the offset
   checkpointed), so a new leader's log starts where DeleteRecords left it.
3. OFFSET_OUT_OF_RANGE: below the leader's log start the follower restarts its log there; otherwise
   it truncates again. OFFSET_MOVED_TO_TIERED_STORAGE (KIP-405: the offset is only in the leader's remote
   log): the follower asks the leader's local log start and its epoch (ListOffsets -4), takes the
   leader-epoch history and producer state there from the remote segment ending before it (the remote
   log manager's `remote_aux_state`) and restarts its log at that offset (strom.tiered.follower_state),
   without copying the history. NOT_LEADER_OR_FOLLOWER / FENCED_LEADER_EPOCH / UNKNOWN_LEADER_EPOCH: back off
   until the controller's next LeaderAndIsr says what changed.

Back-offs (`ERROR_BACKOFF_MS` after a partition error, `CONNECTION_BACKOFF_MS` after a lost
connection) and the fetch's time limit run on the broker's clock, so a test on a manual clock decides
when a fetcher tries again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from strom._util.clock import Clock, sleep_ms
from strom.broker.network.net_client import BrokerConnection
from strom.broker.replication.partition import Partition, TopicPartition
from strom.broker.security.client import ClientSecurity
from strom.protocol.api import ApiKey
from strom.protocol.codec import RecordsRegion
from strom.protocol.errors import ErrorCode, KafkaError
from strom.protocol.messages import (
    FetchRequest,
    FetchRequestPartition,
    FetchResponsePartitionData,
    ListOffsetsRequest,
    OffsetForLeaderEpochRequest,
    OffsetForLeaderEpochRequestOffsetForLeaderPartition,
)
from strom.storage.checkpoint import EpochEntry
from strom.storage.log import PartitionLog
from strom.storage.producer_snapshot import SnapshotEntry
from strom.storage.retention import checkpointed_log_start
from strom.tiered.follower_state import epochs_at_local_start, start_log_at

log = logging.getLogger(__name__)

FETCH_VERSION = 11
OFFSET_FOR_LEADER_EPOCH_VERSION = 3
LIST_OFFSETS_VERSION = 8  # the first with EARLIEST_LOCAL_TIMESTAMP
EARLIEST_LOCAL_TIMESTAMP = -4
ERROR_BACKOFF_MS = 100  # Kafka's replica.fetch.backoff.ms default
CONNECTION_BACKOFF_MS = 500
UNDEFINED_EPOCH_OFFSET = -1


# (partition, leader's local log start, its epoch) -> (epoch history, producer state) there (KIP-405).
RemoteAuxState = Callable[
    [Partition, int, int], Awaitable[tuple[list[EpochEntry], list[SnapshotEntry] | None]]
]


@dataclass(slots=True)
class _FetchState:
    part: Partition
    truncating: bool = True
    below_local_start: bool = False  # answered OFFSET_MOVED_TO_TIERED_STORAGE: rebuild before fetching


def leader_log_start(plog: PartitionLog) -> int:
    """The log start offset a leader sends its followers: Kafka's, which with tiered storage is
    DeleteRecords' offset when that lies in the remote log, below the local log start."""
    return checkpointed_log_start(plog.config, plog.log_start_offset, plog.deleted_records_before)


def follow_log_start(plog: PartitionLog, leader_start: int) -> None:
    """A follower moves its log start to the leader's as DeleteRecords does (KIP-107), within its high
    watermark; checkpointed with the others (the lower of it and the local start when tiered)."""
    offset = min(leader_start, plog.high_watermark)
    if offset > plog.deleted_records_before or offset > plog.log_start_offset:
        plog.delete_records_before(offset)


def _ignore(_tp: TopicPartition) -> None:
    pass


class ReplicaFetcher:
    def __init__(
        self,
        node_id: int,
        leader_id: int,
        endpoint: tuple[str, int],
        max_wait_ms: int,
        max_bytes: int,
        security: ClientSecurity,
        clock: Clock,
        on_high_watermark: Callable[[TopicPartition], None] = _ignore,
        remote_aux_state: RemoteAuxState | None = None,
    ) -> None:
        self.node_id = node_id
        self._remote_aux_state = remote_aux_state
        self._below_local_start = False  # some partition answered OFFSET_MOVED_TO_TIERED_STORAGE
        self._clock = clock
        self._on_high_watermark = on_high_watermark
        self.leader_id = leader_id
        self.endpoint = endpoint
        self.partitions: dict[TopicPartition, _FetchState] = {}
        self._wake = asyncio.Event()
        self._conn = BrokerConnection(
            endpoint[0], endpoint[1], f"replica-fetcher-{node_id}", security, clock, reuse_receive_buffer=True
        )
        self._max_wait_ms = max_wait_ms
        self._max_bytes = max_bytes
        self.task = asyncio.create_task(self._run())

    def add(self, part: Partition) -> None:
        self.partitions[part.tp] = _FetchState(part)
        self._wake.set()

    async def close(self) -> None:
        self.task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self.task
        self._conn.close()

    async def _run(self) -> None:
        while True:
            if not self.partitions:
                self._wake.clear()
                await self._wake.wait()
                continue
            try:
                if any(s.truncating for s in self.partitions.values()):
                    await self._truncate()
                if self._below_local_start:  # a flag, not a scan: nothing added per fetch otherwise
                    await self._start_at_leader_local_start()
                await self._fetch_once()
            except ConnectionError as exc:
                log.debug("fetcher for leader %d: %s", self.leader_id, exc)
                await sleep_ms(self._clock, CONNECTION_BACKOFF_MS)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("fetcher for leader %d failed; retrying", self.leader_id)
                await sleep_ms(self._clock, CONNECTION_BACKOFF_MS)

    # truncation --------------------------------------------------------------------------------------
    async def _truncate(self) -> None:
        pending = {tp: s for tp, s in self.partitions.items() if s.truncating}
        topics: dict[str, list[OffsetForLeaderEpochRequestOffsetForLeaderPartition]] = {}
        for (topic, index), state in pending.items():
            plog = state.part.log
            latest = plog.leader_epoch_cache.latest_epoch
            if latest < 0:
                state.truncating = False
                continue
            topics.setdefault(topic, []).append(
                {"partition": index, "current_leader_epoch": state.part.leader_epoch, "leader_epoch": latest}
            )
        if not topics:
            return
        body: OffsetForLeaderEpochRequest = {
            "replica_id": self.node_id,
            "topics": [{"topic": t, "partitions": ps} for t, ps in topics.items()],
        }
        response = await self._conn.send(
            ApiKey.OFFSET_FOR_LEADER_EPOCH, OFFSET_FOR_LEADER_EPOCH_VERSION, body
        )
        for answered in response["topics"]:
            for p in answered["partitions"]:
                found = self.partitions.get((answered["topic"], int(p["partition"])))
                if found is None or not found.truncating:
                    continue
                if p["error_code"]:
                    await sleep_ms(self._clock, ERROR_BACKOFF_MS)
                    continue
                self._truncate_partition(found, int(p["leader_epoch"]), int(p["end_offset"]))

    def _truncate_partition(self, state: _FetchState, leader_epoch: int, end_offset: int) -> None:
        plog = state.part.log
        if end_offset == UNDEFINED_EPOCH_OFFSET:
            target = plog.high_watermark
        else:
            own_epoch, own_end = plog.leader_epoch_end_offset(leader_epoch)
            target = min(end_offset, plog.log_end_offset)
            if own_epoch == leader_epoch and own_end >= 0:
                target = min(target, own_end)
        if target < plog.log_end_offset:
            log.info(
                "%s-%d: truncating from %d to %d (leader epoch %d ends at %d on leader %d)",
                state.part.topic,
                state.part.index,
                plog.log_end_offset,
                target,
                leader_epoch,
                end_offset,
                self.leader_id,
            )
            plog.truncate_to(target)
        state.truncating = False

    # below the leader's local log start (tiered storage) -------------------------------------------
    async def _start_at_leader_local_start(self) -> None:
        try:
            await self._ask_leader_local_starts()
        finally:  # rare: a scan only while some partition waits for its new start
            self._below_local_start = any(s.below_local_start for s in self.partitions.values())

    async def _ask_leader_local_starts(self) -> None:
        pending = {tp: s for tp, s in self.partitions.items() if s.below_local_start and not s.truncating}
        if not pending:
            return
        topics: dict[str, list[tuple[int, int]]] = {}
        for (topic, index), state in pending.items():
            topics.setdefault(topic, []).append((index, state.part.leader_epoch))
        body: ListOffsetsRequest = {
            "replica_id": self.node_id,
            "isolation_level": 0,
            "topics": [
                {
                    "name": t,
                    "partitions": [
                        {
                            "partition_index": i,
                            "current_leader_epoch": e,
                            "timestamp": EARLIEST_LOCAL_TIMESTAMP,
                        }
                        for i, e in ps
                    ],
                }
                for t, ps in topics.items()
            ],
        }
        response = await self._conn.send(ApiKey.LIST_OFFSETS, LIST_OFFSETS_VERSION, body)
        failed = False
        for answered in response["topics"]:
            for p in answered["partitions"]:
                tp = (answered["name"], int(p["partition_index"]))
                asked = pending.get(tp)
                if asked is None:
                    continue
                if p["error_code"]:
                    failed = True
                    continue
                failed |= not await self._rebuild(asked, int(p["offset"]), int(p["leader_epoch"]))
        if failed:
            await sleep_ms(self._clock, ERROR_BACKOFF_MS)

    async def _rebuild(self, state: _FetchState, local_start: int, epoch: int) -> bool:
        """Restart the follower's log at the leader's local start; False to try again later."""
        part = state.part
        if self.partitions.get(part.tp) is not state or state.truncating:
            return True  # removed or replaced while the leader answered
        if part.log.log_end_offset >= local_start:
            state.below_local_start = False  # it moved meanwhile: the next fetch tells
            return True
        if self._remote_aux_state is None:  # tiering off on this broker: no remote state to read
            epochs, producers = epochs_at_local_start([], local_start, epoch), None
        else:
            try:
                epochs, producers = await self._remote_aux_state(part, local_start, epoch)
            except Exception as exc:  # the object store or the metadata topic: retriable
                log.warning("%s-%d: cannot read the remote state at %d: %s", *part.tp, local_start, exc)
                return False
        if self.partitions.get(part.tp) is not state or state.truncating:
            return True  # no longer fetched (leader now, or moved): leave its log alone
        log.info(
            "%s-%d: starting the log at the leader's local log start %d (%d epoch(s), %s)",
            *part.tp,
            local_start,
            len(epochs),
            "no producer state" if producers is None else f"{len(producers)} producer(s)",
        )
        start_log_at(part.log, local_start, epochs, producers, self._clock.time_ms())
        state.below_local_start = False
        return True

    # fetching ----------------------------------------------------------------------------------------
    async def _fetch_once(self) -> None:
        fetching = {
            tp: s for tp, s in self.partitions.items() if not s.truncating and not s.below_local_start
        }
        if not fetching:
            await sleep_ms(self._clock, ERROR_BACKOFF_MS)
            return
        topics: dict[str, list[FetchRequestPartition]] = {}
        for (topic, index), state in fetching.items():
            plog = state.part.log
            topics.setdefault(topic, []).append(
                {
                    "partition": index,
                    "current_leader_epoch": state.part.leader_epoch,
                    "fetch_offset": plog.log_end_offset,
                    "log_start_offset": plog.log_start_offset,
                    "partition_max_bytes": self._max_bytes,
                }
            )
        body: FetchRequest = {
            "replica_id": self.node_id,
            "max_wait_ms": self._max_wait_ms,
            "min_bytes": 1,
            "max_bytes": 0x7FFFFFFF,
            "isolation_level": 0,
            "session_id": 0,
            "session_epoch": -1,
            "topics": [{"topic": t, "partitions": ps} for t, ps in topics.items()],
            "forgotten_topics_data": [],
            "rack_id": "",
        }
        timeout_ms = self._max_wait_ms + 10_000
        response = await self._conn.send(ApiKey.FETCH, FETCH_VERSION, body, timeout_ms=timeout_ms)
        backoff = False
        for answered in response["responses"]:
            for p in answered["partitions"]:
                tp = (answered["topic"], int(p["partition_index"]))
                current = self.partitions.get(tp)
                if current is None or current is not fetching.get(tp):
                    continue
                backoff |= self._handle_partition(current, p)
        if backoff:
            await sleep_ms(self._clock, ERROR_BACKOFF_MS)

    def _handle_partition(self, state: _FetchState, p: FetchResponsePartitionData) -> bool:
        code = ErrorCode(int(p["error_code"]))
        plog = state.part.log
        if code == ErrorCode.NONE:
            records = p["records"]
            if records and not isinstance(records, RecordsRegion):  # decoded: a view of the frame
                try:
                    plog.append_as_follower(records)
                except KafkaError as exc:
                    log.warning("%s-%d: replicated batch rejected (%s); truncating", *state.part.tp, exc)
                    state.truncating = True
                    return True
            before = plog.high_watermark
            plog.high_watermark = min(int(p["high_watermark"]), plog.log_end_offset)
            if plog.high_watermark != before:
                self._on_high_watermark(state.part.tp)
            follow_log_start(plog, int(p["log_start_offset"]))
            return False
        if code == ErrorCode.OFFSET_MOVED_TO_TIERED_STORAGE:
            state.below_local_start = self._below_local_start = True
            return False  # the next round asks for the leader's local start
        if code == ErrorCode.OFFSET_OUT_OF_RANGE:
            leader_start = int(p["log_start_offset"])
            if leader_start >= 0 and plog.log_end_offset < leader_start:
                log.info(
                    "%s-%d: restarting the log at the leader's log start %d", *state.part.tp, leader_start
                )
                plog.truncate_fully_and_start_at(leader_start)
            else:
                state.truncating = True
            return True
        log.debug("%s-%d: fetch error %s from leader %d", *state.part.tp, code.name, self.leader_id)
        return True


class ReplicaFetcherManager:
    """The fetchers of one follower broker, one per leader it follows partitions of."""

    def __init__(
        self, node_id: int, max_wait_ms: int, max_bytes: int, security: ClientSecurity, clock: Clock
    ) -> None:
        self.node_id = node_id
        self._security = security
        self._clock = clock
        self._max_wait_ms = max_wait_ms
        self._max_bytes = max_bytes
        self._fetchers: dict[int, ReplicaFetcher] = {}
        self._owner: dict[TopicPartition, int] = {}
        self._closing: set[asyncio.Future[None]] = set()
        self.on_high_watermark: Callable[[TopicPartition], None] = _ignore
        # Set by the composition root with tiered storage (the remote log manager's remote_aux_state).
        self.remote_aux_state: RemoteAuxState | None = None

    def is_fetching(self, tp: TopicPartition) -> bool:
        return tp in self._owner

    def add_partition(self, part: Partition, leader_id: int, endpoint: tuple[str, int]) -> None:
        self.remove_partition(part.tp)
        fetcher = self._fetchers.get(leader_id)
        if fetcher is not None and fetcher.endpoint != endpoint:
            self._fetchers.pop(leader_id)
            closing = asyncio.ensure_future(fetcher.close())
            self._closing.add(closing)
            closing.add_done_callback(self._closing.discard)
            for tp in [tp for tp, owner in self._owner.items() if owner == leader_id]:
                del self._owner[tp]
            fetcher = None
        if fetcher is None:
            fetcher = self._fetchers[leader_id] = ReplicaFetcher(
                self.node_id,
                leader_id,
                endpoint,
                self._max_wait_ms,
                self._max_bytes,
                self._security,
                self._clock,
                self._high_watermark_moved,
                self.remote_aux_state,
            )
        fetcher.add(part)
        self._owner[part.tp] = leader_id

    def _high_watermark_moved(self, tp: TopicPartition) -> None:
        self.on_high_watermark(tp)

    def remove_partition(self, tp: TopicPartition) -> None:
        leader_id = self._owner.pop(tp, None)
        if leader_id is not None and leader_id in self._fetchers:
            self._fetchers[leader_id].partitions.pop(tp, None)

    async def stop(self) -> None:
        for fetcher in list(self._fetchers.values()):
            await fetcher.close()
        self._fetchers.clear()
        self._owner.clear()
