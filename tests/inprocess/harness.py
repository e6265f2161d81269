"""A broker inside the test's own event loop, on a manual clock, and a pipelining client for it.

`InProcessBroker` builds the real `Broker` and `KafkaServer` (ephemeral port on 127.0.0.1) in the running
loop, with a `ManualClock`: nothing in the broker core times out (purgatory deadlines, fetch long-polls,
acks=all waits, ISR expiry) until the test calls `advance`. The broker is a cluster of one; a test that
needs followers hands the replica manager the LeaderAndIsr a controller would send (`lead`), and plays
a follower by sending Fetch with a replica id.

`PipelinedClient` writes requests without waiting for answers, so tests can check Kafka's per-connection
order: responses come back in request order, one request at a time (consecutive produces excepted).
"""

from __future__ import annotations

import asyncio
import itertools
import struct
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from strom._util.clock import ManualClock
from strom.broker.broker import Broker
from strom.broker.config import BrokerConfig
from strom.broker.control.cluster_member import ClusterMember
from strom.broker.network.server import KafkaServer
from strom.cluster.zk_paths import PartitionStateDoc, partition_state_path
from strom.protocol.api import ApiKey
from strom.protocol.codec import decode_response, encode_request
from tests.integration.rawclient import batch, fetch_body, produce_body

__all__ = ["InProcessBroker", "PipelinedClient", "batch", "fetch_body", "produce_body"]

_SIZE = struct.Struct(">i")
WAIT_S = 5.0  # real-time bound on anything a test awaits; the broker's own time is the manual clock


class PipelinedClient:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._reader = reader
        self._writer = writer
        self._ids = itertools.count(1)
        self._sent: list[tuple[int, int, int]] = []
        self._answers: asyncio.Queue[tuple[int, dict[str, Any]]] = asyncio.Queue()
        self._task = asyncio.create_task(self._read_loop())

    @classmethod
    async def connect(cls, port: int) -> PipelinedClient:
        reader, writer = await asyncio.open_connection("127.0.0.1", port, limit=1 << 24)
        return cls(reader, writer)

    def send(self, api_key: ApiKey, version: int, body: dict[str, Any]) -> int:
        """Write one request now; returns its correlation id (answers arrive through `receive`)."""
        correlation_id = next(self._ids)
        self._sent.append((correlation_id, int(api_key), version))
        self._writer.write(encode_request(int(api_key), version, correlation_id, "inprocess", body))
        return correlation_id

    async def _read_loop(self) -> None:
        pending = 0
        while True:
            (size,) = _SIZE.unpack(await self._reader.readexactly(4))
            payload = await self._reader.readexactly(size)
            expected_id, api_key, version = self._sent[pending]
            pending += 1
            correlation_id, body = decode_response(api_key, version, payload)
            assert correlation_id == expected_id, "responses out of request order"
            await self._answers.put((correlation_id, body))

    async def receive(self) -> tuple[int, dict[str, Any]]:
        return await asyncio.wait_for(self._answers.get(), WAIT_S)

    def answered(self) -> bool:
        return not self._answers.empty()

    async def request(self, api_key: ApiKey, version: int, body: dict[str, Any]) -> dict[str, Any]:
        correlation_id = self.send(api_key, version, body)
        got, answer = await self.receive()
        assert got == correlation_id
        return answer

    async def close(self) -> None:
        self._task.cancel()
        self._writer.close()


class InProcessBroker:
    def __init__(self, log_dir: Path, **overrides: str) -> None:
        props = {"broker.id": "0", "log.dirs": str(log_dir), **overrides}
        self.clock = ManualClock(start_ms=int(time.time() * 1000))
        self.broker = Broker(BrokerConfig(props), clock=self.clock)
        self.server = KafkaServer(self.broker.handler_ports, "127.0.0.1", 0)
        self.port = 0

    async def __aenter__(self) -> InProcessBroker:
        from strom.broker.broker import Endpoint

        host, self.port = await self.server.start()
        self.broker.advertised = Endpoint(host, self.port)
        self.broker.start_background()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.server.stop()
        await self.broker.stop()

    async def client(self) -> PipelinedClient:
        return await PipelinedClient.connect(self.port)

    async def advance(self, delta_ms: int) -> None:
        """Move the broker's time and let the tasks it woke run."""
        self.clock.advance(delta_ms)
        await settle()

    def _store_state(self, topic: str, partition: int, leader: int, epoch: int, isr: list[int]) -> None:
        """The partition-state znode a controller writes before it sends LeaderAndIsr (the leader's ISR
        changes are conditional writes of it)."""
        control = self.broker.control
        assert isinstance(control, ClusterMember)
        path = partition_state_path(topic, partition)
        data = PartitionStateDoc(leader, epoch, tuple(isr), 1).encode()
        if control.metadata_client.store.exists(path) is None:
            control.metadata_client.store.create(path, data, make_parents=True)
        else:
            control.metadata_client.store.set(path, data)

    def lead(self, topic: str, partition: int, replicas: list[int], isr: list[int], epoch: int = 0) -> None:
        """Make this broker leader of a partition with the given replicas, as a controller would."""
        self._store_state(topic, partition, 0, epoch, isr)
        self.broker.replica_manager.become_leader_or_follower(
            leader_and_isr(topic, partition, leader=0, epoch=epoch, replicas=replicas, isr=isr)
        )

    def follow(self, topic: str, partition: int, leader: int, replicas: list[int], epoch: int) -> None:
        """Make this broker a follower (of a leader at a closed port: its fetcher just retries)."""
        self._store_state(topic, partition, leader, epoch, replicas)
        self.broker.replica_manager.become_leader_or_follower(
            leader_and_isr(topic, partition, leader=leader, epoch=epoch, replicas=replicas, isr=replicas)
        )


def leader_and_isr(
    topic: str, partition: int, *, leader: int, epoch: int, replicas: list[int], isr: list[int]
) -> dict[str, Any]:
    return {
        "controller_id": 0,
        "controller_epoch": 1,
        "partition_states": [
            {
                "topic_name": topic,
                "partition_index": partition,
                "controller_epoch": 1,
                "leader": leader,
                "leader_epoch": epoch,
                "isr": isr,
                "zk_version": 0,
                "replicas": replicas,
                "adding_replicas": [],
                "removing_replicas": [],
                "is_new": False,
            }
        ],
        # Broker ids other than 0 live at a port nothing listens on.
        "live_leaders": [{"broker_id": b, "host_name": "127.0.0.1", "port": 1} for b in replicas if b != 0],
    }


async def settle(rounds: int = 20) -> None:
    """Let ready tasks and loopback I/O run (a few loop iterations; no real-time waiting)."""
    for _ in range(rounds):
        await asyncio.sleep(0)


async def eventually(check: Callable[[], bool], what: str) -> None:
    """Until ``check()`` holds, within WAIT_S of real time (for effects crossing a socket)."""
    deadline = asyncio.get_running_loop().time() + WAIT_S
    while not check():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.001)
