"""The controller: one broker, elected through ZooKeeper, that decides leaders and ISRs for the cluster.

Theory of operation (Kafka's ZooKeeper-mode ``KafkaController``, reduced to what Strom needs):

* **Election.** Every broker watches ``/controller``. When it is absent a broker tries to create it
  (ephemeral, so it vanishes with the winner's session); the winner increments ``/controller_epoch``
  by a conditional write and becomes active with that epoch. Every later ZooKeeper write of the
  controller runs in a transaction that checks the epoch znode's version, and every request it sends
  carries the epoch, which brokers use to ignore a deposed controller (STALE_CONTROLLER_EPOCH).
* **One event queue, one consumer.** Watches (brokers, topics, each topic's assignment, ISR change
  notifications, deletions) and API calls (ElectLeaders, reassignments, ControlledShutdown) only
  enqueue events; one task processes them in order, so decisions never interleave.
* **Decisions** are the pure functions of `strom.cluster.election`; their results are written to the
  partition state znodes by conditional writes (a conflict re-reads the znode and decides again), then
  pushed to brokers: LeaderAndIsr to each affected replica, then the full UpdateMetadata to every live
  broker. Requests go through a `ControllerChannel` (implemented by the broker over the Kafka protocol),
  which delivers them in order per broker.
* **Broker failure**: partitions it led get a new leader from the live ISR (unclean election only where
  the topic enables it); it leaves every ISR it was in; the leader epoch moves on in both cases.
  **Broker start**: it gets the full metadata and LeaderAndIsr for every partition it replicates;
  offline partitions it can lead come back. **Auto rebalance** moves leadership back to the preferred
  (first) replica when it is alive and in the ISR.
* **Reassignment** (KIP-455 shape): the assignment znode lists target + original replicas with
  ``adding_replicas``/``removing_replicas``; new replicas start fetching, and only when every target
  replica is in the ISR does the controller elect a leader among the targets (if needed), shrink the
  replica set and ISR to the targets, and stop and delete the removed replicas.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from strom.cluster import election
from strom.cluster import zk_paths as paths
from strom.cluster.election import LeaderAndIsr
from strom.cluster.zk import ControllerMovedError, KafkaZkClient, ZkError
from strom.cluster.zk_paths import BrokerRegistration, TopicAssignment
from strom.protocol.errors import ErrorCode

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]
LEADER_AND_ISR, STOP_REPLICA, UPDATE_METADATA = 4, 5, 6
ELECTION_PREFERRED, ELECTION_UNCLEAN = 0, 1


class ControllerChannel(Protocol):
    """How the controller reaches brokers (the broker layer implements it over the Kafka protocol)."""

    def set_brokers(self, brokers: dict[int, BrokerRegistration]) -> None: ...

    def send(self, broker_id: int, api_key: int, body: dict[str, Any]) -> None: ...


@dataclass(frozen=True, slots=True)
class ControllerConfig:
    auto_leader_rebalance: bool = True
    leader_imbalance_check_interval_s: float = 300.0
    unclean_leader_election_default: bool = False
    reassignment_check_interval_s: float = 1.0


Event = Callable[[], None]


class Controller:
    def __init__(
        self, zk: KafkaZkClient, broker_id: int, channel: ControllerChannel, config: ControllerConfig
    ) -> None:
        self.zk = zk
        self.broker_id = broker_id
        self.channel = channel
        self.config = config
        self.epoch = -1
        self._epoch_zk_version = -1
        self.active = False
        self.live: dict[int, BrokerRegistration] = {}
        self.assignments: dict[str, TopicAssignment] = {}
        self._assignment_versions: dict[str, int] = {}
        self.states: dict[TopicPartition, LeaderAndIsr] = {}
        self.shutting_down: set[int] = set()
        self._queue: asyncio.Queue[Event] = asyncio.Queue()
        self._tasks: list[asyncio.Task[None]] = []
        self._active_tasks: list[asyncio.Task[None]] = []

    # life cycle ------------------------------------------------------------------------------------
    def start(self) -> None:
        self._tasks.append(asyncio.create_task(self._run()))
        self.enqueue(self._elect)

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
            event = await self._queue.get()
            try:
                event()
            except ControllerMovedError:
                log.warning("controller %d: fenced by a newer controller epoch; resigning", self.broker_id)
                self._resign()
                self.enqueue(self._elect)
            except ZkError as exc:
                log.warning("controller %d: ZooKeeper error (%s); will retry election", self.broker_id, exc)
                self._resign()
                asyncio.get_running_loop().call_later(1.0, self.enqueue, self._elect)
            except Exception:
                log.exception("controller %d: event failed", self.broker_id)

    # election --------------------------------------------------------------------------------------
    def _elect(self) -> None:
        current = self.zk.get_controller_id()
        data = self.zk.watch_data(paths.CONTROLLER, lambda: self.enqueue(self._elect))
        if data is not None:
            current = paths.decode_controller(data)
            if current != self.broker_id and self.active:
                self._resign()
            return
        won = self.zk.try_become_controller(self.broker_id)
        if won is None:
            self.zk.watch_data(paths.CONTROLLER, lambda: self.enqueue(self._elect))
            return
        self.epoch, self._epoch_zk_version = won
        log.info("broker %d is now the controller (epoch %d)", self.broker_id, self.epoch)
        self.active = True
        self._on_become_active()

    def _resign(self) -> None:
        if not self.active:
            return
        self.active = False
        for task in self._active_tasks:
            task.cancel()
        self._active_tasks.clear()
        self.zk.resign_controller(self.broker_id)
        self.live.clear()
        self.assignments.clear()
        self.states.clear()

    def _on_become_active(self) -> None:
        self.live = self.zk.get_brokers()
        self.zk.watch_children(paths.BROKER_IDS, lambda: self.enqueue(self._on_broker_change))
        self.channel.set_brokers(self.live)
        for topic in self.zk.watch_children(paths.BROKER_TOPICS, lambda: self.enqueue(self._on_topic_change)):
            self._load_topic(topic)
        changed: set[TopicPartition] = set()
        for tp in self._all_partitions():
            state = self.zk.get_partition_state(*tp)
            if state is None:
                if self._init_partition(tp):
                    changed.add(tp)
                continue
            self.states[tp] = state
            if state.leader not in self.live or any(b not in self.live for b in state.isr):
                self._handle_offline(tp)
        self._send_leader_and_isr(set(self.states), full=True)
        self._send_update_metadata()
        self._on_isr_change()
        self._on_delete_topics()
        loop = asyncio.get_running_loop()
        self._active_tasks.append(loop.create_task(self._periodic_checks()))

    async def _periodic_checks(self) -> None:
        since_rebalance = 0.0
        step = self.config.reassignment_check_interval_s
        while True:
            await asyncio.sleep(step)
            since_rebalance += step
            self.enqueue(self._check_reassignments)
            if (
                self.config.auto_leader_rebalance
                and since_rebalance >= self.config.leader_imbalance_check_interval_s
            ):
                since_rebalance = 0.0
                self.enqueue(self._auto_rebalance)

    # cached view helpers ---------------------------------------------------------------------------
    def _all_partitions(self) -> list[TopicPartition]:
        return [(t, p) for t, a in sorted(self.assignments.items()) for p in sorted(a.partitions)]

    def replicas(self, tp: TopicPartition) -> list[int]:
        assignment = self.assignments.get(tp[0])
        return list(assignment.partitions.get(tp[1], [])) if assignment else []

    def _load_topic(self, topic: str) -> TopicAssignment | None:
        found = self.zk.get_topic_assignment(topic)
        self.zk.watch_data(
            paths.topic_path(topic), lambda: self.enqueue(lambda: self._on_topic_modified(topic))
        )
        if found is None:
            return None
        self.assignments[topic], self._assignment_versions[topic] = found
        return found[0]

    def _unclean_allowed(self, topic: str) -> bool:
        value = self.zk.get_topic_config(topic).get("unclean.leader.election.enable")
        if value is None:
            return self.config.unclean_leader_election_default
        return value.strip().lower() == "true"

    # state writes ----------------------------------------------------------------------------------
    def _write_state(self, tp: TopicPartition, new: LeaderAndIsr) -> bool:
        stored = self.zk.update_partition_state(tp[0], tp[1], new, self._epoch_zk_version)
        if stored is None:
            fresh = self.zk.get_partition_state(*tp)
            if fresh is not None:
                self.states[tp] = fresh
            return False
        self.states[tp] = stored
        return True

    def _decide_and_write(
        self, tp: TopicPartition, decide: Callable[[LeaderAndIsr], tuple[int, list[int]] | None]
    ) -> bool:
        """Apply an election decision with conditional writes, deciding again after a conflict."""
        for _ in range(5):
            current = self.states.get(tp)
            if current is None:
                return False
            decision = decide(current)
            if decision is None:
                return False
            leader, isr = decision
            if leader == current.leader and tuple(isr) == current.isr:
                return False
            if self._write_state(tp, current.elected(leader, isr, self.epoch)):
                log.info(
                    "controller: %s-%d leader %d epoch %d isr %s",
                    tp[0],
                    tp[1],
                    leader,
                    current.leader_epoch + 1,
                    isr,
                )
                return True
        return False

    def _init_partition(self, tp: TopicPartition) -> bool:
        live_replicas = [b for b in self.replicas(tp) if b in self.live]
        if not live_replicas:
            return False
        state = LeaderAndIsr(live_replicas[0], 0, tuple(live_replicas), self.epoch)
        stored = self.zk.create_partition_state(tp[0], tp[1], state, self._epoch_zk_version)
        if stored is None:
            stored = self.zk.get_partition_state(*tp)
        if stored is None:
            return False
        self.states[tp] = stored
        return True

    def _handle_offline(self, tp: TopicPartition) -> bool:
        """New leader if the current one is gone; dead brokers leave the ISR either way."""
        replicas = self.replicas(tp)
        live = set(self.live)

        def decide(current: LeaderAndIsr) -> tuple[int, list[int]] | None:
            if current.leader in live and current.leader not in self.shutting_down:
                isr = [b for b in current.isr if b in live]
                return (current.leader, isr) if isr else None
            result = election.offline_leader(
                replicas, current.isr, live - self.shutting_down, self._unclean_allowed(tp[0])
            )
            if result is None and current.leader != election.NO_LEADER:
                # Offline: keep the last ISR (so a returning member can lead again), no leader.
                return election.NO_LEADER, list(current.isr)
            return result

        return self._decide_and_write(tp, decide)

    # requests to brokers ---------------------------------------------------------------------------
    def _partition_state_entry(self, tp: TopicPartition, state: LeaderAndIsr) -> dict[str, Any]:
        assignment = self.assignments[tp[0]]
        return {
            "topic_name": tp[0],
            "topic_id": assignment.topic_id,
            "partition_index": tp[1],
            "controller_epoch": state.controller_epoch,
            "leader": state.leader,
            "leader_epoch": state.leader_epoch,
            "isr": list(state.isr),
            "zk_version": state.zk_version,
            "replicas": self.replicas(tp),
            "adding_replicas": assignment.adding_replicas.get(tp[1], []),
            "removing_replicas": assignment.removing_replicas.get(tp[1], []),
            "is_new": False,
        }

    def _send_leader_and_isr(
        self, tps: set[TopicPartition], full: bool = False, to: set[int] | None = None
    ) -> None:
        per_broker: dict[int, list[dict[str, Any]]] = {}
        for tp in sorted(tps):
            state = self.states.get(tp)
            if state is None or tp[0] not in self.assignments:
                continue
            entry = self._partition_state_entry(tp, state)
            for replica in self.replicas(tp):
                if replica in self.live and (to is None or replica in to):
                    per_broker.setdefault(replica, []).append(entry)
        targets = set(self.live) if full else set(per_broker)
        for broker_id in sorted(targets):
            if to is not None and broker_id not in to:
                continue
            self.channel.send(
                broker_id,
                LEADER_AND_ISR,
                {
                    "controller_id": self.broker_id,
                    "controller_epoch": self.epoch,
                    "partition_states": per_broker.get(broker_id, []),
                    "live_leaders": [
                        {"broker_id": b.broker_id, "host_name": b.host, "port": b.port}
                        for b in self.live.values()
                    ],
                },
            )

    def update_metadata_body(self) -> dict[str, Any]:
        topics = []
        for topic, assignment in sorted(self.assignments.items()):
            parts = []
            for p in sorted(assignment.partitions):
                state = self.states.get((topic, p)) or LeaderAndIsr(-1, -1, ())
                replicas = assignment.partitions[p]
                parts.append(
                    {
                        "partition_index": p,
                        "controller_epoch": state.controller_epoch,
                        "leader": state.leader,
                        "leader_epoch": state.leader_epoch,
                        "isr": list(state.isr),
                        "zk_version": state.zk_version,
                        "replicas": replicas,
                        "offline_replicas": [b for b in replicas if b not in self.live],
                    }
                )
            topics.append({"topic_name": topic, "topic_id": assignment.topic_id, "partition_states": parts})
        return {
            "controller_id": self.broker_id,
            "controller_epoch": self.epoch,
            "topics": topics,
            "live_brokers": [
                {"id": b.broker_id, "host": b.host, "port": b.port, "rack": b.rack}
                for _, b in sorted(self.live.items())
            ],
        }

    def _send_update_metadata(self) -> None:
        body = self.update_metadata_body()
        for broker_id in sorted(self.live):
            self.channel.send(broker_id, UPDATE_METADATA, body)

    def _send_stop_replica(self, broker_id: int, tps: list[TopicPartition], delete: bool) -> None:
        if broker_id not in self.live or not tps:
            return
        self.channel.send(
            broker_id,
            STOP_REPLICA,
            {
                "controller_id": self.broker_id,
                "controller_epoch": self.epoch,
                "delete_partitions": delete,
                "partitions": [{"topic_name": t, "partition_index": p} for t, p in tps],
            },
        )

    # watch events ----------------------------------------------------------------------------------
    def _on_broker_change(self) -> None:
        if not self.active:
            return
        self.zk.watch_children(paths.BROKER_IDS, lambda: self.enqueue(self._on_broker_change))
        current = self.zk.get_brokers()
        dead = {b for b in self.live if b not in current or current[b].epoch != self.live[b].epoch}
        new = {b for b in current if b not in self.live or b in dead}
        self.live = current
        self.shutting_down -= dead
        self.channel.set_brokers(current)
        if dead or new:
            log.info(
                "controller: brokers now %s (dead %s, new %s)", sorted(current), sorted(dead), sorted(new)
            )
        changed: set[TopicPartition] = set()
        for tp in self._all_partitions():
            state = self.states.get(tp)
            if state is None:
                if self._init_partition(tp):
                    changed.add(tp)
                continue
            if (
                state.leader in dead
                or state.leader == election.NO_LEADER
                or any(b in dead for b in state.isr)
            ) and self._handle_offline(tp):
                changed.add(tp)
        self._send_update_metadata()
        if changed:
            self._send_leader_and_isr(changed)
        if new:
            bounced = {tp for tp in self._all_partitions() if any(b in new for b in self.replicas(tp))}
            self._send_leader_and_isr(bounced, full=True, to=new)

    def _on_topic_change(self) -> None:
        if not self.active:
            return
        topics = self.zk.watch_children(paths.BROKER_TOPICS, lambda: self.enqueue(self._on_topic_change))
        added = [t for t in topics if t not in self.assignments]
        for topic in set(self.assignments) - set(topics):
            self._forget_topic(topic)
        changed: set[TopicPartition] = set()
        for topic in added:
            assignment = self._load_topic(topic)
            if assignment is None:
                continue
            for p in sorted(assignment.partitions):
                if self._init_partition((topic, p)):
                    changed.add((topic, p))
        if added:
            log.info("controller: new topics %s", added)
            self._send_update_metadata()
            self._send_leader_and_isr(changed)
            self._send_update_metadata()

    def _on_topic_modified(self, topic: str) -> None:
        if not self.active or topic not in self.assignments:
            return
        before = set(self.assignments[topic].partitions)
        assignment = self._load_topic(topic)
        if assignment is None:
            return
        changed = set()
        for p in sorted(set(assignment.partitions) - before):
            if self._init_partition((topic, p)):
                changed.add((topic, p))
        if changed:
            log.info("controller: %s now has %d partitions", topic, len(assignment.partitions))
            self._send_leader_and_isr(changed)
            self._send_update_metadata()

    def _forget_topic(self, topic: str) -> None:
        assignment = self.assignments.pop(topic, None)
        self._assignment_versions.pop(topic, None)
        if assignment is not None:
            for p in assignment.partitions:
                self.states.pop((topic, p), None)

    def _on_isr_change(self) -> None:
        if not self.active:
            return
        children = self.zk.watch_children(
            paths.ISR_CHANGE_NOTIFICATION, lambda: self.enqueue(self._on_isr_change)
        )
        if not children:
            return
        for tp in self.zk.read_and_delete_isr_changes(children):
            if tp[0] in self.assignments:
                fresh = self.zk.get_partition_state(*tp)
                if fresh is not None:
                    self.states[tp] = fresh
        self._check_reassignments()
        self._send_update_metadata()

    def _on_delete_topics(self) -> None:
        if not self.active:
            return
        doomed = self.zk.watch_children(paths.DELETE_TOPICS, lambda: self.enqueue(self._on_delete_topics))
        for topic in doomed:
            assignment = self.assignments.get(topic)
            if assignment is not None:
                per_broker: dict[int, list[TopicPartition]] = {}
                for p, replicas in assignment.partitions.items():
                    for b in set(replicas) | set(assignment.adding_replicas.get(p, [])):
                        per_broker.setdefault(b, []).append((topic, p))
                for broker_id, tps in per_broker.items():
                    self._send_stop_replica(broker_id, tps, delete=True)
            self._forget_topic(topic)
            self.zk.delete_topic_znodes(topic)
            log.info("controller: deleted topic %s", topic)
        if doomed:
            self._send_update_metadata()

    # elections on demand ---------------------------------------------------------------------------
    def elect_leaders(
        self, election_type: int, partitions: list[TopicPartition] | None
    ) -> dict[TopicPartition, tuple[ErrorCode, str | None]]:
        """ElectLeaders (preferred or unclean); per-partition outcome."""
        results: dict[TopicPartition, tuple[ErrorCode, str | None]] = {}
        changed: set[TopicPartition] = set()
        live = set(self.live) - self.shutting_down
        for tp in partitions if partitions is not None else self._all_partitions():
            state = self.states.get(tp)
            replicas = self.replicas(tp)
            if state is None or not replicas:
                results[tp] = (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, None)
                continue
            if election_type == ELECTION_UNCLEAN:
                if state.leader in live:
                    results[tp] = (ErrorCode.ELECTION_NOT_NEEDED, None)
                    continue

                def unclean(cur: LeaderAndIsr, r: list[int] = replicas) -> tuple[int, list[int]] | None:
                    return election.offline_leader(r, cur.isr, live, unclean_allowed=True)

                ok = self._decide_and_write(tp, unclean)
            else:
                if state.leader == replicas[0]:
                    results[tp] = (ErrorCode.ELECTION_NOT_NEEDED, None)
                    continue

                def preferred(cur: LeaderAndIsr, r: list[int] = replicas) -> tuple[int, list[int]] | None:
                    return election.preferred_leader(r, cur.isr, live)

                ok = self._decide_and_write(tp, preferred)
            if ok:
                changed.add(tp)
                results[tp] = (ErrorCode.NONE, None)
            elif election_type == ELECTION_UNCLEAN:
                results[tp] = (ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE, "no live replica")
            else:
                results[tp] = (
                    ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE,
                    f"preferred replica {replicas[0]} is not alive and in the ISR",
                )
        if changed:
            self._send_leader_and_isr(changed)
            self._send_update_metadata()
        return results

    def _auto_rebalance(self) -> None:
        if not self.active:
            return
        imbalanced = [
            tp
            for tp in self._all_partitions()
            if (s := self.states.get(tp)) is not None
            and self.replicas(tp)
            and s.leader != self.replicas(tp)[0]
            and self.replicas(tp)[0] in s.isr
            and self.replicas(tp)[0] in self.live
            and not self.assignments[tp[0]].adding_replicas.get(tp[1])
        ]
        if imbalanced:
            log.info("controller: auto rebalance moves %d leader(s) back to preferred", len(imbalanced))
            self.elect_leaders(ELECTION_PREFERRED, imbalanced)

    def controlled_shutdown(self, broker_id: int) -> list[TopicPartition]:
        """Move leadership off a stopping broker and take it out of ISRs; returns what it still leads."""
        self.shutting_down.add(broker_id)
        live = set(self.live)
        changed: set[TopicPartition] = set()
        stopped: list[TopicPartition] = []
        for tp in self._all_partitions():
            state = self.states.get(tp)
            replicas = self.replicas(tp)
            if state is None or broker_id not in replicas:
                continue
            if state.leader == broker_id:

                def decide(cur: LeaderAndIsr, r: list[int] = replicas) -> tuple[int, list[int]] | None:
                    return election.controlled_shutdown_leader(r, cur.isr, live, self.shutting_down)

                if self._decide_and_write(tp, decide):
                    changed.add(tp)
            elif broker_id in state.isr:

                def shrink(cur: LeaderAndIsr) -> tuple[int, list[int]] | None:
                    isr = election.shrink_isr(cur.isr, {broker_id})
                    return (cur.leader, isr) if isr else None

                if self._decide_and_write(tp, shrink):
                    changed.add(tp)
                stopped.append(tp)
        if changed:
            self._send_leader_and_isr(changed)
            self._send_update_metadata()
        self._send_stop_replica(broker_id, stopped, delete=False)
        return [tp for tp in self._all_partitions() if (s := self.states.get(tp)) and s.leader == broker_id]

    # reassignment ----------------------------------------------------------------------------------
    def reassign(
        self, targets: dict[TopicPartition, list[int] | None]
    ) -> dict[TopicPartition, tuple[ErrorCode, str | None]]:
        results: dict[TopicPartition, tuple[ErrorCode, str | None]] = {}
        changed: set[TopicPartition] = set()
        for tp, requested in targets.items():
            assignment = self.assignments.get(tp[0])
            if assignment is None or tp[1] not in assignment.partitions:
                results[tp] = (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, None)
                continue
            adding = assignment.adding_replicas.get(tp[1], [])
            removing = assignment.removing_replicas.get(tp[1], [])
            current = assignment.partitions[tp[1]]
            if requested is None and not adding and not removing:  # nothing to cancel
                results[tp] = (ErrorCode.NO_REASSIGNMENT_IN_PROGRESS, None)
                continue
            target = requested if requested is not None else [b for b in current if b not in adding]
            if not target or len(set(target)) != len(target) or any(b not in self.live for b in target):
                results[tp] = (
                    ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                    f"replicas {target} are not all live brokers",
                )
                continue
            original = [b for b in current if b not in adding]
            if target == original:
                assignment.adding_replicas.pop(tp[1], None)
                assignment.removing_replicas.pop(tp[1], None)
                assignment.partitions[tp[1]] = original
            else:
                assignment.partitions[tp[1]] = list(target) + [b for b in original if b not in target]
                assignment.adding_replicas[tp[1]] = [b for b in target if b not in original]
                assignment.removing_replicas[tp[1]] = [b for b in original if b not in target]
            if not self._write_assignment(tp[0]):
                results[tp] = (ErrorCode.REQUEST_TIMED_OUT, "assignment changed concurrently; retry")
                continue
            results[tp] = (ErrorCode.NONE, None)
            changed.add(tp)
        if changed:
            self._send_leader_and_isr(changed)
            self._send_update_metadata()
            self._check_reassignments()
        return results

    def _write_assignment(self, topic: str) -> bool:
        version = self.zk.set_topic_assignment(
            topic, self.assignments[topic], self._assignment_versions[topic]
        )
        if version is None:
            self._load_topic(topic)
            return False
        self._assignment_versions[topic] = version
        return True

    def list_reassignments(self) -> dict[TopicPartition, tuple[list[int], list[int], list[int]]]:
        found = {}
        for topic, a in self.assignments.items():
            for p in set(a.adding_replicas) | set(a.removing_replicas):
                found[(topic, p)] = (
                    list(a.partitions[p]),
                    a.adding_replicas.get(p, []),
                    a.removing_replicas.get(p, []),
                )
        return found

    def _check_reassignments(self) -> None:
        if not self.active:
            return
        live = set(self.live)
        for (topic, p), (replicas, _adding, removing) in self.list_reassignments().items():
            tp = (topic, p)
            state = self.states.get(tp)
            target = [b for b in replicas if b not in removing]
            if state is None or any(b not in state.isr for b in target):
                continue

            def decide(cur: LeaderAndIsr, t: list[int] = target) -> tuple[int, list[int]] | None:
                isr = [b for b in cur.isr if b in t]
                if cur.leader in t:
                    return cur.leader, isr
                chosen = election.reassignment_leader(t, cur.isr, live)
                return None if chosen is None else (chosen[0], isr)

            self._decide_and_write(tp, decide)
            assignment = self.assignments[topic]
            assignment.partitions[p] = target
            assignment.adding_replicas.pop(p, None)
            assignment.removing_replicas.pop(p, None)
            if not self._write_assignment(topic):
                continue
            log.info(
                "controller: reassignment of %s-%d complete: %s (removed %s)", topic, p, target, removing
            )
            self._send_leader_and_isr({tp})
            for b in removing:
                self._send_stop_replica(b, [tp], delete=True)
            self._send_update_metadata()
