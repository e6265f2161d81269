"""One hosted replica of a partition and the rules of leading and following it (Kafka's ``Partition``).

A `Partition` pairs the local log with what this broker knows of the partition's leadership: the leader
and its epoch, the offset where that epoch started on this replica, the assigned replicas, the ISR
with the znode version it was read at (the ISR store's compare-and-set token), and, while this broker
leads, what each follower last fetched (`FollowerState`) and the ISR change it has proposed, if any.
The replica manager finds partitions and routes requests; the partition decides (the decisions
themselves are the pure functions of isr_rules.py):

* **Append as leader**: acks=all first checks the ISR against the effective min ISR
  (NOT_ENOUGH_REPLICAS); the append wakes the followers' parked fetches and may move the high watermark.
* **Follower fetch state**: each follower fetch records the follower's log end offset and when it was
  last caught up, may propose adding it to the ISR, and may move the high watermark.
* **High watermark**: the minimum log end offset over the maximal ISR, unless the ISR is below the
  effective min ISR (the strict rule of Kafka 3.7+). A move completes the acks=all waits it covers
  and wakes the consumers' fetches.
* **ISR changes are proposals** (Kafka's AlterPartition): the partition builds the new state from the
  one it holds and hands it to the replica manager's `IsrProposals`, which writes it through the
  `IsrStore` off the event loop; at most one proposal per partition is in flight, and the partition
  applies the stored state when the answer arrives (`complete_isr_change`), if it is still the leader
  of that epoch and nothing newer arrived meanwhile. A lost compare-and-set changes nothing: the
  controller's next LeaderAndIsr brings the state that won. While an addition is in flight the high
  watermark already waits for the joining follower (the maximal ISR, KIP-497); a removal counts only
  once stored.
* **acks=all waits** end as `replication_outcome` says; **become leader / follower** follow the
  controller's LeaderAndIsr; a client's ``current_leader_epoch`` is checked against the partition's
  (`check_leader_epoch`, KIP-320).
* **Reads**: follower fetches read to the log end offset, consumers below the high watermark (or the
  last stable offset), ListOffsets, OffsetForLeaderEpoch, DeleteRecords and DescribeProducers read the
  log through the partition: handlers never touch the log.

Parked fetches wait in the purgatory under one of two keys per partition, because they wait for
different things (as Kafka's delayed fetches check different offsets): a consumer's fetch reads below
the high watermark and is woken when it moves (`TopicPartition` itself is its key); a follower's reads
to the log end offset and is woken by appends (`follower_fetch_key`). An append that does not move the
high watermark (every acks=all append in a cluster) therefore wakes only the followers. A high-watermark
move wakes consumers and acks=all produces (`purgatory.DelayedProduces`); with `replica.selector.class`
set it also wakes the followers' fetches, which complete if the high watermark passed the one last sent
to that follower (`high_watermark_sent`): followers then serve consumers below the high watermark they
learn from the leader (KIP-392), so they must learn it without waiting for the next append (Kafka's
fetch sessions do the same). Without a selector, followers learn it with their next fetch.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from strom._util.clock import Clock
from strom.broker.metadata_cache import LiveBroker
from strom.broker.replication.isr_rules import (
    FollowerState,
    can_join_isr,
    high_watermark_bound,
    out_of_sync_replicas,
    record_fetch,
    replication_outcome,
    under_min_isr,
)
from strom.broker.replication.purgatory import DelayedProduces, Purgatory
from strom.broker.replication.replica_selector import (
    NO_PREFERRED_REPLICA,
    ReplicaView,
    preferred_read_replica,
)
from strom.cluster.election import LeaderAndIsr
from strom.protocol.errors import ErrorCode, KafkaError
from strom.protocol.records.control import ControlType
from strom.storage.config import effective_min_isr
from strom.storage.file_records import FileRecords
from strom.storage.log import PartitionLog
from strom.storage.log_append import AppendInfo
from strom.storage.producer_state import ProducerStateEntry
from strom.storage.time_lookup import max_timestamp_offset
from strom.storage.transaction_index import AbortedTxn

log = logging.getLogger(__name__)

__all__ = [
    "FollowerState",
    "IsrProposals",
    "Partition",
    "PartitionEnv",
    "TopicPartition",
    "follower_fetch_key",
]

TopicPartition = tuple[str, int]
# ListOffsets' special timestamps: -3 from v7 (KIP-734), -4 from v8 (KIP-405), -5 from v9 (KIP-1005),
# -6 from v11 (KIP-1023). Without tiered storage the local log start is the log start, and nothing is
# tiered or waiting for upload (Kafka answers offset -1 for those two when remote storage is off).
LATEST, EARLIEST, MAX_TIMESTAMP = -1, -2, -3
EARLIEST_LOCAL, LATEST_TIERED, EARLIEST_PENDING_UPLOAD = -4, -5, -6


def follower_fetch_key(tp: TopicPartition) -> tuple[str, int, str]:
    """The purgatory key under which followers' fetches of ``tp`` wait for appends."""
    return (tp[0], tp[1], "log_end")


class IsrProposals(Protocol):
    def submit(self, partition: Partition, proposal: LeaderAndIsr, reason: str) -> None:
        """Write ``proposal`` off the loop; call ``partition.complete_isr_change`` with the answer."""
        ...


@dataclass(frozen=True, slots=True)
class PartitionEnv:
    """What every partition of one replica manager shares."""

    node_id: int
    clock: Clock
    purgatory: Purgatory
    delayed_produces: DelayedProduces
    isr_proposals: IsrProposals
    replica_selector: str | None = None


class Partition:
    __slots__ = (
        "_env",
        "controller_epoch",
        "followers",
        "index",
        "isr",
        "leader_epoch",
        "leader_epoch_start_offset",
        "leader_id",
        "log",
        "log_end_key",
        "pending_isr",
        "replicas",
        "topic",
        "tp",
        "zk_version",
    )

    def __init__(self, topic: str, index: int, plog: PartitionLog, env: PartitionEnv) -> None:
        self.topic = topic
        self.index = index
        self.log = plog
        self._env = env
        self.leader_id = -1
        self.leader_epoch = -1
        self.leader_epoch_start_offset = 0
        self.replicas: list[int] = []
        self.isr: list[int] = []
        self.zk_version = -1
        self.controller_epoch = -1
        self.followers: dict[int, FollowerState] = {}
        self.pending_isr: LeaderAndIsr | None = None  # the ISR change in flight, at most one
        # Purgatory keys, built once (every append notifies them): see the module docstring.
        self.tp: TopicPartition = (topic, index)
        self.log_end_key = follower_fetch_key(self.tp)

    def __repr__(self) -> str:
        where = f"{self.topic}-{self.index}"
        return f"Partition({where}, leader={self.leader_id}@{self.leader_epoch}, isr={self.isr})"

    # state -------------------------------------------------------------------------------------------
    @property
    def is_leader(self) -> bool:
        return self.leader_id == self._env.node_id

    @property
    def high_watermark(self) -> int:
        return self.log.high_watermark

    @property
    def log_start_offset(self) -> int:
        return self.log.log_start_offset

    @property
    def log_end_offset(self) -> int:
        return self.log.log_end_offset

    @property
    def last_stable_offset(self) -> int:
        return self.log.last_stable_offset

    def check_leader_epoch(self, current_leader_epoch: int) -> None:
        """KIP-320: a client's ``current_leader_epoch`` (-1: none sent) must be this replica's epoch:
        FENCED_LEADER_EPOCH if older (the client is behind), UNKNOWN_LEADER_EPOCH if newer (we are)."""
        if current_leader_epoch >= 0 and current_leader_epoch != self.leader_epoch:
            if current_leader_epoch < self.leader_epoch:
                raise KafkaError(ErrorCode.FENCED_LEADER_EPOCH)
            raise KafkaError(ErrorCode.UNKNOWN_LEADER_EPOCH)

    def min_isr(self) -> int:
        """The effective min ISR (isr_rules.py): the one value every min-ISR rule uses."""
        return effective_min_isr(self.log.config.min_insync_replicas, len(self.replicas))

    def maximal_isr(self) -> list[int]:
        """The ISR plus a follower whose addition is in flight (the high watermark waits for it too)."""
        pending = self.pending_isr
        if pending is None or pending.leader_epoch != self.leader_epoch:
            return self.isr
        return [*self.isr, *(r for r in pending.isr if r not in self.isr)]

    # leader: appends ---------------------------------------------------------------------------------
    def append_records_as_leader(
        self, records: bytes | bytearray | memoryview, required_acks: int = 1, from_coordinator: bool = False
    ) -> AppendInfo:
        if self.leader_id != self._env.node_id:
            raise KafkaError(
                ErrorCode.NOT_LEADER_OR_FOLLOWER, f"broker {self._env.node_id} is not the leader"
            )
        if required_acks == -1 and under_min_isr(
            len(self.isr), len(self.replicas), self.log.config.min_insync_replicas
        ):
            raise KafkaError(
                ErrorCode.NOT_ENOUGH_REPLICAS,
                f"the ISR {self.isr} is smaller than the min ISR {self.min_isr()}",
            )
        info = self.log.append_as_leader(records, self.leader_epoch, from_coordinator)
        if not info.duplicate:
            self._appended()
        return info

    def append_marker(
        self, producer_id: int, producer_epoch: int, control: ControlType, coordinator_epoch: int
    ) -> AppendInfo:
        """A transaction coordinator's COMMIT/ABORT marker, appended as leader (WriteTxnMarkers)."""
        info = self.log.append_marker(
            producer_id, producer_epoch, control, coordinator_epoch, self.leader_epoch
        )
        self._appended()
        return info

    def _appended(self) -> None:
        # Followers read to the log end offset: wake their parked fetches first, so the batch leaves
        # for the ISR as soon as possible. Consumers wake only if the high watermark moves (at once on
        # a cluster of one, or while the ISR is this broker alone).
        self._env.purgatory.notify(self.log_end_key)
        self.maybe_increment_high_watermark()

    def maybe_increment_high_watermark(self) -> bool:
        env, isr = self._env, self.isr
        if self.leader_id != env.node_id or not isr:
            return False
        if under_min_isr(len(isr), len(self.replicas), self.log.config.min_insync_replicas):
            return False
        plog = self.log
        counted = isr if self.pending_isr is None else self.maximal_isr()
        new_hw = high_watermark_bound(env.node_id, plog.log_end_offset, counted, self.followers)
        if new_hw > plog.high_watermark:
            plog.high_watermark = new_hw
            env.delayed_produces.complete(self.tp, new_hw)
            env.purgatory.notify(self.tp)
            if self.followers and env.replica_selector is not None:
                # Followers serve consumers (KIP-392): tell them at once (fetch.py); this costs each
                # acks=all batch one more fetch round trip per follower, so only with a selector.
                env.purgatory.notify(self.log_end_key)
            return True
        return False

    def replication_outcome(self, required_offset: int) -> ErrorCode | None:
        """An acks=all wait for ``required_offset``: the code to answer, or None to go on waiting."""
        if self.leader_id != self._env.node_id:
            return ErrorCode.NOT_LEADER_OR_FOLLOWER
        return replication_outcome(self.log.high_watermark, required_offset, len(self.isr), self.min_isr())

    def wake_all(self) -> None:
        """Leadership or the ISR changed: every parked fetch and acks=all wait re-checks."""
        env = self._env
        env.delayed_produces.wake_all(self.tp)
        env.purgatory.notify(self.tp)
        env.purgatory.notify(self.log_end_key)

    # leader: followers and the ISR -------------------------------------------------------------------
    def update_follower_fetch_state(
        self, replica_id: int, fetch_offset: int, log_start_offset: int = -1
    ) -> None:
        """A follower fetched at ``fetch_offset`` (= its log end offset): track it, maybe expand the ISR."""
        if replica_id == self._env.node_id or replica_id not in self.replicas:
            return
        now = self._env.clock.monotonic_ms()
        state = self.followers.get(replica_id)
        if state is None:
            state = self.followers[replica_id] = FollowerState(last_caught_up_ms=now)
        record_fetch(state, fetch_offset, log_start_offset, self.log.log_end_offset, now)
        if (
            self.pending_isr is None
            and replica_id not in self.isr
            and self.leader_id == self._env.node_id
            and can_join_isr(fetch_offset, self.log.high_watermark, self.leader_epoch_start_offset)
        ):
            self._propose([*self.isr, replica_id], f"replica {replica_id} caught up")
        self.maybe_increment_high_watermark()

    def maybe_shrink_isr(self, lag_max_ms: int) -> None:
        """Propose removing the in-sync followers not caught up for more than ``lag_max_ms``."""
        node_id = self._env.node_id
        if self.leader_id != node_id or self.pending_isr is not None or len(self.isr) < 2:
            return
        now = self._env.clock.monotonic_ms()
        for replica in self.isr:  # a member with no state yet starts its lag clock now
            if replica != node_id and replica not in self.followers:
                self.followers[replica] = FollowerState(last_caught_up_ms=now)
        lagging = out_of_sync_replicas(self.isr, node_id, self.followers, now, lag_max_ms)
        if lagging:
            new_isr = [r for r in self.isr if r not in lagging]
            self._propose(new_isr, f"replicas {lagging} lagged > {lag_max_ms} ms")

    def _propose(self, new_isr: list[int], reason: str) -> None:
        proposal = LeaderAndIsr(
            self._env.node_id, self.leader_epoch, tuple(new_isr), self.controller_epoch, self.zk_version
        )
        self.pending_isr = proposal
        log.info("%s-%d: proposing ISR %s -> %s (%s)", self.topic, self.index, self.isr, new_isr, reason)
        self._env.isr_proposals.submit(self, proposal, reason)

    def complete_isr_change(self, proposal: LeaderAndIsr, stored: LeaderAndIsr | None, reason: str) -> int:
        """The store answered ``proposal`` (None: its compare-and-set lost, or the write failed).

        Returns the change applied to the ISR's size (0 if nothing was applied): the caller counts
        shrinks and expansions and tells the controller.
        """
        if self.pending_isr is proposal:
            self.pending_isr = None
        if stored is None:
            return 0
        if (
            self.leader_id != self._env.node_id
            or self.leader_epoch != proposal.leader_epoch
            or stored.zk_version <= self.zk_version  # the controller's newer state arrived meanwhile
        ):
            log.info("%s-%d: ISR change %s stored but superseded", self.topic, self.index, list(stored.isr))
            return 0
        log.info(
            "%s-%d: ISR %s -> %s stored (%s)", self.topic, self.index, self.isr, list(stored.isr), reason
        )
        delta = len(stored.isr) - len(self.isr)
        self.isr = list(stored.isr)
        self.zk_version = stored.zk_version
        self.maybe_increment_high_watermark()
        self.wake_all()
        return delta  # never 0: a stored write means the ISR held is the one the proposal changed

    # become leader / follower ------------------------------------------------------------------------
    def update_assignment_and_isr(
        self, replicas: list[int], isr: list[int], zk_version: int, controller_epoch: int, same_epoch: bool
    ) -> None:
        """The controller's view: assignment always; ISR unless older than the one this leader wrote."""
        self.replicas = replicas
        if not same_epoch or zk_version >= self.zk_version:
            self.isr = isr
            self.zk_version = zk_version
            self.controller_epoch = controller_epoch

    def refresh_as_leader(self) -> None:
        """Same leader, same epoch: new replicas get a follower state; the ISR may have been shrunk."""
        now = self._env.clock.monotonic_ms()
        for replica in self.replicas:
            if replica != self._env.node_id and replica not in self.followers:
                self.followers[replica] = FollowerState(last_caught_up_ms=now)
        self.maybe_increment_high_watermark()
        self._env.delayed_produces.wake_all(self.tp)  # the controller may have shrunk the ISR

    def make_leader(self, leader_epoch: int) -> None:
        """Lead from this replica's log end offset, recorded as the new epoch's start (recorded first: a
        write the disk refuses leaves the replica's role and epoch as they were)."""
        node_id, plog = self._env.node_id, self.log
        plog.assign_leader_epoch(leader_epoch)
        self.leader_id, self.leader_epoch = node_id, leader_epoch
        self.leader_epoch_start_offset = plog.log_end_offset
        now = self._env.clock.monotonic_ms()
        self.followers = {r: FollowerState(last_caught_up_ms=now) for r in self.replicas if r != node_id}
        log.info(
            "%s-%d: leader at epoch %d (log end offset %d, isr %s)",
            self.topic,
            self.index,
            leader_epoch,
            plog.log_end_offset,
            self.isr,
        )
        self.maybe_increment_high_watermark()
        self.wake_all()

    def make_follower(self, leader_id: int, leader_epoch: int) -> None:
        self.leader_id, self.leader_epoch = leader_id, leader_epoch
        self.followers = {}
        log.info("%s-%d: follower of %d at epoch %d", self.topic, self.index, leader_id, leader_epoch)
        self.wake_all()

    # reads -------------------------------------------------------------------------------------------
    def read_for_follower(self, fetch_offset: int, max_bytes: int, min_one_batch: bool) -> FileRecords:
        """A follower's fetch: whole batches up to the log end offset."""
        plog = self.log
        return plog.read_records(fetch_offset, max_bytes, plog.log_end_offset, min_one_batch=min_one_batch)

    def take_high_watermark_news(self, replica_id: int) -> bool:
        """With a replica selector: has the high watermark passed the one last sent to this follower?
        Records it as sent (the answer carries it)."""
        state = self.followers.get(replica_id)
        if state is None or self._env.replica_selector is None:
            return False
        hwm = self.log.high_watermark
        news = 0 <= state.high_watermark_sent < hwm  # not on a first fetch: nothing to compare
        state.high_watermark_sent = hwm
        return news

    def read_records(self, fetch_offset: int, max_bytes: int, min_one_batch: bool) -> FileRecords:
        """A read_uncommitted consumer's fetch: whole batches below the high watermark."""
        plog = self.log
        return plog.read_records(fetch_offset, max_bytes, plog.high_watermark, min_one_batch=min_one_batch)

    def read_committed(
        self, fetch_offset: int, max_bytes: int, min_one_batch: bool
    ) -> tuple[FileRecords, list[AbortedTxn]]:
        return self.log.read_committed(fetch_offset, max_bytes, min_one_batch=min_one_batch)

    def preferred_read_replica(
        self,
        selector: str | None,
        client_rack: str | None,
        fetch_offset: int,
        brokers: Mapping[int, LiveBroker],
    ) -> int:
        """KIP-392: the in-sync replica a consumer in ``client_rack`` should fetch from, or -1 (here)."""
        node_id = self._env.node_id
        if selector is None or self.leader_id != node_id:
            return NO_PREFERRED_REPLICA
        now = self._env.clock.monotonic_ms()
        me = brokers.get(node_id)
        plog = self.log
        leader = ReplicaView(node_id, me.rack if me else None, plog.log_start_offset, plog.log_end_offset, 0)
        # Tiered storage: a follower reads below its local log start from remote storage, as the leader
        # does (KIP-405), so only DeleteRecords bounds what it can serve.
        remote = plog.highest_offset_in_remote_storage
        floor = plog.deleted_records_before if remote is not None and remote >= 0 else None
        followers = []
        for replica, state in self.followers.items():
            broker = brokers.get(replica)
            followers.append(
                ReplicaView(
                    replica,
                    broker.rack if broker else None,
                    state.log_start_offset if floor is None else min(state.log_start_offset, floor),
                    state.log_end_offset,
                    now - state.last_caught_up_ms,
                    in_sync=replica in self.isr,
                    alive=broker is not None,
                )
            )
        return preferred_read_replica(selector, client_rack, leader, followers, fetch_offset)

    def end_offset_for_epoch(self, leader_epoch: int) -> tuple[int, int]:
        """OffsetForLeaderEpoch: (largest known epoch <= ``leader_epoch``, that epoch's end offset)."""
        return self.log.leader_epoch_end_offset(leader_epoch)

    def fetch_offset_for_timestamp(
        self, timestamp: int, read_committed: bool, from_consumer: bool
    ) -> tuple[int, int, int]:
        """ListOffsets as leader: (timestamp, offset, leader epoch); -1 where unknown.

        A consumer gets OFFSET_NOT_AVAILABLE while this leader's high watermark is below the start
        of its epoch (KIP-207: the new leader does not know yet what was committed).
        """
        plog = self.log
        lagging = from_consumer and self.leader_epoch_start_offset > plog.high_watermark
        if timestamp == LATEST:
            if lagging:
                raise KafkaError(ErrorCode.OFFSET_NOT_AVAILABLE)
            return -1, plog.last_stable_offset if read_committed else plog.high_watermark, self.leader_epoch
        if timestamp in (EARLIEST, EARLIEST_LOCAL):
            start = plog.log_start_offset
            return -1, start, plog.leader_epoch_cache.epoch_for_offset(start)
        if timestamp in (LATEST_TIERED, EARLIEST_PENDING_UPLOAD):
            return -1, -1, -1
        if timestamp == MAX_TIMESTAMP:
            found = max_timestamp_offset(plog.segments, plog.log_start_offset)
        elif timestamp < 0:
            raise KafkaError(ErrorCode.INVALID_REQUEST, f"unknown special timestamp {timestamp}")
        else:
            found = plog.offset_for_timestamp(timestamp)
        if found is not None and found[0] < plog.high_watermark:
            return found[1], found[0], plog.leader_epoch_cache.epoch_for_offset(found[0])
        if lagging:
            raise KafkaError(ErrorCode.OFFSET_NOT_AVAILABLE)
        return -1, -1, -1

    def delete_records_before(self, offset: int) -> int:
        """DeleteRecords as leader: move the log start offset up to ``offset`` (-1: the high
        watermark); returns the new log start offset (OFFSET_OUT_OF_RANGE above the high watermark)."""
        plog = self.log
        if offset == -1:
            offset = plog.high_watermark
        if offset < 0 or offset > plog.high_watermark:
            raise KafkaError(ErrorCode.OFFSET_OUT_OF_RANGE)
        plog.delete_records_before(offset)
        return plog.log_start_offset

    def active_producers(self) -> list[ProducerStateEntry]:
        """DescribeProducers: the producers this replica tracks, by producer id."""
        return [entry for _, entry in sorted(self.log.producer_state.producers.items())]
