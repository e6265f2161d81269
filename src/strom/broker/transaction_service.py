"""Glue between the broker and the transaction coordinator: ``__transaction_state``, markers, timers.

The coordinator (`strom.transaction`) is sans-I/O: it decides and returns transitions. This module

* creates ``__transaction_state`` on first use (a FindCoordinator with key type 1, or any transactional
  request): ``transaction.state.log.num.partitions`` partitions, ``cleanup.policy=compact``,
  ``min(transaction.state.log.replication.factor, live brokers)`` replicas and
  ``min.insync.replicas = min(transaction.state.log.min.isr, replicas)``, so a single node works;
* makes every transition durable before it takes effect: one uncompressed batch appended as leader
  through the replica manager, then the acks=all wait (`ReplicaManager.wait_for_replication`) until the
  ISR has it; only then `TransactionCoordinator.complete` (or `abandon` on failure) and the answer.
  Failures reach clients as Kafka's coordinator maps them: NOT_LEADER_OR_FOLLOWER -> NOT_COORDINATOR,
  anything else -> COORDINATOR_NOT_AVAILABLE (both retriable);
* writes the COMMIT/ABORT markers of a Prepare* transaction to its partitions (`complete_transaction`):
  on a partition this broker leads, `ReplicaManager.append_marker` and the same acks=all wait,
  with the leader epoch of the id's ``__transaction_state`` partition as the coordinator epoch; a
  partition led by another broker gets WriteTxnMarkers v0 (Strom brokers all serve it), whose
  handler on that leader does the same append and wait. Markers
  are retried (no leader, NOT_LEADER, timeouts, lost connections) until written; partitions whose
  topic is gone are dropped, as Kafka does; INVALID_PRODUCER_EPOCH or TRANSACTION_COORDINATOR_FENCED
  from a partition ends the attempt there. Then the Complete* transition;
* loads a ``__transaction_state`` partition when this broker becomes its leader (the replica manager's
  leadership callbacks): the records are replayed in offset order, then the markers of every Prepare*
  transaction are (re)sent, so a commit or abort interrupted by a crash completes after restart.
  Losing leadership forgets that partition's ids;
* aborts transactions past their timeout every
  ``transaction.abort.timed.out.transaction.cleanup.interval.ms`` on the broker's clock
  (`TransactionCoordinator.expired_transactions` fences the producer and moves to PrepareAbort), and
  every ``transaction.remove.expired.transaction.cleanup.interval.ms`` writes a tombstone for each id
  idle longer than ``transactional.id.expiration.ms`` (then forgets it).

Group offsets sent in a transaction (TxnOffsetCommit) are the group coordinator's: `marker_listeners`
are told of every marker this broker writes as a partition's leader (for its own coordinator or for
another's WriteTxnMarkers), so that the group side materialises or drops that producer's pending
offsets on ``__consumer_offsets`` partitions.

Call only from the broker's event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

from strom._util.clock import Clock, sleep_ms
from strom.broker.config import BrokerConfig
from strom.broker.log_replay import replay_batches
from strom.broker.metadata_cache import ClusterMetadataStore
from strom.broker.net_client import BrokerConnection
from strom.broker.partition import Partition
from strom.broker.replica_manager import ReplicaManager
from strom.broker.security.client import ClientSecurity
from strom.broker.topic_admin import TopicAdmin
from strom.protocol.api import ApiKey
from strom.protocol.errors import ErrorCode, KafkaError
from strom.protocol.records.builder import build_batch
from strom.protocol.records.control import ControlType
from strom.transaction.coordinator import Decision, TransactionCoordinator, Transition, TxnMetadata
from strom.transaction.describe import Listing, list_transactions
from strom.transaction.records import (
    TxnRecordError,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
    partition_for,
)
from strom.transaction.state import TxnState

log = logging.getLogger(__name__)

TXN_TOPIC = "__transaction_state"
TXN_TOPIC_SEGMENT_BYTES = 100 * 1024 * 1024  # Kafka's transaction.state.log.segment.bytes
APPEND_TIMEOUT_MS = 5_000  # how long a coordinator append waits for the ISR
MARKER_RETRY_MS = 100
# (topic, partition, producer id, commit) of a marker written to a partition this broker leads.
MarkerListener = Callable[[str, int, int, bool], None]


class TransactionService:
    def __init__(
        self,
        config: BrokerConfig,
        clock: Clock,
        replica_manager: ReplicaManager,
        metadata: ClusterMetadataStore,
        topics: TopicAdmin,
        security: ClientSecurity,
    ) -> None:
        self.clock = clock
        self._security = security  # how WriteTxnMarkers reach other brokers
        self.replica_manager = replica_manager
        self._metadata = metadata
        self._topics = topics
        get = config.get
        self.num_partitions = int(get("transaction.state.log.num.partitions"))
        self._replication_factor = int(get("transaction.state.log.replication.factor"))
        self._min_isr = int(get("transaction.state.log.min.isr"))
        self._cleanup_interval_ms = int(get("transaction.abort.timed.out.transaction.cleanup.interval.ms"))
        self._id_expiration_ms = int(get("transactional.id.expiration.ms"))
        self._id_cleanup_interval_ms = int(get("transaction.remove.expired.transaction.cleanup.interval.ms"))
        self.coordinator = TransactionCoordinator(metadata, int(get("transaction.max.timeout.ms")))
        # __transaction_state partition -> its leader epoch when this broker loaded it (coordinator epoch).
        self.coordinator_epochs: dict[int, int] = {}
        self.marker_listeners: list[MarkerListener] = []
        self._completing: dict[str, asyncio.Task[None]] = {}
        # Id -> partitions whose marker is written, while its Prepare* transaction completes.
        self.markers_written: dict[str, set[tuple[str, int]]] = {}
        self._connections: dict[int, BrokerConnection] = {}  # partition leaders, for WriteTxnMarkers
        self._timer_tasks: list[asyncio.Task[None]] = []
        replica_manager.on_leadership_change.append(self._on_leadership_change)

    # --- life cycle ----------------------------------------------------------------------------
    def start(self) -> None:
        self._timer_tasks = [
            asyncio.create_task(self._periodically(self._cleanup_interval_ms, self.abort_expired)),
            asyncio.create_task(self._periodically(self._id_cleanup_interval_ms, self.remove_expired_ids)),
        ]

    async def stop(self) -> None:
        tasks = [*self._timer_tasks, *self._completing.values()]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._timer_tasks = []
        self._completing.clear()
        for connection in self._connections.values():
            connection.close()
        self._connections.clear()

    async def _periodically(self, interval_ms: int, job: Callable[[], Awaitable[None]]) -> None:
        while True:
            await sleep_ms(self.clock, max(interval_ms, 10))
            try:
                await job()
            except Exception:
                log.exception("transaction coordinator job %s failed", job.__name__)

    async def abort_expired(self) -> None:
        """Fence and abort every Ongoing transaction past its timeout (Kafka's abortTimedOutTransactions)."""
        for transition in self.coordinator.expired_transactions(self.clock.time_ms()):
            log.info("transaction of %s timed out: aborting", transition.transactional_id)
            if await self._append(transition) is ErrorCode.NONE:
                self._start_completion(transition.transactional_id)

    async def remove_expired_ids(self) -> None:
        """Tombstone every id idle past ``transactional.id.expiration.ms`` (Kafka's
        removeExpiredTransactionalIds); the id is forgotten once its tombstone is durable."""
        now = self.clock.time_ms()
        for transition in self.coordinator.expired_transactional_ids(self._id_expiration_ms, now):
            if await self._append(transition) is ErrorCode.NONE:
                log.info("transactional id %s expired", transition.transactional_id)

    # --- leadership ----------------------------------------------------------------------------
    def _on_leadership_change(self, partition: Partition, is_leader: bool) -> None:
        if partition.topic != TXN_TOPIC:
            return
        info = self._metadata.topics.get(TXN_TOPIC)
        if info is not None:
            self.num_partitions = info.partitions
        mine = [t for t in self.coordinator.txns if partition_for(t, self.num_partitions) == partition.index]
        self.coordinator.drop(mine)
        for tid in mine:
            task = self._completing.pop(tid, None)
            if task is not None:
                task.cancel()
        self.coordinator_epochs.pop(partition.index, None)
        if not is_leader:
            return
        plog = partition.log
        name = f"{TXN_TOPIC}-{partition.index}"
        for _, records in replay_batches(plog.read, plog.log_start_offset, plog.log_end_offset, name):
            for record in records:
                self._replay(name, record.key, record.value)
        self.coordinator_epochs[partition.index] = partition.leader_epoch
        loaded = [
            t for t in self.coordinator.txns if partition_for(t, self.num_partitions) == partition.index
        ]
        log.info("%s-%d: loaded %d transactional id(s)", TXN_TOPIC, partition.index, len(loaded))
        for meta in self.coordinator.pending_markers():
            if meta.transactional_id in loaded:
                self._start_completion(meta.transactional_id)

    def _replay(self, partition: str, key: bytes | None, value: bytes | None) -> None:
        if key is None:
            return
        try:
            self.coordinator.replay(decode_key(key), None if value is None else decode_value(value))
        except TxnRecordError as exc:
            log.warning("%s: skipping unreadable record: %s", partition, exc)

    # --- the topic and the coordinator's location ----------------------------------------------
    def ensure_topic(self) -> None:
        """Create ``__transaction_state`` if it does not exist yet (first use)."""
        configs = {
            "cleanup.policy": "compact",
            "compression.type": "uncompressed",
            "segment.bytes": str(TXN_TOPIC_SEGMENT_BYTES),
        }
        self._topics.ensure_internal_topic(
            TXN_TOPIC, self.num_partitions, self._replication_factor, configs, self._min_isr
        )

    def coordinator_endpoint(self, transactional_id: str) -> tuple[int, str, int] | None:
        """(node id, host, port) of the leader of the id's ``__transaction_state`` partition, if known."""
        info = self._metadata.topics.get(TXN_TOPIC)
        if info is None:
            return None
        leader = self._metadata.partition_leader(TXN_TOPIC, partition_for(transactional_id, info.partitions))
        return None if leader is None else (leader.node_id, leader.host, leader.port)

    def coordinator_error(self, transactional_id: str) -> ErrorCode | None:
        """None when this broker coordinates the id, else the retriable error to answer."""
        info = self._metadata.topics.get(TXN_TOPIC)
        if info is None:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        index = partition_for(transactional_id, info.partitions)
        part = self.replica_manager.partitions.get((TXN_TOPIC, index))
        if part is None or part.leader_id != self.replica_manager.node_id:
            return ErrorCode.NOT_COORDINATOR
        if index not in self.coordinator_epochs:
            return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        return None

    def loading(self) -> bool:
        """Whether a ``__transaction_state`` partition this broker leads is not loaded yet."""
        rm = self.replica_manager
        return any(
            topic == TXN_TOPIC and part.leader_id == rm.node_id and index not in self.coordinator_epochs
            for (topic, index), part in rm.partitions.items()
        )

    # --- describe (KIP-664) --------------------------------------------------------------------
    def describe_transaction(
        self, transactional_id: str
    ) -> tuple[ErrorCode, TxnMetadata | None, frozenset[tuple[str, int]]]:
        """DescribeTransactions for one id: its metadata and the partitions of its transaction still
        without a marker (as Kafka reports them while it prepares), or Kafka's error for it."""
        error = self.coordinator_error(transactional_id)
        if error is not None:
            return error, None, frozenset()
        meta = self.coordinator.txns.get(transactional_id)
        if meta is None or meta.state is TxnState.DEAD:
            return ErrorCode.TRANSACTIONAL_ID_NOT_FOUND, None, frozenset()
        return ErrorCode.NONE, meta, meta.partitions - self.markers_written.get(transactional_id, set())

    def list_transactions(
        self, state_filters: list[str], producer_id_filters: list[int], duration_filter_ms: int
    ) -> tuple[ErrorCode, Listing]:
        """ListTransactions: the ids this broker coordinates (COORDINATOR_LOAD_IN_PROGRESS while a
        partition loads)."""
        if self.loading():
            return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, Listing([], [])
        listing = list_transactions(
            self.coordinator.txns.values(),
            state_filters,
            producer_id_filters,
            self.clock.time_ms(),
            duration_filter_ms,
        )
        return ErrorCode.NONE, listing

    # --- requests ------------------------------------------------------------------------------
    async def init_producer_id(
        self, transactional_id: str, timeout_ms: int, producer_id: int = -1, producer_epoch: int = -1
    ) -> Decision:
        error = self.coordinator_error(transactional_id)
        if error is not None:
            return Decision(error)
        decision = self.coordinator.init_producer_id(
            transactional_id, timeout_ms, self.clock.time_ms(), producer_id, producer_epoch
        )
        return await self._decided(decision)

    async def add_partitions(
        self, transactional_id: str, producer_id: int, producer_epoch: int, partitions: list[tuple[str, int]]
    ) -> ErrorCode:
        error = self.coordinator_error(transactional_id)
        if error is not None:
            return error
        decision = self.coordinator.add_partitions(
            transactional_id, producer_id, producer_epoch, partitions, self.clock.time_ms()
        )
        return (await self._decided(decision)).error

    async def end_txn(
        self, transactional_id: str, producer_id: int, producer_epoch: int, commit: bool
    ) -> ErrorCode:
        error = self.coordinator_error(transactional_id)
        if error is not None:
            return error
        decision = self.coordinator.end_txn(
            transactional_id, producer_id, producer_epoch, commit, self.clock.time_ms()
        )
        return (await self._decided(decision)).error

    async def _decided(self, decision: Decision) -> Decision:
        """Make the decision's transition durable; a Prepare* one then starts writing markers."""
        transition = decision.transition
        if transition is None:
            return decision
        code = await self._append(transition)
        if code is not ErrorCode.NONE:
            return Decision(code)
        if transition.state.is_prepare:
            self._start_completion(transition.transactional_id)
        return decision

    async def _append(self, transition: Transition) -> ErrorCode:
        """Append the transition to the id's partition and wait for the ISR; then it takes effect."""
        tid = transition.transactional_id
        rm = self.replica_manager
        index = partition_for(tid, self.num_partitions)
        value = None if transition.state is TxnState.DEAD else encode_value(transition.value)  # tombstone
        batch = build_batch([(encode_key(tid), value, (), self.clock.time_ms())])
        try:
            part = rm.leader_partition(TXN_TOPIC, index)
            info = rm.append_as_leader(part, batch)
            code = await rm.wait_for_replication(part, info.last_offset + 1, APPEND_TIMEOUT_MS)
        except KafkaError as exc:
            code = exc.code
        except OSError as exc:
            log.warning("%s-%d: append failed: %s", TXN_TOPIC, index, exc)
            code = ErrorCode.KAFKA_STORAGE_ERROR
        if code is not ErrorCode.NONE:
            self.coordinator.abandon(transition)
            log.warning("%s: %s not written: %s", tid, transition.state.name, code.name)
            if code is ErrorCode.NOT_LEADER_OR_FOLLOWER:
                return ErrorCode.NOT_COORDINATOR
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        meta = self.coordinator.txns.get(tid)
        if meta is None or meta.pending is not transition:
            return ErrorCode.NOT_COORDINATOR  # the partition was unloaded meanwhile
        self.coordinator.complete(transition)
        return ErrorCode.NONE

    # --- markers -------------------------------------------------------------------------------
    def _start_completion(self, transactional_id: str) -> None:
        running = self._completing.get(transactional_id)
        if running is not None and not running.done():
            return
        task = asyncio.create_task(self._complete_transaction(transactional_id))
        self._completing[transactional_id] = task
        task.add_done_callback(lambda t: self._forget_task(transactional_id, t))

    def _forget_task(self, transactional_id: str, task: asyncio.Task[None]) -> None:
        if self._completing.get(transactional_id) is task:
            del self._completing[transactional_id]
            self.markers_written.pop(transactional_id, None)
        if not task.cancelled() and task.exception() is not None:
            log.error("completing the transaction of %s failed", transactional_id, exc_info=task.exception())

    async def _complete_transaction(self, tid: str) -> None:
        """Write the markers of a Prepare* transaction, then its Complete* state (retrying until done)."""
        done = self.markers_written[tid] = set()
        while True:
            meta = self.coordinator.txns.get(tid)
            if meta is None or not meta.state.is_prepare:
                return
            if meta.pending is None:
                commit = meta.state is TxnState.PREPARE_COMMIT
                index = partition_for(tid, self.num_partitions)
                coordinator_epoch = self.coordinator_epochs.get(index)
                if coordinator_epoch is None:
                    return  # no longer the coordinator: the new one resends the markers
                for topic, partition in sorted(meta.partitions - done):
                    if await self._write_marker(
                        topic, partition, meta.producer_id, meta.producer_epoch, commit, coordinator_epoch
                    ):
                        done.add((topic, partition))
                if done >= meta.partitions:
                    transition = self.coordinator.markers_written(tid, self.clock.time_ms())
                    if transition is None or await self._append(transition) is ErrorCode.NONE:
                        return
            await sleep_ms(self.clock, MARKER_RETRY_MS)

    async def _write_marker(
        self, topic: str, partition: int, pid: int, epoch: int, commit: bool, coordinator_epoch: int
    ) -> bool:
        """Whether the partition's marker is written (or need not be); False: retry later."""
        info = self._metadata.topics.get(topic)
        if info is None or partition >= info.partitions:
            log.info("%s-%d is gone: no transaction marker for producer %d", topic, partition, pid)
            return True
        state = self._metadata.partitions.get((topic, partition))
        if state is None or state.leader < 0:
            return False  # no leader right now: retry
        if state.leader == self.replica_manager.node_id:
            code = await self.write_local_marker(topic, partition, pid, epoch, commit, coordinator_epoch)
        else:
            code = await self._send_marker(
                state.leader, topic, partition, pid, epoch, commit, coordinator_epoch
            )
        if code in (ErrorCode.INVALID_PRODUCER_EPOCH, ErrorCode.TRANSACTION_COORDINATOR_FENCED):
            # A newer epoch or coordinator already ended this transaction there (Kafka stops too).
            log.warning("%s-%d: marker for producer %d refused: %s", topic, partition, pid, code.name)
            return True
        return code is ErrorCode.NONE

    async def write_local_marker(
        self, topic: str, partition: int, pid: int, epoch: int, commit: bool, coordinator_epoch: int
    ) -> ErrorCode:
        """Append a marker to a partition this broker leads and wait for its ISR (WriteTxnMarkers, as
        Kafka's leader does with acks=-1); then tell the marker listeners."""
        rm = self.replica_manager
        control = ControlType.COMMIT if commit else ControlType.ABORT
        try:
            part = rm.leader_partition(topic, partition)
            appended = rm.append_marker(part, pid, epoch, control, coordinator_epoch)
            code = await rm.wait_for_replication(part, appended.last_offset + 1, APPEND_TIMEOUT_MS)
        except KafkaError as exc:
            return exc.code
        except OSError as exc:
            log.warning("%s-%d: marker append failed: %s", topic, partition, exc)
            return ErrorCode.KAFKA_STORAGE_ERROR
        if code is ErrorCode.NONE:
            for listener in self.marker_listeners:
                listener(topic, partition, pid, commit)
        return code

    async def _send_marker(
        self,
        leader: int,
        topic: str,
        partition: int,
        pid: int,
        epoch: int,
        commit: bool,
        coordinator_epoch: int,
    ) -> ErrorCode:
        """WriteTxnMarkers v0 to the partition's leader."""
        broker = self._metadata.brokers.get(leader)
        if broker is None:
            return ErrorCode.NOT_LEADER_OR_FOLLOWER
        connection = self._connections.get(leader)
        if connection is None or (connection.host, connection.port) != (broker.host, broker.port):
            if connection is not None:
                connection.close()
            client_id = f"txn-coordinator-{self.replica_manager.node_id}"
            connection = self._connections[leader] = BrokerConnection(
                broker.host, broker.port, client_id, self._security, self.clock
            )
        marker = {
            "producer_id": pid,
            "producer_epoch": epoch,
            "transaction_result": commit,
            "topics": [{"name": topic, "partition_indexes": [partition]}],
            "coordinator_epoch": coordinator_epoch,
        }
        try:
            response = await connection.send(int(ApiKey.WRITE_TXN_MARKERS), 0, {"markers": [marker]}, 15_000)
            return ErrorCode(int(response["markers"][0]["topics"][0]["partitions"][0]["error_code"]))
        except (ConnectionError, LookupError, ValueError) as exc:
            log.info("%s-%d: WriteTxnMarkers to broker %d failed: %s", topic, partition, leader, exc)
            return ErrorCode.NETWORK_EXCEPTION
