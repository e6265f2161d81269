"""The transaction coordinator on the coordinator runtime: ``__transaction_state``, markers, timeouts.

The coordinator (`strom.transaction`) is sans-I/O: it decides and returns transitions. This module

* creates ``__transaction_state`` on first use (a FindCoordinator with key type 1, or any transactional
  request): ``transaction.state.log.num.partitions`` partitions, ``cleanup.policy=compact``,
  ``min(transaction.state.log.replication.factor, live brokers)`` replicas and
  ``min.insync.replicas = min(transaction.state.log.min.isr, replicas)``, so a single node works;
* hosts one shard per ``__transaction_state`` partition this broker leads on a `CoordinatorRuntime`
  (`strom.coordinator_runtime`): the runtime loads the partition when this broker becomes its leader
  (the shard replays its records into the coordinator; requests for its ids meanwhile get
  COORDINATOR_LOAD_IN_PROGRESS), then the markers of every Prepare* transaction of that partition are
  (re)sent, so a commit or abort interrupted by a crash completes after restart. Losing leadership
  unloads the shard: its ids are forgotten and their marker writing stops;
* makes every transition durable before it takes effect: a runtime write of one record that is not
  replayed (the coordinator's pending transition is the state to apply); once the high watermark
  passes it, `TransactionCoordinator.complete`, else `abandon`, then the answer. Failures reach
  clients as Kafka's coordinator maps them: NOT_COORDINATOR (leadership moved) stays, anything else
  -> COORDINATOR_NOT_AVAILABLE (both retriable);
* answers partition leaders' KIP-890 verifications (``verify_only``), and asks other coordinators
  for this broker's partitions (`txn_verification.py`);
* writes the COMMIT/ABORT markers of a Prepare* transaction to its partitions (`transaction_markers.py`),
  retried (no leader, NOT_LEADER, timeouts, lost connections) until written, then the Complete*
  transition;
* runs two timers per shard on the runtime (on the broker's clock): every
  ``transaction.abort.timed.out.transaction.cleanup.interval.ms`` the shard's Ongoing transactions past
  their timeout are fenced and moved to PrepareAbort (`TransactionCoordinator.expired_transactions`),
  and every ``transaction.remove.expired.transaction.cleanup.interval.ms`` each id idle longer than
  ``transactional.id.expiration.ms`` gets a tombstone (then is forgotten).

Group offsets sent in a transaction (TxnOffsetCommit) are the group coordinator's: `marker_listeners`
are told of every marker this broker writes as a partition's leader (for its own coordinator or for
another's WriteTxnMarkers), so that the group side materialises or drops that producer's pending
offsets on ``__consumer_offsets`` partitions.

Call only from the broker's event loop.
"""

from __future__ import annotations

import asyncio
import logging
import re

from strom._util.clock import Clock, sleep_ms
from strom._util.tasks import cancel_and_wait
from strom.broker.config import BrokerConfig
from strom.broker.control.topic_admin import CoordinatorTopic, TopicAdmin
from strom.broker.coordinators.coordinator_partitions import CoordinatorPartitions
from strom.broker.coordinators.transaction_markers import MarkerListener, MarkerWriter
from strom.broker.coordinators.txn_verification import TxnVerifier
from strom.broker.metadata_cache import ClusterMetadataStore
from strom.broker.security.client import ClientSecurity
from strom.coordinator_runtime import (
    CoordinatorError,
    CoordinatorResult,
    CoordinatorRuntime,
    Record,
    ShardContext,
)
from strom.protocol.errors import ErrorCode
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
COMPLETION_WAIT_MS = 500  # an AddPartitionsToTxn waits this long for the previous transaction's end
ABORT_TIMER = "abort-timed-out-transactions"
EXPIRE_TIMER = "remove-expired-transactional-ids"

__all__ = ["TXN_TOPIC", "MarkerListener", "TransactionService"]


def transition_record(transition: Transition) -> Record:
    """The ``__transaction_state`` record of a transition (Dead: a tombstone)."""
    tid = transition.transactional_id
    value = None if transition.state is TxnState.DEAD else encode_value(transition.value)
    return encode_key(tid), value


class TxnShard:
    """One ``__transaction_state`` partition's share of the coordinator: the ids that hash to it."""

    def __init__(self, service: TransactionService, context: ShardContext) -> None:
        self._service = service
        self.context = context
        self.index = context.partition
        self._name = f"{TXN_TOPIC}-{self.index}"

    def owns(self, transactional_id: str) -> bool:
        return partition_for(transactional_id, self._service.num_partitions) == self.index

    def replay(
        self, offset: int, producer_id: int, producer_epoch: int, key: bytes | None, value: bytes | None
    ) -> None:
        if key is None:
            return
        try:
            self._service.coordinator.replay(decode_key(key), None if value is None else decode_value(value))
        except TxnRecordError as exc:
            log.warning("%s: skipping unreadable record at offset %d: %s", self._name, offset, exc)

    def replay_end_transaction(self, producer_id: int, producer_epoch: int, commit: bool) -> None:
        """``__transaction_state`` holds no transactional batches."""

    def on_loaded(self) -> None:
        service = self._service
        loaded = [t for t in service.coordinator.txns if self.owns(t)]
        log.info("%s: loaded %d transactional id(s)", self._name, len(loaded))
        timer = self.context.timer
        timer.schedule(ABORT_TIMER, service.abort_interval_ms, self._abort_timed_out)
        timer.schedule(EXPIRE_TIMER, service.id_cleanup_interval_ms, self._remove_expired_ids)
        for meta in service.coordinator.pending_markers():
            if self.owns(meta.transactional_id):
                service.start_completion(meta.transactional_id)

    def on_unloaded(self) -> None:
        self._service.forget(self.index)

    def _abort_timed_out(self) -> CoordinatorResult[object]:
        """Fence and abort the shard's Ongoing transactions past their timeout (Kafka's
        abortTimedOutTransactions)."""
        service = self._service
        self.context.timer.schedule(ABORT_TIMER, service.abort_interval_ms, self._abort_timed_out)
        transitions = service.coordinator.expired_transactions(service.clock.time_ms(), self.owns)
        for transition in transitions:
            log.info("transaction of %s timed out: aborting", transition.transactional_id)
        return service.timer_result(transitions)

    def _remove_expired_ids(self) -> CoordinatorResult[object]:
        """Tombstone every id idle past ``transactional.id.expiration.ms`` (Kafka's
        removeExpiredTransactionalIds); the id is forgotten once its tombstone is durable."""
        service = self._service
        self.context.timer.schedule(EXPIRE_TIMER, service.id_cleanup_interval_ms, self._remove_expired_ids)
        transitions = service.coordinator.expired_transactional_ids(
            service.id_expiration_ms, service.clock.time_ms(), self.owns
        )
        return service.timer_result(transitions)


class TransactionService:
    def __init__(
        self,
        config: BrokerConfig,
        clock: Clock,
        partitions: CoordinatorPartitions,
        metadata: ClusterMetadataStore,
        topics: TopicAdmin,
        security: ClientSecurity,
    ) -> None:
        self.clock = clock
        self._metadata = metadata
        self._topics = topics
        get = config.get
        self.num_partitions = int(get("transaction.state.log.num.partitions"))
        self._replication_factor = int(get("transaction.state.log.replication.factor"))
        self._min_isr = int(get("transaction.state.log.min.isr"))
        self.abort_interval_ms = max(
            int(get("transaction.abort.timed.out.transaction.cleanup.interval.ms")), 10
        )
        self.id_expiration_ms = int(get("transactional.id.expiration.ms"))
        self.id_cleanup_interval_ms = max(
            int(get("transaction.remove.expired.transaction.cleanup.interval.ms")), 10
        )
        self.coordinator = TransactionCoordinator(metadata, int(get("transaction.max.timeout.ms")))
        self.markers = MarkerWriter(partitions, metadata, security, clock)
        self.verifier = TxnVerifier(
            partitions.node_id, self.verify_partitions, self.coordinator_endpoint, metadata, security, clock
        )
        self.marker_listeners = self.markers.listeners
        self._completing: dict[str, asyncio.Task[None]] = {}
        # Id -> partitions whose marker is written, while its Prepare* transaction completes.
        self.markers_written: dict[str, set[tuple[str, int]]] = {}
        self.runtime: CoordinatorRuntime[TxnShard] = CoordinatorRuntime(
            TXN_TOPIC, clock, partitions, partitions, self._build_shard, APPEND_TIMEOUT_MS
        )
        partitions.on_leadership(TXN_TOPIC, self.runtime.on_leadership_change)

    # --- life cycle ----------------------------------------------------------------------------
    async def stop(self) -> None:
        await self.runtime.close()
        await cancel_and_wait(self._completing.values())
        self._completing.clear()
        self.markers.close()
        self.verifier.close()

    # --- shards --------------------------------------------------------------------------------
    def _build_shard(self, context: ShardContext) -> TxnShard:
        info = self._metadata.topics.get(TXN_TOPIC)
        if info is not None:
            self.num_partitions = info.partitions
        self.forget(context.partition)  # the log is the truth: whatever memory held is replaced
        return TxnShard(self, context)

    def forget(self, index: int) -> None:
        """Drop the ids of a ``__transaction_state`` partition and stop completing their transactions."""
        mine = [t for t in self.coordinator.txns if partition_for(t, self.num_partitions) == index]
        self.coordinator.drop(mine)
        for tid in mine:
            task = self._completing.pop(tid, None)
            if task is not None:
                task.cancel()

    def timer_result(self, transitions: list[Transition]) -> CoordinatorResult[object]:
        """A timer's transitions as one write; each takes effect (or not) with it."""

        def settle(code: ErrorCode) -> None:
            for transition in transitions:
                if code is ErrorCode.NONE and self._pending(transition):
                    self.coordinator.complete(transition)
                    if transition.state.is_prepare:
                        self.start_completion(transition.transactional_id)
                    elif transition.state is TxnState.DEAD:
                        log.info("transactional id %s expired", transition.transactional_id)
                else:
                    self.coordinator.abandon(transition)

        records = [transition_record(t) for t in transitions]
        return CoordinatorResult(records, None, replay_records=False, on_complete=settle)

    def _pending(self, transition: Transition) -> bool:
        meta = self.coordinator.txns.get(transition.transactional_id)
        return meta is not None and meta.pending is transition

    # --- the topic and the coordinator's location ----------------------------------------------
    def ensure_topic(self) -> None:
        """Create ``__transaction_state`` if it does not exist yet (first use)."""
        self._topics.ensure_coordinator_topic(
            CoordinatorTopic(
                TXN_TOPIC,
                self.num_partitions,
                self._replication_factor,
                TXN_TOPIC_SEGMENT_BYTES,
                self._min_isr,
            )
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
        return self.runtime.refusal(partition_for(transactional_id, info.partitions))

    def loading(self) -> bool:
        """Whether a ``__transaction_state`` partition this broker leads is not loaded yet."""
        return self.runtime.loading()

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
        self,
        state_filters: list[str],
        producer_id_filters: list[int],
        duration_filter_ms: int,
        pattern: re.Pattern[str] | None = None,
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
            pattern,
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
        if decision.error is ErrorCode.CONCURRENT_TRANSACTIONS and await self._completed(transactional_id):
            error = self.coordinator_error(transactional_id)
            if error is not None:
                return error
            decision = self.coordinator.add_partitions(
                transactional_id, producer_id, producer_epoch, partitions, self.clock.time_ms()
            )
        return (await self._decided(decision)).error

    async def _completed(self, transactional_id: str) -> bool:
        """Wait up to COMPLETION_WAIT_MS for the id's previous transaction to complete (its markers and
        its Complete* record); whether it did. A producer begins its next transaction as soon as
        EndTxn is answered, so its first AddPartitionsToTxn meets the markers still being written:
        answered CONCURRENT_TRANSACTIONS at once, it would back off (librdkafka 20 ms, the Java client
        as configured) and ask again, one or more times per transaction."""
        task = self._completing.get(transactional_id)
        if task is None or task.done():
            return False
        timer = asyncio.ensure_future(sleep_ms(self.clock, COMPLETION_WAIT_MS))
        try:
            await asyncio.wait([task, timer], return_when=asyncio.FIRST_COMPLETED)
        finally:
            timer.cancel()
        return task.done()

    def verify_partitions(
        self, transactional_id: str, producer_id: int, producer_epoch: int, partitions: list[tuple[str, int]]
    ) -> dict[tuple[str, int], ErrorCode]:
        """KIP-890 part 1 for an id this broker should coordinate: whether its ongoing transaction holds
        each partition (`TransactionCoordinator.verify_partitions`), else the coordinator error for all."""
        error = self.coordinator_error(transactional_id)
        if error is not None:
            return dict.fromkeys(partitions, error)
        return self.coordinator.verify_partitions(transactional_id, producer_id, producer_epoch, partitions)

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
        code = await self.make_durable(transition)
        if code is not ErrorCode.NONE:
            return Decision(code)
        if transition.state.is_prepare:
            self.start_completion(transition.transactional_id)
        return decision

    async def make_durable(self, transition: Transition) -> ErrorCode:
        """Write the transition to the id's partition and wait for the ISR; then it takes effect."""
        tid = transition.transactional_id
        record = transition_record(transition)
        try:
            await self.runtime.write(
                partition_for(tid, self.num_partitions),
                lambda _shard: CoordinatorResult([record], None, replay_records=False),
                APPEND_TIMEOUT_MS,
            )
        except CoordinatorError as exc:
            self.coordinator.abandon(transition)
            log.warning("%s: %s not written: %s", tid, transition.state.name, exc.cause.name)
            if exc.code is ErrorCode.NOT_COORDINATOR:
                return ErrorCode.NOT_COORDINATOR
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        if not self._pending(transition):
            return ErrorCode.NOT_COORDINATOR  # the partition was unloaded meanwhile
        self.coordinator.complete(transition)
        return ErrorCode.NONE

    # --- markers -------------------------------------------------------------------------------
    def start_completion(self, transactional_id: str) -> None:
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
                coordinator_epoch = self.runtime.leader_epoch(partition_for(tid, self.num_partitions))
                if coordinator_epoch is None:
                    return  # no longer the coordinator: the new one resends the markers
                done |= await self.markers.write_all(
                    sorted(meta.partitions - done),
                    meta.producer_id,
                    meta.producer_epoch,
                    commit,
                    coordinator_epoch,
                )
                if done >= meta.partitions:
                    transition = self.coordinator.markers_written(tid, self.clock.time_ms())
                    if transition is None or await self.make_durable(transition) is ErrorCode.NONE:
                        return
            await sleep_ms(self.clock, MARKER_RETRY_MS)

    async def write_local_marker(
        self, topic: str, partition: int, pid: int, epoch: int, commit: bool, coordinator_epoch: int
    ) -> ErrorCode:
        """WriteTxnMarkers for a partition this broker leads (`MarkerWriter.write_local`)."""
        return await self.markers.write_local(topic, partition, pid, epoch, commit, coordinator_epoch)
