"""A simulated Strom cluster: brokers, their controller and the metadata store on one simulated loop.

Each broker is a real `Broker` with its `KafkaServer`, built as the in-process cluster harness builds
it, but on a `SimulatedLoop` and a `SimNetwork`: it listens on its own simulated address
(``10.0.0.<id+1>:9092``), its clock is a `SimClock` on the loop's time, and its metadata-store session
is a session of the world's one `LocalStore` whose watches run in the broker's own context. Its code
runs with `CURRENT_HOST` set to its address, so its connections come from that address and the loop
knows its tasks. Log directories are real directories under the world's base directory, each the
root of one machine's simulated disk (`strom.sim.disk`): the real files are the page cache, so a
process crash keeps every write, and the disk remembers what was synced, so a machine crash does not.

Faults the world can inflict (the nemesis picks them):

* `crash` / `restart`: a process crash ends the broker's tasks where they wait and resets its
  connections; its session is not closed, so it expires only after the session timeout, as a killed
  ZooKeeper client's does. A restart opens the same log directories with a new session.
* `crash_machine`: a process crash, then a power loss of its disk: what was never synced is lost,
  page by page, possibly torn. A restart recovers the log from what the disk kept.
* `pause` / `unpause`: the broker's code stops (as SIGSTOP: its callbacks are held by the loop) and its
  metadata-store session hears nothing, so the store expires it past the session timeout.
* `disk_error`: the broker's disk fails writes with ENOSPC, or writes and syncs with EIO, until cleared.
  A sync that fails in a broker's last online log dir halts it (`strom.storage.log_dirs`): the world
  is the halt port for the run (`halt`, through `strom._util.halt.use`), and turns it into a process
  crash of that machine; `halted` tells the nemesis, which restarts it once the disk works again.
* `slow_disk`: each write blocks the broker for a while (each sync ten times as long): its code stops,
  as a thread stuck in the kernel stops, while the other machines run on.
* `partition` / `heal`: between brokers (and clients), through the network.
* `expire_session`: the metadata store ends a broker's session (it reconnects with a new one).
* `jump_clock`: one broker's wall clock steps.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import random
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn, TypeVar

from strom._util.halt import Halted
from strom.broker.broker import Broker
from strom.broker.config import BrokerConfig
from strom.broker.main import serve_plaintext
from strom.broker.network.server import KafkaServer
from strom.cluster import zk_paths as paths
from strom.cluster.local_store import LocalSession, LocalStore
from strom.cluster.zk_paths import PartitionStateDoc, TopicAssignment
from strom.sim.clock import SimClock
from strom.sim.disk import SimDisk, SimFileSystem
from strom.sim.loop import SimulatedLoop
from strom.sim.network import CURRENT_HOST, SimNetwork

__all__ = ["SimBroker", "SimWorld", "host_of"]

log = logging.getLogger(__name__)
_T = TypeVar("_T")

PORT = 9092

#: Settings that keep a simulated cluster small and its timeouts short (overridable).
DEFAULTS = {
    # One partition each: every coordinator still moves with its leader, and each replica fetch
    # carries fewer partitions (the simulation's time goes mostly into requests).
    "offsets.topic.num.partitions": "1",
    "transaction.state.log.num.partitions": "1",
    "group.initial.rebalance.delay.ms": "0",
    "auto.leader.rebalance.enable": "false",
    "zookeeper.session.timeout.ms": "6000",
    "replica.lag.time.max.ms": "10000",
    # Kafka's promise (an acknowledged write survives the loss of one machine) holds with RF 3 and two
    # replicas in sync: the internal topics (group offsets, transactions) get that too.
    "min.insync.replicas": "2",
    # Segments of 16 KiB: a partition rolls every few simulated seconds, so rolls (their fsyncs, their
    # producer snapshots, new files whose names only their directory's fsync makes durable) happen
    # while the faults run.
    "log.segment.bytes": "16384",
}


def host_of(broker_id: int) -> str:
    return f"10.0.0.{broker_id + 1}"


class _OwnedSession(LocalSession):
    """A local-store session whose watches and state events run in its broker's context."""

    def __init__(self, store: LocalStore, loop: asyncio.AbstractEventLoop, session_id: int) -> None:
        super().__init__(store, loop, session_id)
        self._context = contextvars.copy_context()
        self.muted = False  # the owning process crashed: nothing of it may run any more

    def _post(self, callback: Callable[..., None], *args: object) -> None:
        if not self._loop.is_closed() and not self.muted:
            self._loop.call_soon(callback, *args, context=self._context)


@dataclass(slots=True)
class SimBroker:
    broker_id: int
    broker: Broker
    server: KafkaServer
    session: _OwnedSession
    clock: SimClock

    @property
    def host(self) -> str:
        return host_of(self.broker_id)


def _forget_outcome(task: asyncio.Task[Any]) -> None:
    if not task.cancelled():
        task.exception()


class SimWorld:
    def __init__(
        self,
        loop: SimulatedLoop,
        network: SimNetwork,
        base_dir: Path,
        brokers: int = 3,
        settings: dict[str, str] | None = None,
    ) -> None:
        self.loop = loop
        self.network = network
        self.base_dir = base_dir
        self.broker_ids = list(range(brokers))
        self.settings = {**DEFAULTS, **(settings or {})}
        self.store = LocalStore()
        self.brokers: dict[int, SimBroker] = {}
        self.clock_offsets = dict.fromkeys(self.broker_ids, 0)
        self.session_timeout_s = int(self.settings["zookeeper.session.timeout.ms"]) / 1000
        self._expiries: dict[int, asyncio.TimerHandle] = {}
        self._halts: dict[int, asyncio.Task[None]] = {}  # brokers that halted: their process's crash
        # Every broker's log dirs are under its own disk's root (the world's `filesystem.use` routes to it).
        self.fs = SimFileSystem(self._stall)
        self.disks: dict[int, SimDisk] = {b: self.fs.add_disk(str(self._root(b))) for b in self.broker_ids}

    def _root(self, broker_id: int) -> Path:
        return self.base_dir / f"broker-{broker_id}"

    # running code as a machine -----------------------------------------------------------------------
    def as_host(self, host: str, coro: Coroutine[Any, Any, _T]) -> asyncio.Task[_T]:
        """Run ``coro`` as code of machine ``host`` (its connections and tasks are that machine's)."""
        context = contextvars.copy_context()
        context.run(CURRENT_HOST.set, host)
        return self.loop.create_task(coro, context=context)

    # brokers -----------------------------------------------------------------------------------------
    async def start(self) -> None:
        for broker_id in self.broker_ids:
            await self.start_broker(broker_id)

    async def start_broker(self, broker_id: int) -> SimBroker:
        return await self.as_host(host_of(broker_id), self._start_broker(broker_id))

    async def _start_broker(self, broker_id: int) -> SimBroker:
        host = host_of(broker_id)
        props = {
            **self.settings,
            "broker.id": str(broker_id),
            "log.dirs": str(self._root(broker_id)),
            "listeners": f"PLAINTEXT://{host}:{PORT}",
            "advertised.listeners": f"PLAINTEXT://{host}:{PORT}",
        }
        with self.store.lock:
            session = _OwnedSession(self.store, self.loop, self.store.new_session_id())
            self.store.register(session)
        clock = SimClock(self.loop, self.clock_offsets[broker_id])
        broker = Broker(BrokerConfig(props), clock=clock, metadata_store=session)
        server = await serve_plaintext(broker, host, PORT)
        member = SimBroker(broker_id, broker, server, session, clock)
        self.brokers[broker_id] = member
        return member

    async def crash(self, broker_id: int) -> None:
        """A process crash: the broker's tasks end where they wait, its connections reset."""
        member = self.brokers.pop(broker_id)
        host = member.host
        self.loop.resume_host(host)  # a paused process dies too (its held callbacks run their clean-ups)
        self.network.crash_host(host)
        member.clock.stop()
        member.session.muted = True
        for _ in range(10):  # a cancelled task's clean-up may start another: end those too
            tasks = self.loop.tasks_of(host)
            if not tasks:
                break
            for task in tasks:
                task.cancel()
            await asyncio.wait(tasks, timeout=1.0)
        # Its registration and other ephemerals go when the session times out, as with ZooKeeper.
        self.loop.call_later(self.session_timeout_s, member.session.close)

    async def crash_machine(self, broker_id: int, rng: random.Random) -> tuple[int, int]:
        """A power loss: the process dies and its disk keeps only what was synced (see strom.sim.disk);
        returns the pages lost and torn."""
        await self.crash(broker_id)
        return self.fs.crash(self.disks[broker_id], rng)

    def halt(self, code: int) -> NoReturn:
        """The halt port (`strom._util.halt`) for the run: the calling broker's process exits with
        ``code``. None of its code runs after this (its machine is paused until the crash ends its
        tasks, and `Halted` unwinds the caller); nothing of its shutdown runs, as with ``os._exit``."""
        host = CURRENT_HOST.get()
        (broker_id,) = [b for b in self.broker_ids if host_of(b) == host]
        if broker_id not in self._halts and broker_id in self.brokers:
            log.warning("broker %d halted with exit code %d", broker_id, code)
            self.loop.pause_host(host)
            context = contextvars.copy_context()
            context.run(CURRENT_HOST.set, "world")  # the crash is not the halted machine's own code
            self._halts[broker_id] = self.loop.create_task(self.crash(broker_id), context=context)
        task = asyncio.current_task()
        if task is not None:  # its end is the process's: nobody is left to read it
            task.add_done_callback(_forget_outcome)
        raise Halted

    async def halted(self, broker_id: int) -> bool:
        """Whether ``broker_id`` halted since the last call (then its process is gone: restart it)."""
        crash = self._halts.pop(broker_id, None)
        if crash is None:
            return False
        await crash
        return True

    def pause(self, broker_id: int) -> None:
        """SIGSTOP: the broker's code stops; its session's heartbeats stop with it."""
        member = self.brokers.get(broker_id)
        if member is None:
            return
        self.loop.pause_host(member.host)
        self.suspend_session(broker_id)

    def unpause(self, broker_id: int) -> None:
        self.loop.resume_host(host_of(broker_id))
        self.resume_session(broker_id)

    def disk_error(self, broker_id: int, error: int | None, syncs_only: bool = False) -> None:
        """From now on the broker's disk fails with ``error`` (an errno; its syncs alone with
        ``syncs_only``), or works again (None)."""
        self.disks[broker_id].error = error
        self.disks[broker_id].syncs_only = syncs_only

    def slow_disk(self, broker_id: int, seconds: float) -> None:
        """From now on each write to the broker's disk blocks it ``seconds`` (0: a healthy disk)."""
        self.disks[broker_id].slow_s = seconds

    def _stall(self, seconds: float) -> None:
        """The running machine is stuck in a disk call: its code stops for ``seconds`` (module docstring)."""
        host = CURRENT_HOST.get()
        if host in self.loop.paused():
            return
        self.loop.pause_host(host)
        context = contextvars.copy_context()
        context.run(CURRENT_HOST.set, "disk")  # the wake-up must not be held with the machine's own
        self.loop.call_later(seconds, self.loop.resume_host, host, context=context)

    async def restart(self, broker_id: int) -> SimBroker:
        return await self.start_broker(broker_id)

    def jump_clock(self, broker_id: int, delta_ms: int) -> None:
        self.clock_offsets[broker_id] += delta_ms
        member = self.brokers.get(broker_id)
        if member is not None:
            member.clock.jump(delta_ms)

    def suspend_session(self, broker_id: int) -> None:
        """The broker loses its connection to the metadata store; past the session timeout, the store
        expires the session (the broker learns it when the connection comes back)."""
        member = self.brokers.get(broker_id)
        if member is None:
            return
        member.session.suspend()
        self._expiries[broker_id] = self.loop.call_later(self.session_timeout_s, member.session.expire)

    def resume_session(self, broker_id: int) -> None:
        timer = self._expiries.pop(broker_id, None)
        if timer is not None:
            timer.cancel()
        member = self.brokers.get(broker_id)
        if member is not None and member.session.session_state == "SUSPENDED":
            member.session.resume()

    def expire_session(self, broker_id: int) -> None:
        member = self.brokers.get(broker_id)
        if member is not None:
            member.session.expire()

    def registered(self) -> list[int]:
        with self.store.lock:
            node = self.store.lookup("/brokers/ids")
            return sorted(int(c) for c in node.children) if node is not None else []

    def registered_live(self) -> list[int]:
        """The brokers registered by their running incarnation (not by a crashed one's old session)."""
        live = []
        with self.store.lock:
            for broker_id, member in sorted(self.brokers.items()):
                node = self.store.lookup(f"/brokers/ids/{broker_id}")
                if node is not None and node.owner == member.session.session_id:
                    live.append(broker_id)
        return live

    def in_every_isr(self, broker_id: int) -> bool:
        """Whether the broker is in the ISR of every partition it replicates (it has caught up)."""
        with self.store.lock:
            topics = self.store.lookup(paths.BROKER_TOPICS)
            for topic in sorted(topics.children if topics is not None else ()):
                node = self.store.lookup(paths.topic_path(topic))
                if node is None:
                    continue
                for p, replicas in TopicAssignment.decode(node.data).partitions.items():
                    state = self.store.lookup(paths.partition_state_path(topic, p))
                    if broker_id in replicas and (
                        state is None or broker_id not in PartitionStateDoc.decode(state.data).isr
                    ):
                        return False
        return True

    def high_watermarks_at_log_end(self) -> bool:
        """Whether every leader's high watermark has reached its log end. A leader new after the faults
        learns its followers' log ends only from their next fetches (a follower adds the partition to
        its fetch to that broker after the long poll in flight, up to ``replica.fetch.wait.max.ms``), and
        until then its high watermark can be below records the last leader acknowledged, as in Kafka."""
        with self.store.lock:
            for broker_id, member in self.brokers.items():
                for (topic, index), part in member.broker.replica_manager.partitions.items():
                    if not part.is_leader or part.high_watermark >= part.log_end_offset:
                        continue
                    node = self.store.lookup(paths.partition_state_path(topic, index))
                    state = PartitionStateDoc.decode(node.data) if node is not None else None
                    # The store's leader: a deposed leader not yet told keeps its unacknowledged tail.
                    if state is not None and (state.leader, state.leader_epoch) == (
                        broker_id,
                        part.leader_epoch,
                    ):
                        return False
        return True

    def controller(self) -> int | None:
        for broker_id, member in self.brokers.items():
            if member.broker.control.controller_active:
                return broker_id
        return None

    @property
    def bootstrap(self) -> list[tuple[str, int]]:
        return [(host_of(b), PORT) for b in sorted(self.brokers)]

    async def stop(self) -> None:
        for broker_id in sorted(self._halts):
            await self.halted(broker_id)
        for broker_id in sorted(self.brokers):
            await self.crash(broker_id)
        self.store.close()
