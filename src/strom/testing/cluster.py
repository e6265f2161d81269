"""A local Strom cluster for tests and development: one ZooKeeper and N broker processes on 127.0.0.1.

Broker ``i`` gets ``broker.id=i``, its own data directory ``<base>/broker-<i>``, and with ``racks`` > 0
``broker.rack=R1..Rk`` assigned in contiguous blocks of ids (6 brokers on 2 racks: 0,1,2 on R1 and 3,4,5
on R2, as in docs/design.md). Every process is started and stopped by its own PID; waits are bounded.
A ``broker_factory`` may place brokers elsewhere (the fault suite runs each in a network namespace).
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable
from pathlib import Path

from strom._util.clock import SystemClock
from strom.broker.network.net_client import BrokerConnection
from strom.broker.security.client import ClientSecurity
from strom.protocol.api import ApiKey
from strom.protocol.messages import MetadataRequest, MetadataResponse
from strom.testing.broker_process import BrokerProcess
from strom.testing.zookeeper_process import ZooKeeperProcess

#: partition -> (leader, ISR, replicas) as one broker answers Metadata.
PartitionView = dict[tuple[str, int], tuple[int, tuple[int, ...], tuple[int, ...]]]


def broker_metadata(bootstrap: str, timeout_s: float = 60.0) -> tuple[int, PartitionView]:
    """(controller id, every partition's leader, ISR and replicas) as *this one* broker answers Metadata
    (a client library would ask whichever broker it likes); internal topics left out."""
    host, port = bootstrap.rsplit(":", 1)
    body: MetadataRequest = {
        "topics": None,
        "allow_auto_topic_creation": False,
        "include_cluster_authorized_operations": False,
        "include_topic_authorized_operations": False,
    }

    async def ask() -> MetadataResponse:
        conn = BrokerConnection(host, int(port), "strom-testing", ClientSecurity(), SystemClock())
        try:
            return await conn.send(ApiKey.METADATA, 8, body, timeout_ms=round(timeout_s * 1000))
        finally:
            conn.close()

    answer = asyncio.run(ask())
    view = {
        (name, p["partition_index"]): (p["leader_id"], tuple(p["isr_nodes"]), tuple(p["replica_nodes"]))
        for t in answer["topics"]
        if (name := t["name"]) is not None and not name.startswith("__")  # (v8 always names topics)
        for p in t["partitions"]
    }
    return int(answer["controller_id"]), view


def rack_of(broker_id: int, brokers: int, racks: int) -> str | None:
    if racks <= 0:
        return None
    per_rack = -(-brokers // racks)
    return f"R{broker_id // per_rack + 1}"


class LocalCluster:
    def __init__(
        self,
        base_dir: str | os.PathLike[str],
        brokers: int = 3,
        racks: int = 0,
        overrides: dict[str, str] | None = None,
        zookeeper: ZooKeeperProcess | None = None,
        broker_factory: Callable[[int, Path, dict[str, str]], BrokerProcess] | None = None,
        detached: bool = False,
    ) -> None:
        """``detached``: the cluster outlives the process that starts it (``strom cluster up``); by
        default its processes die with it (strom.testing.processes.popen_tied)."""
        self.base_dir = Path(base_dir)
        self.zookeeper = zookeeper or ZooKeeperProcess(self.base_dir / "zookeeper", detached=detached)
        self.count = brokers
        self.racks = racks
        self.overrides = dict(overrides or {})
        self.brokers: dict[int, BrokerProcess] = {}
        self.broker_factory = broker_factory or (
            lambda _id, data_dir, settings: BrokerProcess(data_dir, settings, detached=detached)
        )

    def broker_overrides(self, broker_id: int) -> dict[str, str]:
        settings = {
            "broker.id": str(broker_id),
            "zookeeper.connect": self.zookeeper.connect,
            **self.overrides,
        }
        rack = rack_of(broker_id, self.count, self.racks)
        if rack is not None:
            settings["broker.rack"] = rack
        return settings

    def start(self, on_step: Callable[[str], None] | None = None) -> str:
        """ZooKeeper, then each broker, then wait until all are live; ``on_step(what)`` after each."""
        step = on_step or (lambda what: None)
        if self.zookeeper.proc is None:
            self.zookeeper.start()
            step("ZooKeeper started")
        for broker_id in range(self.count):
            proc = self.broker_factory(
                broker_id, self.base_dir / f"broker-{broker_id}", self.broker_overrides(broker_id)
            )
            self.brokers[broker_id] = proc
            proc.start()
            step(f"broker {broker_id} started")
        self.wait_for_brokers(self.count)
        step("all brokers registered")
        return self.bootstrap

    def wait_for_brokers(self, count: int, timeout_s: float = 30.0) -> None:
        """Until Metadata lists ``count`` live brokers (the controller has told every broker)."""
        from confluent_kafka.admin import AdminClient

        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                if len(admin.list_topics(timeout=5).brokers) >= count:
                    return
            except Exception:
                pass
            time.sleep(0.2)
        raise RuntimeError(f"the cluster did not reach {count} live brokers in {timeout_s} s")

    @property
    def bootstrap(self) -> str:
        return ",".join(b.bootstrap for b in self.brokers.values() if b.proc is not None)

    def stop(self) -> None:
        for proc in self.brokers.values():
            try:
                proc.stop(timeout_s=20)
            except Exception:
                proc.kill()
        self.zookeeper.stop()

    def __enter__(self) -> LocalCluster:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
