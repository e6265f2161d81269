"""Replica manager: the partitions this broker hosts, as leader or follower.

One path for both ways of running Strom: in a ZooKeeper cluster the controller's LeaderAndIsr requests
arrive over the network; an embedded single node is a cluster of one whose local control plane
(`strom.broker.local_control`) hands the same requests over in-process, making this broker leader of every
partition with ISR = {itself}. ISR changes go through the `IsrStore` port either way.

Theory of operation (Kafka's ``ReplicaManager`` + ``Partition``):

* **LeaderAndIsr** from the controller makes this broker leader or follower of partitions. Requests
  from an older controller epoch are refused (STALE_CONTROLLER_EPOCH); a partition state with an older
  leader epoch than the one held is ignored. Becoming **leader** records the new epoch's start offset
  in the leader-epoch cache (so OffsetForLeaderEpoch answers correctly before any append), stops
  fetching, and resets what it knows of the followers. Becoming **follower** hands the partition to the
  replica fetcher for the new leader, which first truncates by leader epoch, then fetches.
* **High watermark** (leader): the minimum log end offset over the ISR, the leader's own included, and
  only while the ISR has at least ``min(min.insync.replicas, replicas)`` members (the strict min-ISR rule
  of docs/cluster.md#what-kafka-promises). Consumers read below it; every move wakes the consumers' fetches
  parked in the purgatory and completes the acks=all waits it covers. An append wakes the followers' parked
  fetches (partition.py explains the two purgatory keys).
* **Follower tracking**: a follower's Fetch offset is its log end offset. It is *caught up* when it
  fetches at the leader's log end offset (or at the end the leader had at its previous fetch, Kafka's
  lastCaughtUpTime rule). A follower not caught up for ``replica.lag.time.max.ms`` leaves the ISR; a
  follower outside the ISR that reaches the high watermark (and the current epoch's start) rejoins.
  Both changes are conditional writes of the partition state znode (version from the controller's last
  LeaderAndIsr, then our own writes) followed by an ISR change notification for the controller.
* **Fetch from the closest replica** (KIP-392, replica_selector.py): with ``replica.selector.class``
  set, the leader tells a consumer in another rack to fetch from an in-sync follower there
  (`preferred_read_replica`, from what each follower last reported: log start and end offsets, last
  caught up). A follower serves consumers below the high watermark its fetcher learns from the leader
  (`hosted_partition`; each move wakes the consumers parked on it); a follower that leaves the ISR is
  no longer chosen and, once the metadata says so, answers consumers REPLICA_NOT_AVAILABLE
  (`check_follower_readable`), which sends them back to the leader, as a broker failure does.
* **acks=all**: after the append the produce waits (`DelayedProduces`, ordered by offset) until the
  high watermark passes the batch (NONE), the ISR drops below min.insync.replicas
  (NOT_ENOUGH_REPLICAS_AFTER_APPEND), leadership moves (NOT_LEADER_OR_FOLLOWER) or the request times
  out (REQUEST_TIMED_OUT). Every ISR or leadership change wakes the partition's waits to re-check.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Any

from strom._util.clock import Clock, sleep_ms
from strom.broker.metadata_cache import ClusterMetadataStore
from strom.broker.partition import FollowerState, Partition, TopicPartition, follower_fetch_key
from strom.broker.ports import IsrStore
from strom.broker.purgatory import DelayedProduces, Purgatory
from strom.broker.replica_fetcher import ReplicaFetcherManager
from strom.broker.replica_selector import NO_PREFERRED_REPLICA, ReplicaView, preferred_read_replica
from strom.cluster.election import LeaderAndIsr
from strom.protocol.errors import ErrorCode, KafkaError
from strom.protocol.records.control import ControlType
from strom.storage.config import LogConfig
from strom.storage.log_append import AppendInfo
from strom.storage.log_manager import LogManager

log = logging.getLogger(__name__)

__all__ = ["FollowerState", "Partition", "ReplicaManager", "TopicPartition"]


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
        # Those with more than one replica: the only ones the ISR expiry sweep needs to visit.
        self._replicated: dict[TopicPartition, Partition] = {}
        self.controller_epoch = -1
        self.lag_max_ms = lag_max_ms
        self.fetchers = fetchers
        self.replica_selector = replica_selector
        # A follower's fetcher moved its high watermark: wake the consumers reading from this replica.
        fetchers.on_high_watermark = self._purgatory_notify
        self.on_leadership_change: list[Callable[[Partition, bool], None]] = []
        self._log_manager = log_manager
        self._metadata = metadata
        self._log_config_for = log_config_for
        self._purgatory = purgatory
        self.delayed_produces = DelayedProduces(clock)
        self._clock = clock
        self._isr_store = isr_store
        self._task: asyncio.Task[None] | None = None
        self.isr_shrinks = 0  # metrics: kafka.server ReplicaManager IsrShrinksPerSec / IsrExpandsPerSec
        self.isr_expands = 0

    def _purgatory_notify(self, tp: TopicPartition) -> None:
        self._purgatory.notify(tp)

    def start(self) -> None:
        self._task = asyncio.create_task(self._isr_expiry_loop())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        await self.fetchers.stop()

    def _now_ms(self) -> int:
        return self._clock.monotonic_ms()

    # lookups -----------------------------------------------------------------------------------------
    def leader_partition(self, topic: str, index: int, current_leader_epoch: int = -1) -> Partition:
        """The partition if this broker leads it (at the client's epoch, if given), else the Kafka error."""
        part = self.hosted_partition(topic, index, current_leader_epoch)
        if part.leader_id != self.node_id:
            raise KafkaError(ErrorCode.NOT_LEADER_OR_FOLLOWER, f"broker {self.node_id} is not the leader")
        return part

    def hosted_partition(self, topic: str, index: int, current_leader_epoch: int = -1) -> Partition:
        """The partition if this broker hosts a replica of it, leader or follower, at the client's epoch
        if given (a consumer fetching from a follower, KIP-392), else the Kafka error."""
        part = self.partitions.get((topic, index))
        if part is None:
            meta = self._metadata.topics.get(topic)
            if meta is None or not 0 <= index < meta.partitions:
                raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
            raise KafkaError(ErrorCode.NOT_LEADER_OR_FOLLOWER, f"broker {self.node_id} hosts no replica")
        if current_leader_epoch >= 0 and current_leader_epoch != part.leader_epoch:
            if current_leader_epoch < part.leader_epoch:
                raise KafkaError(ErrorCode.FENCED_LEADER_EPOCH)
            raise KafkaError(ErrorCode.UNKNOWN_LEADER_EPOCH)
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
        if self.replica_selector is None or part.leader_id != self.node_id:
            return NO_PREFERRED_REPLICA
        brokers = self._metadata.brokers
        now = self._now_ms()
        me = brokers.get(self.node_id)
        leader = ReplicaView(
            self.node_id, me.rack if me else None, part.log.log_start_offset, part.log.log_end_offset, 0
        )
        followers = []
        for replica, state in part.followers.items():
            broker = brokers.get(replica)
            followers.append(
                ReplicaView(
                    replica,
                    broker.rack if broker else None,
                    state.log_start_offset,
                    state.log_end_offset,
                    now - state.last_caught_up_ms,
                    in_sync=replica in part.isr,
                    alive=broker is not None,
                )
            )
        return preferred_read_replica(self.replica_selector, client_rack, leader, followers, fetch_offset)

    # controller requests ---------------------------------------------------------------------------
    def become_leader_or_follower(self, body: dict[str, Any]) -> dict[str, Any]:
        controller_epoch = int(body["controller_epoch"])
        if controller_epoch < self.controller_epoch:
            return {"error_code": int(ErrorCode.STALE_CONTROLLER_EPOCH), "partition_errors": []}
        self.controller_epoch = controller_epoch
        endpoints = {int(b["broker_id"]): (b["host_name"], int(b["port"])) for b in body["live_leaders"]}
        errors = []
        for state in body["partition_states"]:
            tp = (state["topic_name"], int(state["partition_index"]))
            try:
                self._apply_partition_state(tp, state, endpoints)
                code = ErrorCode.NONE
            except KafkaError as exc:
                code = exc.code
            except OSError as exc:
                log.error("cannot open the log of %s-%d: %s", tp[0], tp[1], exc)
                code = ErrorCode.KAFKA_STORAGE_ERROR
            errors.append({"topic_name": tp[0], "partition_index": tp[1], "error_code": int(code)})
        try:
            self._log_manager.sync_new_dirs()  # one fsync for the partition directories made above
        except OSError as exc:
            log.error("cannot fsync the log dirs after creating partitions: %s", exc)
            for entry in errors:  # whichever were new: their directories may not survive a crash
                entry["error_code"] = entry["error_code"] or int(ErrorCode.KAFKA_STORAGE_ERROR)
        return {"error_code": 0, "partition_errors": errors}

    def _apply_partition_state(
        self, tp: TopicPartition, state: dict[str, Any], endpoints: dict[int, tuple[str, int]]
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
            part = Partition(tp[0], tp[1], plog)
            self.partitions[tp] = part
        zk_version = int(state["zk_version"])
        part.replicas = [int(b) for b in state["replicas"]] + [
            int(b) for b in state["adding_replicas"] if int(b) not in state["replicas"]
        ]
        if len(part.replicas) > 1:
            self._replicated[tp] = part
        else:
            self._replicated.pop(tp, None)
        if not same_epoch or zk_version >= part.zk_version:
            part.isr = [int(b) for b in state["isr"]]
            part.zk_version = zk_version
            part.controller_epoch = int(state["controller_epoch"])
        if same_epoch and part.leader_id == leader:
            if leader == self.node_id:
                for r in part.replicas:
                    if r != self.node_id and r not in part.followers:
                        part.followers[r] = FollowerState(last_caught_up_ms=self._now_ms())
                self.maybe_advance_high_watermark(part)
                self.delayed_produces.wake_all(tp)  # the controller may have shrunk the ISR
            elif leader in endpoints and not self.fetchers.is_fetching(tp):
                self.fetchers.add_partition(part, leader, endpoints[leader])
            return
        part.leader_epoch = epoch
        part.leader_id = leader
        if leader == self.node_id:
            self._become_leader(part)
        else:
            self._become_follower(part, endpoints.get(leader))

    def _become_leader(self, part: Partition) -> None:
        self.fetchers.remove_partition(part.tp)
        plog = part.log
        part.leader_epoch_start_offset = plog.log_end_offset
        if plog.leader_epoch_cache.assign(part.leader_epoch, plog.log_end_offset):
            # An empty log's checkpoint need not be fsynced (two fsyncs per partition created): lost
            # in a crash, it is rebuilt from the batch headers, which carry their leader epoch.
            plog.leader_epoch_cache.write(durable=plog.log_end_offset > 0)
        now = self._now_ms()
        part.followers = {r: FollowerState(last_caught_up_ms=now) for r in part.replicas if r != self.node_id}
        log.info(
            "%s-%d: leader at epoch %d (log end offset %d, isr %s)",
            part.topic,
            part.index,
            part.leader_epoch,
            plog.log_end_offset,
            part.isr,
        )
        self.maybe_advance_high_watermark(part)
        self._wake_all(part.tp)
        for callback in self.on_leadership_change:
            callback(part, True)

    def _become_follower(self, part: Partition, endpoint: tuple[str, int] | None) -> None:
        part.followers = {}
        self.fetchers.remove_partition(part.tp)
        log.info(
            "%s-%d: follower of %d at epoch %d", part.topic, part.index, part.leader_id, part.leader_epoch
        )
        if endpoint is not None and part.leader_id >= 0:
            self.fetchers.add_partition(part, part.leader_id, endpoint)
        self._wake_all(part.tp)
        for callback in self.on_leadership_change:
            callback(part, False)

    def stop_replicas(self, body: dict[str, Any]) -> dict[str, Any]:
        controller_epoch = int(body["controller_epoch"])
        if controller_epoch < self.controller_epoch:
            return {"error_code": int(ErrorCode.STALE_CONTROLLER_EPOCH), "partition_errors": []}
        self.controller_epoch = controller_epoch
        delete = bool(body["delete_partitions"])
        errors = []
        deleted = False
        for entry in body["partitions"]:
            tp = (entry["topic_name"], int(entry["partition_index"]))
            self.fetchers.remove_partition(tp)
            if delete:
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

    # leader: appends, follower fetches, high watermark -------------------------------------------
    def append_as_leader(
        self, part: Partition, records: bytes | bytearray | memoryview, from_coordinator: bool = False
    ) -> AppendInfo:
        info = part.log.append_as_leader(records, part.leader_epoch, from_coordinator)
        if not info.duplicate:
            self._appended(part)
        return info

    def append_marker(
        self,
        part: Partition,
        producer_id: int,
        producer_epoch: int,
        control: ControlType,
        coordinator_epoch: int,
    ) -> AppendInfo:
        """A transaction coordinator's COMMIT/ABORT marker, appended as leader (WriteTxnMarkers)."""
        info = part.log.append_marker(
            producer_id, producer_epoch, control, coordinator_epoch, part.leader_epoch
        )
        self._appended(part)
        return info

    def _appended(self, part: Partition) -> None:
        # Followers read to the log end offset: wake their parked fetches first, so the batch leaves
        # for the ISR as soon as possible. Consumers wake only if the high watermark moves (at once on
        # a cluster of one, or while the ISR is this broker alone).
        self._purgatory.notify(part.log_end_key)
        self.maybe_advance_high_watermark(part)

    def record_follower_fetch(
        self, part: Partition, replica_id: int, fetch_offset: int, log_start_offset: int = -1
    ) -> None:
        """A follower fetched at ``fetch_offset`` (= its log end offset): track it, maybe expand the ISR."""
        if replica_id not in part.replicas or replica_id == self.node_id:
            return
        now = self._now_ms()
        state = part.followers.setdefault(replica_id, FollowerState(last_caught_up_ms=now))
        leader_leo = part.log.log_end_offset
        if fetch_offset >= leader_leo:
            state.last_caught_up_ms = now
        elif fetch_offset >= state.last_fetch_leader_leo >= 0:
            state.last_caught_up_ms = max(state.last_caught_up_ms, state.last_fetch_ms)
        state.log_end_offset = fetch_offset
        state.log_start_offset = log_start_offset
        state.last_fetch_leader_leo = leader_leo
        state.last_fetch_ms = now
        if (
            replica_id not in part.isr
            and fetch_offset >= part.log.high_watermark
            and fetch_offset >= part.leader_epoch_start_offset
        ):
            self._change_isr(part, [*part.isr, replica_id], f"replica {replica_id} caught up")
        self.maybe_advance_high_watermark(part)

    def maybe_advance_high_watermark(self, part: Partition) -> bool:
        isr, node_id = part.isr, self.node_id
        if part.leader_id != node_id or not isr:
            return False
        # min_isr() is at most the replica count: an ISR of every replica needs no look at it.
        if len(isr) < len(part.replicas) and len(isr) < part.min_isr():
            return False
        plog = part.log
        new_hw = plog.log_end_offset
        for replica in isr:  # alone in the ISR (a cluster of one): the log end offset
            if replica == node_id:
                continue
            state = part.followers.get(replica)
            if state is None or state.log_end_offset < 0:
                return False
            new_hw = min(new_hw, state.log_end_offset)
        if new_hw > plog.high_watermark:
            plog.high_watermark = new_hw
            self.delayed_produces.complete(part.tp, new_hw)
            self._purgatory.notify(part.tp)
            if part.followers and self.replica_selector is not None:
                # Followers serve consumers (KIP-392): tell them at once (fetch.py); this costs each
                # acks=all batch one more fetch round trip per follower, so only with a selector.
                self._purgatory.notify(part.log_end_key)
            return True
        return False

    def _wake_all(self, tp: TopicPartition) -> None:
        """Leadership or the ISR changed: every parked fetch and acks=all wait re-checks."""
        self.delayed_produces.wake_all(tp)
        self._purgatory.notify(tp)
        self._purgatory.notify(follower_fetch_key(tp))

    def _change_isr(self, part: Partition, new_isr: list[int], reason: str) -> bool:
        proposed = LeaderAndIsr(
            self.node_id, part.leader_epoch, tuple(new_isr), part.controller_epoch, part.zk_version
        )
        try:
            stored = self._isr_store.write_isr(part.topic, part.index, proposed)
        except Exception as exc:
            log.warning("%s-%d: ISR change failed (%s)", part.topic, part.index, exc)
            return False
        if stored is None:
            log.info(
                "%s-%d: ISR change lost a race (znode version moved); waiting for the controller", *part.tp
            )
            return False
        log.info("%s-%d: ISR %s -> %s (%s)", part.topic, part.index, part.isr, new_isr, reason)
        if len(new_isr) < len(part.isr):
            self.isr_shrinks += 1
        elif len(new_isr) > len(part.isr):
            self.isr_expands += 1
        part.isr = list(new_isr)
        part.zk_version = stored.zk_version
        with contextlib.suppress(Exception):
            self._isr_store.notify_isr_change([part.tp])
        self.maybe_advance_high_watermark(part)
        self._wake_all(part.tp)
        return True

    async def _isr_expiry_loop(self) -> None:
        interval_ms = max(self.lag_max_ms // 2, 50)
        while True:
            await sleep_ms(self._clock, interval_ms)
            try:
                self.shrink_lagging_isrs()
            except Exception:
                log.exception("ISR expiry check failed")

    def shrink_lagging_isrs(self) -> None:
        now = self._now_ms()
        for part in list(self._replicated.values()):  # an ISR of one has no follower to expire
            if part.leader_id != self.node_id or len(part.isr) < 2:
                continue
            lagging = [
                r
                for r in part.isr
                if r != self.node_id
                and now - part.followers.setdefault(r, FollowerState(last_caught_up_ms=now)).last_caught_up_ms
                > self.lag_max_ms
            ]
            if lagging:
                new_isr = [r for r in part.isr if r not in lagging]
                self._change_isr(part, new_isr, f"replicas {lagging} lagged > {self.lag_max_ms} ms")

    async def wait_for_replication(self, part: Partition, required_offset: int, timeout_ms: int) -> ErrorCode:
        """acks=all: wait until the high watermark reaches ``required_offset`` (deadline on the clock)."""
        deadline_ms = self._clock.monotonic_ms() + max(timeout_ms, 0)
        while True:
            if self.partitions.get(part.tp) is not part or part.leader_id != self.node_id:
                return ErrorCode.NOT_LEADER_OR_FOLLOWER
            if part.log.high_watermark >= required_offset:
                return ErrorCode.NONE
            if len(part.isr) < part.min_isr():
                return ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND
            remaining_ms = deadline_ms - self._clock.monotonic_ms()
            if remaining_ms <= 0 or not await self.delayed_produces.wait(
                part.tp, required_offset, remaining_ms
            ):
                if part.log.high_watermark >= required_offset and part.leader_id == self.node_id:
                    return ErrorCode.NONE
                return ErrorCode.REQUEST_TIMED_OUT
