"""The controller: one broker, elected through ZooKeeper, that decides leaders and ISRs for the cluster.

Theory of operation (Kafka's ZooKeeper-mode ``KafkaController``, reduced to what Strom needs). This
module is the driver: election, the event queue, and the ZooKeeper watches. The work is done by:

| module | role |
|---|---|
| `strom.cluster.context` | the cached view of the cluster (brokers, assignments, leadership, states) |
| `strom.cluster.partition_state`, `strom.cluster.replica_state` | states and their valid previous states |
| `strom.cluster.partition_machine` | every partition-state write (conditional, fenced, retried) |
| `strom.cluster.topic_changes` | new topics and partitions, topic config changes |
| `strom.cluster.election_configs` | min ISR and unclean election as the leaders resolve them |
| `strom.cluster.election` | pure leader-election decisions |
| `strom.cluster.leader_election` | ElectLeaders and auto leader rebalance |
| `strom.cluster.reassignment` | partition reassignment (KIP-455) |
| `strom.cluster.topic_deletion` | topic deletion |
| `strom.cluster.controlled_shutdown` | controlled shutdown |
| `strom.cluster.log_dir_failures` | offline log dirs (KIP-112): their replicas out of leadership, ISRs |
| `strom.cluster.log_ends` | where leaderless partitions' logs end, to elect the longest restarted one |
| `strom.cluster.propagation` | LeaderAndIsr / UpdateMetadata / StopReplica to brokers |

* **Election.** Every broker watches ``/controller``. When it is absent a broker tries to create it
  (ephemeral, so it vanishes with the winner's session); the winner increments ``/controller_epoch``
  by a conditional write and becomes active with that epoch. Every later ZooKeeper write of the
  controller runs in a transaction that checks the epoch znode's version, and every request it sends
  carries the epoch, which brokers use to ignore a deposed controller (STALE_CONTROLLER_EPOCH).
* **Fail-over.** The new controller reads the live brokers, every assignment and partition state
  (pipelined reads, not a round trip each), and rebuilds the partition and replica states from them;
  partitions without a state znode get their first leader, partitions whose leader or ISR members are
  dead get a new election, all written together in fenced multi-ops (`strom.cluster.zk_partitions`);
  then every broker gets one LeaderAndIsr for what it replicates and a full UpdateMetadata. Every
  event works on all the partitions it concerns at once in the same way, and later UpdateMetadata
  requests carry only what changed (`strom.cluster.propagation`).
* **One event queue, one consumer.** Watches (brokers, topics, each topic's assignment, ISR change
  notifications, deletions) and API calls (ElectLeaders, reassignments, ControlledShutdown) only
  enqueue events; one task processes them in order, so decisions never interleave. A write fenced by a
  newer controller epoch (`ControllerMovedError`) resigns and re-runs the election; a ZooKeeper error
  resigns and retries the election a second later.
* **Broker failure**: its replicas go OFFLINE; partitions it led get a new leader from the live ISR
  (unclean election only where the topic enables it); it leaves every ISR it was in; the leader epoch
  moves on in both cases. Members removed from an ISR below its min ISR stay eligible leaders
  (KIP-966's ELR, `strom.cluster.election`). **Broker start**: its replicas go ONLINE, it gets the full
  metadata and LeaderAndIsr for every partition it replicates; offline partitions it can lead come
  back. A **bounce** (a new process registered under the same id, maybe after a machine crash that
  lost its unsynced writes) is a failure and then a start, as in Kafka: the partitions are decided
  without it first (a partition nobody can lead keeps it in its ISR only if no other member is
  left), then it is a follower that must catch up. Its new process refuses what was decided for the
  previous one (requests carry the registration's broker epoch). A registration naming the epoch it
  replaces (the same process after its session expired, KIP-966's PreviousBrokerEpoch) is no bounce:
  only the epoch changes. The registrations taken in are recorded (``/strom/broker_epochs``), so that
  a controller elected after a broker registered again still treats it as bounced.
* **New topics and partitions** appear through the topic watches: NEW, then ONLINE with the first live
  replica as leader.
* **Time.** The election retry after a ZooKeeper error and the periodic checks (reassignments, auto
  leader rebalance) run on the clock the controller is given (the broker's), never the event loop's.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from strom._util.clock import Clock, sleep_ms
from strom.cluster import zk_paths as paths
from strom.cluster.context import (
    ControllerContext,
    TopicPartition,
    bounced_since,
    broker_changes,
    renewed_since,
)
from strom.cluster.controlled_shutdown import ControlledShutdown
from strom.cluster.controller_part import ControllerParts
from strom.cluster.election import NO_LEADER, ElectionType, hit_by_broker_failure
from strom.cluster.kafka_metadata import KafkaMetadataClient
from strom.cluster.leader_election import LeaderElections
from strom.cluster.log_dir_failures import LogDirFailures
from strom.cluster.log_ends import LogEnds
from strom.cluster.metadata_store import ControllerMovedError, MetadataStoreError
from strom.cluster.partition_machine import PartitionStateMachine
from strom.cluster.propagation import ControllerChannel, ControllerRequests
from strom.cluster.reassignment import Reassignments, in_flight
from strom.cluster.replica_state import ReplicaState
from strom.cluster.topic_changes import TopicChanges
from strom.cluster.topic_deletion import TopicDeletion
from strom.cluster.zk_paths import BrokerRegistration
from strom.protocol.errors import ErrorCode
from strom.protocol.messages import LeaderAndIsrResponsePartitionError

log = logging.getLogger(__name__)

__all__ = ["Controller", "ControllerChannel", "ControllerConfig", "TopicPartition"]

ZK_RETRY_DELAY_MS = 1000
ASK_AGAIN_MS = 5000  # how often unanswered log-end candidates get their LeaderAndIsr again


@dataclass(frozen=True, slots=True)
class ControllerConfig:
    auto_leader_rebalance: bool = True
    leader_imbalance_check_interval_s: float = 300.0
    unclean_leader_election_default: bool = False
    min_insync_replicas_default: int = 1
    reassignment_check_interval_s: float = 1.0
    #: Record the registrations taken in (``/strom/broker_epochs``); a cluster of one has no other
    #: replica to prefer over a bounced broker, and does not.
    record_broker_epochs: bool = True


Event = Callable[[], None]


class Controller:
    def __init__(
        self,
        zk: KafkaMetadataClient,
        broker_id: int,
        channel: ControllerChannel,
        config: ControllerConfig,
        clock: Clock,
    ) -> None:
        self.zk = zk
        self._clock = clock
        self.broker_id = broker_id
        self.channel = channel
        self.config = config
        self.active = False
        # False from a session expiry until the broker is registered again: no election before.
        self._standing = True
        self.ctx = ControllerContext(broker_id)
        self.requests = ControllerRequests(self.ctx, channel)
        self.partitions = PartitionStateMachine(
            self.ctx, zk, config.unclean_leader_election_default, config.min_insync_replicas_default
        )
        self.elections = LeaderElections(self.ctx, self.partitions, self.requests)
        parts = ControllerParts(
            self.ctx, zk, self.partitions, self.requests, self.enqueue, lambda: self.active
        )
        self.topics = TopicChanges(parts)
        self.reassignments = Reassignments(parts, self.topics.load_topic)
        self.deletion = TopicDeletion(parts)
        self.shutdowns = ControlledShutdown(self.ctx, self.partitions, self.requests)
        self.log_dir_failures = LogDirFailures(parts)
        self.log_ends = LogEnds(parts)
        self._queue: asyncio.Queue[Event] = asyncio.Queue()
        self._tasks: list[asyncio.Task[None]] = []
        self._active_tasks: list[asyncio.Task[None]] = []

    @property
    def epoch(self) -> int:
        return self.ctx.epoch

    # life cycle ------------------------------------------------------------------------------------
    def start(self) -> None:
        self._tasks.append(asyncio.create_task(self._run()))
        self.enqueue(self.elect)

    async def stop(self) -> None:
        self._resign()
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks.clear()

    def enqueue(self, event: Event) -> None:
        self._queue.put_nowait(event)

    async def call(self, fn: Callable[[], Any]) -> Any:
        """Run ``fn`` as a controller event and return its result (for API handlers)."""
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()

        def event() -> None:
            try:
                result = fn()
            except Exception as exc:
                if not fut.done():
                    fut.set_exception(exc)
                raise
            if not fut.done():
                fut.set_result(result)

        self.enqueue(event)
        return await fut

    async def _run(self) -> None:
        while True:
            self.run_now(await self._queue.get())

    def run_now(self, event: Event) -> None:
        """Run an event at once instead of queueing it (a cluster of one, whose admin requests wait for
        their effect); events are synchronous, so it cannot interleave with a queued one."""
        try:
            event()
        except ControllerMovedError:
            log.warning("controller %d: fenced by a newer controller epoch; resigning", self.broker_id)
            self._resign()
            self.enqueue(self.elect)
        except MetadataStoreError as exc:
            log.warning("controller %d: ZooKeeper error (%s); will retry election", self.broker_id, exc)
            self._resign()
            self._clock.call_later(ZK_RETRY_DELAY_MS, lambda: self.enqueue(self.elect))
        except Exception:
            log.exception("controller %d: event failed", self.broker_id)

    # election --------------------------------------------------------------------------------------
    def elect(self) -> None:
        """Controller election event: become the controller if ``/controller`` is free, else watch it.

        After a ZooKeeper session expiry it waits for `stand` (the broker registered again)."""
        if not self._standing:
            return
        data = self.zk.watch_data(paths.CONTROLLER, lambda: self.enqueue(self.elect))
        if data is not None:
            current = paths.decode_controller(data)
            if current != self.broker_id and self.active:
                self._resign()
            if current != self.broker_id or self.active:
                return
            # Our own /controller (same session) but we resigned after a ZooKeeper error: nobody is acting
            # as controller. Give it up so that an election (ours or another broker's) can run.
            self.zk.resign_controller(self.broker_id)
            self.enqueue(self.elect)
            return
        won = self.zk.try_become_controller(self.broker_id)
        if won is None:
            self.zk.watch_data(paths.CONTROLLER, lambda: self.enqueue(self.elect))
            return
        self.ctx.epoch, self.ctx.epoch_zk_version = won
        log.info("broker %d is now the controller (epoch %d)", self.broker_id, self.ctx.epoch)
        self.active = True
        self._on_become_active()

    def session_expired(self) -> None:
        """Kafka's Expire: resign at once (``/controller`` went with the session) and stand for election
        only once the broker is registered again (`stand`): a controller its cluster does not see as
        a live broker would move its leaderships to replicas that may have restarted with less."""
        self._standing = False
        self._resign()

    def stand(self) -> None:
        """The broker registered under its new session: stand for controller again."""
        self._standing = True
        self.enqueue(self.elect)

    def _resign(self) -> None:
        self.partitions.configs.clear()
        if not self.active:
            return
        self.active = False
        for task in self._active_tasks:
            task.cancel()
        self._active_tasks.clear()
        self.zk.resign_controller(self.broker_id)
        self.ctx.clear()
        self.requests.reset()

    @contextlib.contextmanager
    def _timed(self, what: str) -> Iterator[None]:
        """Log where a controller event's time went (the metadata store it read and wrote, ZooKeeper or
        the local store; building requests); the fail-over benchmark (bench/cluster_failover_bench.py)
        reads these lines."""
        zk_before, built_before, started = self.zk.stats.copy(), self.requests.build_s, time.perf_counter()
        yield
        log.info(
            "controller timing %s: total %.3f s, %s, requests %.3f s",
            what,
            time.perf_counter() - started,
            self.zk.stats.since(zk_before).describe(),
            self.requests.build_s - built_before,
        )

    def _on_become_active(self) -> None:
        with self._timed("failover"):
            self._become_active()

    def _become_active(self) -> None:
        ctx = self.ctx
        self.requests.reset()
        # Watch first, then read: a broker registering in between fires the watch instead of being missed.
        self.zk.watch_children(paths.BROKER_IDS, lambda: self.enqueue(self._on_broker_change))
        registered = self.zk.get_brokers()
        # Brokers registered again since the last controller took them in: bounced (see above).
        recorded = self.zk.get_broker_epochs() if self.config.record_broker_epochs else None
        bounced = bounced_since(recorded, registered)
        ctx.last_epochs = dict(recorded or {})
        if bounced:
            log.info("controller: brokers %s registered again since the last controller", sorted(bounced))
        ctx.live = {b: registration for b, registration in registered.items() if b not in bounced}
        self.requests.set_brokers()
        self.topics.load_topics(self.topics.watch_topics())
        # Every state znode in one pipelined read; then the writes, batched: first leaders for
        # partitions that never had one, new leaders (or smaller ISRs) where brokers are gone.
        stored = self.partitions.initialize_all(ctx.all_partitions())
        self.partitions.handle_offline_all(
            [
                tp
                for tp, state in stored.items()
                if state is not None
                and (state.leader not in ctx.live or any(b not in ctx.live for b in state.isr))
            ],
            bounced=bounced,
        )
        if bounced:
            self._start_bounced(registered, bounced)
            ctx.replica_states.transition_all(ctx.replicas_on(bounced), ReplicaState.ONLINE, "broker started")
        self.partitions.bring_online_all([tp for tp, state in stored.items() if state is None])
        self.partitions.min_isr_changed(None)  # a change may have been missed while nobody controlled
        self._record_broker_epochs()
        self.requests.leader_and_isr(set(ctx.leadership), full=True)
        self.requests.update_metadata()
        self._on_isr_change()
        self.log_dir_failures.on_event()
        self._on_delete_topics()
        loop = asyncio.get_running_loop()
        self._active_tasks.append(loop.create_task(self._periodic_checks()))

    async def _periodic_checks(self) -> None:
        since_rebalance_ms = 0
        step_ms = round(self.config.reassignment_check_interval_s * 1000)
        rebalance_ms = round(self.config.leader_imbalance_check_interval_s * 1000)
        while True:
            await sleep_ms(self._clock, step_ms)
            since_rebalance_ms += step_ms
            self.enqueue(self._check_reassignments)
            if since_rebalance_ms % ASK_AGAIN_MS < step_ms:
                self.enqueue(self.log_ends.ask_again)
            if self.config.auto_leader_rebalance and since_rebalance_ms >= rebalance_ms:
                since_rebalance_ms = 0
                self.enqueue(self._auto_rebalance)

    # watch events ----------------------------------------------------------------------------------
    def _on_broker_change(self) -> None:
        if not self.active:
            return
        with self._timed("broker-change"):
            self._broker_change()

    def _broker_change(self) -> None:
        ctx = self.ctx
        self.zk.watch_children(paths.BROKER_IDS, lambda: self.enqueue(self._on_broker_change))
        current = self.zk.get_brokers()
        dead, new = broker_changes(ctx.live, current, ctx.last_epochs)
        renewed = renewed_since(ctx.live, current)
        ctx.shutting_down -= dead
        ctx.forget_offline_dirs(dead | new)  # gone, or a new process that loaded its log dirs again
        if dead or new:
            log.info(
                "controller: brokers now %s (dead %s, new %s)", sorted(current), sorted(dead), sorted(new)
            )
        if renewed:
            log.info("controller: brokers %s registered again in the same process", sorted(renewed))
        # The failures first, decided without every dead broker, a bounced one included.
        ctx.live = {b: registration for b, registration in current.items() if b not in dead}
        self.requests.set_brokers()
        ctx.replica_states.transition_all(ctx.replicas_on(dead), ReplicaState.OFFLINE, "broker failure")
        everything = ctx.all_partitions()
        changed = self.partitions.handle_offline_all(
            [
                tp
                for tp in everything
                if tp in ctx.leadership and hit_by_broker_failure(ctx.leadership[tp], dead)
            ],
            bounced=dead & new,
        )
        if dead & new:
            changed |= self._start_bounced(current, dead & new)
        changed |= self.partitions.bring_online_all([tp for tp in everything if tp not in ctx.leadership])
        if dead or new or renewed:
            self._record_broker_epochs()
        self.requests.update_metadata()
        if changed:
            self.requests.leader_and_isr(changed)
        if new:
            ctx.replica_states.transition_all(ctx.replicas_on(new), ReplicaState.ONLINE, "broker started")
        if new or renewed:  # everything they replicate; a renewed one: under its new broker epoch
            hosted = {tp for tp in ctx.all_partitions() if any(b in new | renewed for b in ctx.replicas(tp))}
            self.requests.leader_and_isr(hosted, full=True, to=new | renewed)

    def _record_broker_epochs(self) -> None:
        self.ctx.take_in_epochs()  # dead brokers' last too: a renewal after a takeover is one
        if self.config.record_broker_epochs:
            self.zk.set_broker_epochs(dict(self.ctx.last_epochs), self.ctx.epoch_zk_version)

    def _start_bounced(
        self, registered: dict[int, BrokerRegistration], bounced: set[int]
    ) -> set[TopicPartition]:
        """Bounced brokers live again after their failure was decided: their replicas come back
        (OFFLINE -> ONLINE later, with their LeaderAndIsr), and a partition nobody else could lead
        may elect one of them (as its last ISR member, Kafka's rule); returns the partitions changed."""
        ctx = self.ctx
        ctx.live = dict(registered)
        self.requests.set_brokers()
        return self.partitions.handle_offline_all(
            [
                tp
                for tp in ctx.all_partitions()
                if tp in ctx.leadership and ctx.leadership[tp].leader == NO_LEADER
            ],
            bounced=bounced,
        )

    def on_topic_change(self) -> None:
        """The topic list changed (the watch's event; a cluster of one runs it at once)."""
        self.topics.on_topic_change()

    def on_topic_modified(self, topic: str) -> None:
        self.topics.on_topic_modified(topic)

    def on_config_change(self, topic: str | None) -> None:
        """A config change notification named ``topic`` (None: not a topic's; enqueue it)."""
        self.topics.on_config_change(topic)

    def on_delete_topics(self) -> None:
        self._on_delete_topics()

    def on_leader_and_isr_response(
        self, broker: int, broker_epoch: int, answers: list[LeaderAndIsrResponsePartitionError]
    ) -> None:
        """A broker's LeaderAndIsr answer (from the channel): failed log dirs, and where leaderless
        partitions' logs end."""
        self.log_dir_failures.on_leader_and_isr_response(broker, broker_epoch, answers)
        self.log_ends.on_answer(broker, broker_epoch, answers)

    def _on_isr_change(self) -> None:
        if not self.active:
            return
        children = self.zk.watch_children(
            paths.ISR_CHANGE_NOTIFICATION, lambda: self.enqueue(self._on_isr_change)
        )
        if not children:
            return
        changed = self.zk.read_and_delete_isr_changes(children)
        self.partitions.refresh_all(sorted(tp for tp in changed if tp[0] in self.ctx.assignments))
        self.reassignments.check()
        self.requests.update_metadata()

    def _on_delete_topics(self) -> None:
        if not self.active:
            return
        doomed = self.zk.watch_children(paths.DELETE_TOPICS, lambda: self.enqueue(self._on_delete_topics))
        for topic in doomed:
            self.deletion.delete(topic)
        if doomed:
            self.requests.update_metadata()

    def _check_reassignments(self) -> None:
        if self.active:
            self.reassignments.check()

    def _auto_rebalance(self) -> None:
        if self.active:
            self.elections.auto_rebalance()

    # requests from brokers and admin clients (run them through `call`) -----------------------------
    def elect_leaders(
        self, election_type: int, partitions: list[TopicPartition] | None
    ) -> dict[TopicPartition, tuple[ErrorCode, str | None]]:
        """ElectLeaders (preferred or unclean); per-partition outcome."""
        kind = ElectionType.UNCLEAN if election_type == ElectionType.UNCLEAN else ElectionType.PREFERRED
        return self.elections.elect_leaders(kind, partitions)

    def controlled_shutdown(self, broker_id: int) -> list[TopicPartition]:
        """Move leadership off a stopping broker and take it out of ISRs; returns what it still leads."""
        return self.shutdowns.shutdown(broker_id)

    def reassign(
        self, targets: dict[TopicPartition, list[int] | None]
    ) -> dict[TopicPartition, tuple[ErrorCode, str | None]]:
        """AlterPartitionReassignments: start or cancel moves; per-partition outcome."""
        return self.reassignments.reassign(targets)

    def list_reassignments(self) -> dict[TopicPartition, tuple[list[int], list[int], list[int]]]:
        """ListPartitionReassignments: (replicas, adding, removing) of every move in flight."""
        return in_flight(self.ctx.assignments)
