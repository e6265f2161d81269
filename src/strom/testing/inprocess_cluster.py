"""Several brokers and their controller in one process and one event loop, over one local metadata store.

`InProcessCluster` is a ZooKeeper cluster without ZooKeeper and without subprocesses: every broker is a
real `Broker` with its `KafkaServer` on a loopback ephemeral port, joined to the cluster exactly as a
ZooKeeper cluster member is (`ClusterMember`: registration, controller election, the controller's
requests over the Kafka protocol, replica fetchers), except that its metadata-store session is a
`LocalSession` on the cluster's one `LocalStore` (`strom.cluster.local_store`). Time is a `ManualClock`
shared by the brokers: the broker core's timeouts (purgatory deadlines, ISR expiry, coordinator timers)
move only when a test calls `advance`; the controller's own event loop work and the sockets run at
once. A broker's death is its session ending (`kill`): its registration vanishes as a ZooKeeper
ephemeral does when a session expires, and the controller fails its partitions over.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from strom._util.clock import ManualClock
from strom.broker.broker import Broker
from strom.broker.config import BrokerConfig
from strom.broker.control.cluster_member import ClusterMember
from strom.broker.main import serve_plaintext
from strom.broker.network.server import KafkaServer
from strom.cluster.local_store import LocalSession, LocalStore

__all__ = ["InProcessCluster", "Member"]

#: Settings that keep a small test cluster quick (overridable per cluster).
DEFAULTS = {
    "offsets.topic.num.partitions": "3",
    "group.initial.rebalance.delay.ms": "0",
    "auto.leader.rebalance.enable": "false",
}


@dataclass(slots=True)
class Member:
    broker: Broker
    server: KafkaServer
    session: LocalSession
    port: int

    @property
    def control(self) -> ClusterMember:
        control = self.broker.control
        assert isinstance(control, ClusterMember)
        return control


class InProcessCluster:
    def __init__(
        self,
        base_dir: str | Path,
        brokers: int = 3,
        settings: dict[str, str] | None = None,
        clock: ManualClock | None = None,
    ) -> None:
        self.base_dir = Path(base_dir)
        self.broker_ids = list(range(brokers))
        self.settings = {**DEFAULTS, **(settings or {})}
        self.clock = clock or ManualClock(start_ms=time.time_ns() // 1_000_000)
        self.store = LocalStore()
        self.members: dict[int, Member] = {}

    async def __aenter__(self) -> InProcessCluster:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def start(self) -> None:
        for broker_id in self.broker_ids:
            await self.start_broker(broker_id)
        await self.until(lambda: self.controller() is not None, "a controller")

    async def start_broker(self, broker_id: int) -> Member:
        """Start (or restart) a broker: its own log dir, a new session, a listener on a free port."""
        props = {
            **self.settings,
            "broker.id": str(broker_id),
            "log.dirs": str(self.base_dir / f"broker-{broker_id}"),
        }
        session = self.store.session(asyncio.get_running_loop())
        broker = Broker(BrokerConfig(props), clock=self.clock, metadata_store=session)
        server = await serve_plaintext(broker, "127.0.0.1", 0)
        member = Member(broker, server, session, broker.advertised.port)
        self.members[broker_id] = member
        await self.until(lambda: broker_id in self.registered(), f"broker {broker_id} to register")
        return member

    def registered(self) -> list[int]:
        return sorted(int(child) for child in self.store_children("/brokers/ids"))

    def store_children(self, path: str) -> list[str]:
        with self.store.lock:
            node = self.store.lookup(path)
            return sorted(node.children) if node is not None else []

    async def stop_broker(self, broker_id: int) -> None:
        """A clean stop: controlled shutdown first (leadership moves away), then the session ends."""
        member = self.members.pop(broker_id)
        await member.server.stop()
        await member.broker.stop()

    async def kill(self, broker_id: int) -> None:
        """An abrupt death: the session ends at once (the controller sees the registration vanish),
        then the broker's tasks stop without a controlled shutdown."""
        member = self.members.pop(broker_id)
        member.session.close()
        await member.server.stop()
        member.control.controlled_shutdown_enable = False
        await member.broker.stop()

    async def stop(self) -> None:
        for broker_id in list(self.members):
            await self.kill(broker_id)
        self.store.close()

    def controller(self) -> Member | None:
        for member in self.members.values():
            if member.control.controller_active:
                return member
        return None

    @property
    def bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{m.port}" for m in self.members.values())

    async def advance(self, delta_ms: int) -> None:
        """Move the brokers' time and let what it woke run."""
        self.clock.advance(delta_ms)
        for _ in range(20):
            await asyncio.sleep(0)

    async def until(self, condition: Callable[[], object], what: str, timeout_s: float = 10.0) -> None:
        """Until ``condition()`` holds (bounded in real time: controller work and sockets are real)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while not condition():
            if loop.time() > deadline:
                raise AssertionError(f"timed out waiting for {what}")
            await asyncio.sleep(0.002)
