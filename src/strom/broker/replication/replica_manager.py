"""Replica manager: the partitions this broker hosts, as leader or follower, and the calls on them.

One path for a ZooKeeper cluster (the controller's LeaderAndIsr requests arrive over the network) and
an embedded single node (its in-process controller, `strom.broker.control.single_node`, hands the same
requests over, with this broker leader of every partition, ISR = {itself}). ISR changes go through the
`IsrStore` port either way, off the event loop (isr_proposals.py).

Theory of operation (Kafka's ``ReplicaManager``; the rules of one partition are `Partition`'s):

* **Lookups**: a request names a partition; it is served only if this broker hosts it (else
  UNKNOWN_TOPIC_OR_PARTITION or NOT_LEADER_OR_FOLLOWER), at the client's leader epoch if one is given
  (FENCED_LEADER_EPOCH for an older one, UNKNOWN_LEADER_EPOCH for a newer one), and, for appends,
  ListOffsets, DeleteRecords, OffsetForLeaderEpoch and followers' fetches, only as leader.
* **The calls handlers make**: `append_records` (Produce), `fetch_records` (Fetch: a follower's fetch
  records its state first; a consumer's may be answered with a preferred read replica), and the
  few reads of other APIs (`fetch_offset_for_timestamp`, `end_offset_for_epoch`, `delete_records`,
  `active_producers`, `log_start_offset_if_hosted`). No handler touches a `PartitionLog`.
* **LeaderAndIsr** from the controller makes this broker leader or follower of partitions. Requests
  from an older controller epoch are refused (STALE_CONTROLLER_EPOCH); a partition state with an older
  leader epoch than the one held is ignored. Becoming **leader** stops fetching and hands the
  partition its new epoch (`Partition.make_leader`); becoming **follower** hands it to the replica
  fetcher for the new leader, which first truncates by leader epoch, then fetches.
* **ISR expiry**: every ``replica.lag.time.max.ms / 2`` each led partition with followers checks for
  lagging ones (`Partition.maybe_shrink_isr`); the proposals are written by `IsrChangeManager`.
* **Fetch from the closest replica** (KIP-392, replica_selector.py): with ``replica.selector.class``
  set, the leader tells a consumer in another rack to fetch from an in-sync follower there
  (`preferred_read_replica`, from what each follower last reported: log start and end offsets, last
  caught up). A follower serves consumers below the high watermark its fetcher learns from the leader
  (`hosted_partition`; each move wakes the consumers parked on it); a follower that leaves the ISR is
  no longer chosen and, once the metadata says so, answers consumers REPLICA_NOT_AVAILABLE
  (`check_follower_readable`), which sends them back to the leader, as a broker failure does.
* **An offline log dir** (KIP-112): its replicas go offline here (offline_dirs.py). A leaderless
  partition's answer to LeaderAndIsr says where its log ends (leader_and_isr_answer.py).
* **acks=all**: after the append the produce waits (`DelayedProduces`, ordered by offset) until the
  partition's `replication_outcome` decides: NONE once the high watermark passes the batch,
  NOT_ENOUGH_REPLICAS_AFTER_APPEND when the ISR is below the min ISR, NOT_LEADER_OR_FOLLOWER if
  leadership moves, REQUEST_TIMED_OUT at the request's timeout. Every ISR or leadership change wakes
  the partition's waits to re-check.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

from strom._util.clock import Clock, sleep_ms
from strom.broker.metadata_cache import ClusterMetadataStore
from strom.broker.ports import IsrStore
from strom.broker.replication.isr_proposals import IsrChangeManager
from strom.broker.replication.isr_rules import FollowerState
from strom.broker.replication.leader_and_isr_answer import partition_answer
from strom.broker.replication.log_dir_moves import LogDirMoves
from strom.broker.replication.offline_dirs import STORAGE_ERROR, OfflineLogDirs
from strom.broker.replication.partition import Partition, PartitionEnv, TopicPartition, follower_fetch_key
from strom.broker.replication.purgatory import DelayedProduces, Purgatory
from strom.broker.replication.replica_fetcher import ReplicaFetcherManager, leader_log_start
from strom.broker.replication.unopened_logs import UnopenedLogs
from strom.protocol.errors import ErrorCode, KafkaError
from strom.protocol.messages import (
    FetchResponseAbortedTransaction,
    LeaderAndIsrRequest,
    LeaderAndIsrRequestPartitionState,
    LeaderAndIsrResponse,
    LeaderAndIsrResponsePartitionError,
    StopReplicaRequest,
    StopReplicaResponse,
    StopReplicaResponsePartitionError,
)
from strom.protocol.records.control import ControlType
from strom.protocol.uuid_text import ZERO_UUID, uuid_text
from strom.storage.config import LogConfig
from strom.storage.file_records import FileRecords
from strom.storage.log_append import AppendInfo
from strom.storage.log_manager import LogManager
from strom.storage.partition_metadata import read_topic_id, write_topic_id
from strom.storage.producer_state import ProducerStateEntry
from strom.storage.txn_verification import VerificationState

log = logging.getLogger(__name__)

__all__ = ["NO_REDIRECT", "FollowerState", "Partition", "ReplicaManager", "TopicPartition"]

# `fetch_records`' note beside the data: a preferred read replica (>= 0), or one of these.
NO_REDIRECT = -1
HIGH_WATERMARK_NEWS = -2  # a follower has not been sent the current high watermark yet
FetchRead = tuple[FileRecords, int, int, int, list[FetchResponseAbortedTransaction] | None, int]


class ReplicaManager:
    def __init__(
        self,
        node_id: int,
        log_manager: LogManager,
        metadata: ClusterMetadataStore,
        log_config_for: Callable[[str], LogConfig],
        purgatory: Purgatory,
        clock: Clock,
        isr_store: IsrStore,
        fetchers: ReplicaFetcherManager,
        lag_max_ms: int,
        replica_selector: str | None = None,
    ) -> None:
        self.node_id = node_id
        self.partitions: dict[TopicPartition, Partition] = {}
        self._replicated: dict[TopicPartition, Partition] = {}  # >1 replica: the ISR expiry sweep's
        self.controller_epoch = -1
        self.unopened = UnopenedLogs(self._apply_partition_state)  # logs a refusing disk kept shut
        self.lag_max_ms = lag_max_ms
        self.fetchers = fetchers
        self.replica_selector = replica_selector
        fetchers.on_high_watermark = self._purgatory_notify  # wakes consumers reading this follower
        self.on_leadership_change: list[Callable[[Partition, bool], None]] = []
        self._log_manager = log_manager
        self._metadata = metadata
        self._log_config_for = log_config_for
        self._purgatory = purgatory
        self.delayed_produces = DelayedProduces(clock)
        self._clock = clock
        self.isr_changes = IsrChangeManager(isr_store, clock)
        self._env = PartitionEnv(
            node_id, clock, purgatory, self.delayed_produces, self.isr_changes, replica_selector
        )
        self._task: asyncio.Task[None] | None = None
        self.log_dir_moves = LogDirMoves(log_manager, self.partitions)  # AlterReplicaLogDirs
        self.offline = OfflineLogDirs(self, log_manager, self._replicated, self._wake_all)  # KIP-112

    @property
    def isr_shrinks(self) -> int:
        return self.isr_changes.isr_shrinks

    @property
    def isr_expands(self) -> int:
        return self.isr_changes.isr_expands

    def _purgatory_notify(self, tp: TopicPartition) -> None:
        self._purgatory.notify(tp)

    def start(self) -> None:
        self.offline.start()
        self._task = asyncio.create_task(self._isr_expiry_loop())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        await self.log_dir_moves.stop()
        await self.isr_changes.stop()
        await self.fetchers.stop()

    # lookups -----------------------------------------------------------------------------------------
    def leader_partition(self, topic: str, index: int, current_leader_epoch: int = -1) -> Partition:
        """The partition if this broker leads it (at the client's epoch, if given), else the Kafka error."""
        part = self.partitions.get((topic, index))
        if part is not None and current_leader_epoch < 0 and part.leader_id == self.node_id:
            return part  # the common case (every partition of every Produce): one lookup
        part = self.hosted_partition(topic, index, current_leader_epoch)
        if part.leader_id != self.node_id:
            raise KafkaError(ErrorCode.NOT_LEADER_OR_FOLLOWER, f"broker {self.node_id} is not the leader")
        return part

    def hosted_partition(self, topic: str, index: int, current_leader_epoch: int = -1) -> Partition:
        """The partition if this broker hosts a replica of it, leader or follower, at the client's epoch
        if given (a consumer fetching from a follower, KIP-392), else the Kafka error."""
        part = self.partitions.get((topic, index))
        if part is None:
            self.offline.check((topic, index))
            meta = self._metadata.topics.get(topic)
            if meta is None or not 0 <= index < meta.partitions:
                raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
            raise KafkaError(ErrorCode.NOT_LEADER_OR_FOLLOWER, f"broker {self.node_id} hosts no replica")
        part.check_leader_epoch(current_leader_epoch)
        if part.leader_id < 0:
            raise KafkaError(ErrorCode.NOT_LEADER_OR_FOLLOWER, f"broker {self.node_id} knows no leader")
        return part

    def check_follower_readable(self, part: Partition) -> None:
        """A follower serves consumers only while the cluster's metadata lists it in the ISR.

        Strom's addition to Kafka's rules, which keep serving from a follower that left the ISR until the
        client's lease on it expires (librdkafka: 5 minutes), the consumer seeing no new records meanwhile.
        REPLICA_NOT_AVAILABLE sends librdkafka and the Java client back to the leader (with a metadata
        refresh), and the leader no longer selects this replica.
        """
        meta = self._metadata.partitions.get(part.tp)
        if meta is not None and self.node_id not in meta.isr:
            raise KafkaError(ErrorCode.REPLICA_NOT_AVAILABLE, f"broker {self.node_id} is not in the ISR")

    def preferred_read_replica(self, part: Partition, client_rack: str | None, fetch_offset: int) -> int:
        """KIP-392: the in-sync replica a consumer in ``client_rack`` should fetch from, or -1 (here)."""
        return part.preferred_read_replica(
            self.replica_selector, client_rack, fetch_offset, self._metadata.brokers
        )

    # what handlers call ------------------------------------------------------------------------------
    def append_records(
        self, part: Partition, records: bytes | bytearray | memoryview, required_acks: int
    ) -> AppendInfo:
        """Produce: append to a partition this broker leads (`leader_partition`), checking the ISR
        against the min ISR first for acks=all (NOT_ENOUGH_REPLICAS)."""
        return part.append_records_as_leader(records, required_acks)

    def txn_verification(
        self, part: Partition, producer_id: int
    ) -> tuple[VerificationState, ProducerStateEntry | None]:
        """KIP-890 part 1 (handlers/produce_verification.py): the partition's verification state and the
        producer's state there."""
        producers = part.log.producer_state
        return producers.verification, producers.producers.get(producer_id)

    def fetch_records(
        self,
        topic: str,
        index: int,
        current_leader_epoch: int,
        fetch_offset: int,
        max_bytes: int,
        min_one_batch: bool,
        replica_id: int = -1,
        log_start_offset: int = -1,
        update_fetch_state: bool = True,
        read_committed: bool = False,
        client_rack: str | None = None,
    ) -> FetchRead:
        """One partition of a Fetch: (data, high watermark, log start offset, last stable offset,
        aborted transactions, note); the note is a preferred read replica (>= 0), HIGH_WATERMARK_NEWS
        or NO_REDIRECT.

        A follower (``replica_id`` >= 0) fetches from the leader, up to the log end offset; with
        ``update_fetch_state`` its fetch offset is recorded as its log end offset first. ``client_rack``
        is None unless a consumer sent Fetch v11+: only then may a follower serve it, or the leader send
        it to a replica in its rack. A read_committed consumer reads below the last stable offset and
        gets the aborted transactions overlapping what it reads (a list, maybe empty); read_uncommitted
        gets None there (librdkafka complains otherwise).
        """
        if client_rack is None:
            part = self.leader_partition(topic, index, current_leader_epoch)
        else:
            part = self.hosted_partition(topic, index, current_leader_epoch)
        if replica_id >= 0:
            if update_fetch_state:
                part.update_follower_fetch_state(replica_id, fetch_offset, log_start_offset)
            data = part.read_for_follower(fetch_offset, max_bytes, min_one_batch)
            note = HIGH_WATERMARK_NEWS if part.take_high_watermark_news(replica_id) else NO_REDIRECT
            return data, part.high_watermark, leader_log_start(part.log), part.last_stable_offset, None, note
        if client_rack is not None:
            preferred = part.preferred_read_replica(
                self.replica_selector, client_rack, fetch_offset, self._metadata.brokers
            )
            if preferred >= 0:
                return _nothing(part, preferred)
            if part.leader_id != self.node_id:
                self.check_follower_readable(part)
                if current_leader_epoch < 0 and fetch_offset > part.log_end_offset:
                    # KAFKA-14255: without KIP-320 the client cannot tell a lagging follower from a
                    # truncated log, so no OFFSET_OUT_OF_RANGE from a follower: an empty answer.
                    return _nothing(part, NO_REDIRECT)
        if read_committed:
            data, aborted = part.read_committed(fetch_offset, max_bytes, min_one_batch)
            listed: list[FetchResponseAbortedTransaction] = [
                {"producer_id": a.producer_id, "first_offset": a.first_offset} for a in aborted
            ]
            return (
                data,
                part.high_watermark,
                part.log_start_offset,
                part.last_stable_offset,
                listed,
                NO_REDIRECT,
            )
        data = part.read_records(fetch_offset, max_bytes, min_one_batch)
        return data, part.high_watermark, part.log_start_offset, part.last_stable_offset, None, NO_REDIRECT

    def log_start_offset_if_hosted(self, topic: str, index: int) -> int:
        """The log start offset of a replica this broker hosts (reported beside errors), else -1."""
        part = self.partitions.get((topic, index))
        return part.log_start_offset if part is not None else -1

    def is_tiered(self, topic: str, index: int) -> bool:
        """Whether the remote log manager manages the hosted replica's remote part (tiered storage)."""
        part = self.partitions.get((topic, index))
        return part is not None and part.log.highest_offset_in_remote_storage is not None

    def fetch_offset_for_timestamp(
        self,
        topic: str,
        index: int,
        current_leader_epoch: int,
        timestamp: int,
        read_committed: bool,
        from_consumer: bool,
    ) -> tuple[int, int, int]:
        """ListOffsets, as leader: (timestamp, offset, leader epoch), as the partition decides."""
        part = self.leader_partition(topic, index, current_leader_epoch)
        return part.fetch_offset_for_timestamp(timestamp, read_committed, from_consumer)

    def end_offset_for_epoch(
        self, topic: str, index: int, current_leader_epoch: int, leader_epoch: int
    ) -> tuple[int, int]:
        """OffsetForLeaderEpoch, as leader: (largest known epoch <= ``leader_epoch``, its end offset)."""
        return self.leader_partition(topic, index, current_leader_epoch).end_offset_for_epoch(leader_epoch)

    def delete_records(self, topic: str, index: int, offset: int) -> int:
        """DeleteRecords, as leader: the new log start offset (the low watermark)."""
        return self.leader_partition(topic, index).delete_records_before(offset)

    def active_producers(self, topic: str, index: int) -> list[ProducerStateEntry]:
        """DescribeProducers: the producers any replica this broker hosts tracks (NOT_LEADER_OR_FOLLOWER
        if it hosts none)."""
        part = self.partitions.get((topic, index))
        if part is None:
            raise KafkaError(ErrorCode.NOT_LEADER_OR_FOLLOWER)
        return part.active_producers()

    # controller requests ---------------------------------------------------------------------------
    def become_leader_or_follower(self, body: LeaderAndIsrRequest) -> LeaderAndIsrResponse:
        controller_epoch = int(body["controller_epoch"])
        if controller_epoch < self.controller_epoch:
            return {"error_code": int(ErrorCode.STALE_CONTROLLER_EPOCH), "partition_errors": []}
        self.controller_epoch = controller_epoch
        endpoints = {int(b["broker_id"]): (b["host_name"], int(b["port"])) for b in body["live_leaders"]}
        errors: list[LeaderAndIsrResponsePartitionError] = []
        for state in body["partition_states"]:
            tp = (state["topic_name"], int(state["partition_index"]))
            self.unopened.forget(tp)  # the newest state replaces one that could not be applied
            if tp in self.offline.partitions:  # its log is in a failed dir: not made again elsewhere
                errors.append(partition_answer(tp, ErrorCode(STORAGE_ERROR)))
                continue
            try:
                self._apply_partition_state(tp, state, endpoints)
                code = ErrorCode.NONE
            except KafkaError as exc:
                code = exc.code
            except OSError as exc:  # not KAFKA_STORAGE_ERROR: the controller takes that for a failed dir
                log.error("cannot open the log of %s-%d: %s", tp[0], tp[1], exc)
                code = ErrorCode.REPLICA_NOT_AVAILABLE
                self.unopened.remember(tp, state, endpoints)
            part = self.partitions.get(tp) if int(state["leader"]) < 0 else None  # v2: its log's end
            errors.append(partition_answer(tp, code, part.log if part is not None else None))
        try:
            self._log_manager.sync_new_dirs()  # one fsync for the partition directories made above
        except OSError as exc:
            log.error("cannot fsync the log dirs after creating partitions: %s", exc)
            for entry in errors:  # whichever were new: their directories may not survive a crash
                entry["error_code"] = entry["error_code"] or int(ErrorCode.REPLICA_NOT_AVAILABLE)
        return {"error_code": 0, "partition_errors": errors}

    def _apply_partition_state(
        self,
        tp: TopicPartition,
        state: LeaderAndIsrRequestPartitionState,
        endpoints: dict[int, tuple[str, int]],
    ) -> None:
        leader, epoch = int(state["leader"]), int(state["leader_epoch"])
        part = self.partitions.get(tp)
        if part is not None and epoch < part.leader_epoch:
            raise KafkaError(ErrorCode.STALE_CONTROLLER_EPOCH, "older leader epoch")
        same_epoch = part is not None and epoch == part.leader_epoch
        if part is None:
            plog = self._log_manager.get_or_create_log(
                tp[0], tp[1], self._log_config_for(tp[0]), sync_dir=False
            )
            _check_or_set_topic_id(plog.dir, bytes(state.get("topic_id", ZERO_UUID)))
            part = Partition(tp[0], tp[1], plog, self._env)
            self.partitions[tp] = part
        if leader == self.node_id and not (same_epoch and part.leader_id == leader):
            part.log.assign_leader_epoch(epoch)  # first: a refused write changes nothing (unopened_logs.py)
        replicas = [int(b) for b in state["replicas"]]
        replicas += [int(b) for b in state["adding_replicas"] if int(b) not in replicas]
        isr = [int(b) for b in state["isr"]]
        part.update_assignment_and_isr(
            replicas, isr, int(state["zk_version"]), int(state["controller_epoch"]), same_epoch
        )
        if len(replicas) > 1:
            self._replicated[tp] = part
        else:
            self._replicated.pop(tp, None)
        if same_epoch and part.leader_id == leader:
            if leader == self.node_id:
                part.refresh_as_leader()
            elif leader in endpoints and not self.fetchers.is_fetching(tp):
                self.fetchers.add_partition(part, leader, endpoints[leader])
            return
        self.fetchers.remove_partition(tp)
        if leader == self.node_id:
            part.make_leader(epoch)
        else:
            part.make_follower(leader, epoch)
            if leader >= 0 and (endpoint := endpoints.get(leader)) is not None:
                self.fetchers.add_partition(part, leader, endpoint)
        for callback in self.on_leadership_change:
            callback(part, leader == self.node_id)

    def stop_replicas(self, body: StopReplicaRequest) -> StopReplicaResponse:
        controller_epoch = int(body["controller_epoch"])
        if controller_epoch < self.controller_epoch:
            return {"error_code": int(ErrorCode.STALE_CONTROLLER_EPOCH), "partition_errors": []}
        self.controller_epoch = controller_epoch
        delete = bool(body["delete_partitions"])
        errors: list[StopReplicaResponsePartitionError] = []
        deleted = False
        for entry in body["partitions"]:
            tp = (entry["topic_name"], int(entry["partition_index"]))
            self.fetchers.remove_partition(tp)
            if delete:
                self.offline.partitions.discard(tp)  # a topic created again gets an online dir
                part = self.partitions.pop(tp, None)
                self._replicated.pop(tp, None)
                if part is not None and part.leader_id == self.node_id:
                    for callback in self.on_leadership_change:
                        callback(part, False)
                code = ErrorCode.NONE
                try:
                    deleted |= self._log_manager.delete_log(tp[0], tp[1], checkpoint=False)
                except OSError as exc:  # a leftover "-delete" directory is removed at the next start
                    log.error("deleting the log of %s-%d failed: %s", tp[0], tp[1], exc)
                    code = ErrorCode.KAFKA_STORAGE_ERROR
                self._wake_all(tp)
            else:
                code = ErrorCode.NONE
            errors.append({"topic_name": tp[0], "partition_index": tp[1], "error_code": int(code)})
        if deleted:
            try:
                self._log_manager.checkpoint_all()  # once for all deleted partitions
            except OSError as exc:
                log.error("writing checkpoints after deleting partitions failed: %s", exc)
        return {"error_code": 0, "partition_errors": errors}

    # appends of the coordinators (group, transaction, registry) -------------------------------------
    def append_as_leader(
        self, part: Partition, records: bytes | bytearray | memoryview, from_coordinator: bool = False
    ) -> AppendInfo:
        return part.append_records_as_leader(records, 1, from_coordinator)

    def append_marker(
        self,
        part: Partition,
        producer_id: int,
        producer_epoch: int,
        control: ControlType,
        coordinator_epoch: int,
    ) -> AppendInfo:
        """A transaction coordinator's COMMIT/ABORT marker, appended as leader (WriteTxnMarkers)."""
        return part.append_marker(producer_id, producer_epoch, control, coordinator_epoch)

    async def _isr_expiry_loop(self) -> None:
        interval_ms = max(self.lag_max_ms // 2, 50)
        while True:
            await sleep_ms(self._clock, interval_ms)
            try:
                self.shrink_lagging_isrs()
            except Exception:
                log.exception("ISR expiry check failed")

    def _wake_all(self, tp: TopicPartition) -> None:
        """A partition went away: every parked fetch and acks=all wait on it re-checks."""
        self.delayed_produces.wake_all(tp)
        self._purgatory.notify(tp)
        self._purgatory.notify(follower_fetch_key(tp))

    def shrink_lagging_isrs(self) -> None:
        for part in list(self._replicated.values()):  # an ISR of one has no follower to expire
            part.maybe_shrink_isr(self.lag_max_ms)

    async def wait_for_replication(self, part: Partition, required_offset: int, timeout_ms: int) -> ErrorCode:
        """acks=all: wait until the partition's `replication_outcome` decides (deadline on the clock)."""
        deadline_ms = self._clock.monotonic_ms() + max(timeout_ms, 0)
        while True:
            if self.partitions.get(part.tp) is not part:
                return ErrorCode.NOT_LEADER_OR_FOLLOWER
            if (outcome := part.replication_outcome(required_offset)) is not None:
                return outcome
            remaining_ms = deadline_ms - self._clock.monotonic_ms()
            if remaining_ms <= 0 or not await self.delayed_produces.wait(
                part.tp, required_offset, remaining_ms
            ):
                outcome = part.replication_outcome(required_offset)
                return ErrorCode.REQUEST_TIMED_OUT if outcome is None else outcome


def _nothing(part: Partition, note: int) -> FetchRead:
    return FileRecords([]), part.high_watermark, part.log_start_offset, part.last_stable_offset, None, note


def _check_or_set_topic_id(partition_dir: str, topic_id: bytes) -> None:
    """KIP-516: a partition directory records its topic's id (``partition.metadata``) the first time a
    LeaderAndIsr names it; one recording another id is a deleted namesake's: INCONSISTENT_TOPIC_ID, as
    Kafka answers, and the directory is left alone. Not fsynced: a lost file is written again."""
    if topic_id == ZERO_UUID:
        return
    recorded = read_topic_id(partition_dir)
    if recorded is None:
        write_topic_id(partition_dir, topic_id, durable=False)
    elif recorded != topic_id:
        raise KafkaError(
            ErrorCode.INCONSISTENT_TOPIC_ID,
            f"{partition_dir} belongs to topic id {uuid_text(recorded)}, not {uuid_text(topic_id)}",
        )
