"""A Strom cluster on a private namespace network, and the run loop every fault case shares.

`FaultCluster`: ZooKeeper and N brokers, each in its own network namespace of a `NetLab` (started with
``ip netns exec``, bound to the node's address), reached by the test's clients through the bridge.
`run_case` creates an RF 3, ``min.insync.replicas=2`` topic, starts an idempotent acks=all `Writer`,
lets the fault function do its work at random moments (it heals what it broke), waits until the cluster
has converged again (every broker registered, every partition led, ISR = all replicas), checks that
acknowledged writes resume, reads everything back and hands both lists to the checker.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from confluent_kafka.admin import AdminClient
from kazoo.client import KazooClient

from strom.cluster import zk_paths
from strom.testing.broker_process import BrokerProcess
from strom.testing.cluster import LocalCluster
from strom.testing.fault_checker import Report, check
from strom.testing.zookeeper_process import ZooKeeperProcess
from tests.faults.netlab import NetLab, Node
from tests.faults.workload import Writer, create_topic, read_back

log = logging.getLogger("strom.faults")

# Shorter than the production defaults so that a run takes seconds: session expiry, ISR shrink and the
# preferred-leader check happen within each case's fault window.
SETTINGS = {
    "zookeeper.session.timeout.ms": "3000",
    "replica.lag.time.max.ms": "4000",
    "offsets.topic.num.partitions": "3",
    "group.initial.rebalance.delay.ms": "0",
    "leader.imbalance.check.interval.seconds": "5",
}


class FaultCluster:
    def __init__(self, base_dir: Path, lab: NetLab, brokers: int = 3, **overrides: str) -> None:
        self.lab = lab
        self.zk_node = lab.add_node("zk")
        self.nodes: dict[int, Node] = {i: lab.add_node(f"b{i}") for i in range(brokers)}
        zookeeper = ZooKeeperProcess(
            base_dir / "zookeeper", command_prefix=self.zk_node.prefix, host=self.zk_node.ip
        )

        def place(broker_id: int, data_dir: Path, settings: dict[str, str]) -> BrokerProcess:
            node = self.nodes[broker_id]
            return BrokerProcess(data_dir, settings, command_prefix=node.prefix, host=node.ip)

        self.cluster = LocalCluster(
            base_dir, brokers, 0, {**SETTINGS, **overrides}, zookeeper=zookeeper, broker_factory=place
        )

    @property
    def bootstrap(self) -> str:
        # Every broker, running or not: clients must find the survivors whichever broker is down.
        return ",".join(f"{n.ip}:{self.cluster.brokers[i].port}" for i, n in self.nodes.items())

    @property
    def zookeeper(self) -> ZooKeeperProcess:
        return self.cluster.zookeeper

    def broker(self, broker_id: int) -> BrokerProcess:
        return self.cluster.brokers[broker_id]

    def start(self) -> None:
        self.cluster.start()

    def stop(self) -> None:
        self.cluster.stop()

    # ZooKeeper's view (the truth the controller writes), read from the test's own session -----------
    def _zk_read(self, path: str, children: bool = False) -> Any:
        zk = KazooClient(hosts=self.zookeeper.connect, timeout=5)
        try:
            zk.start(timeout=5)
            return zk.get_children(path) if children else zk.get(path)[0]
        finally:
            zk.stop()
            zk.close()

    def zk_partition_state(self, topic: str, partition: int) -> tuple[int, list[int]]:
        """(leader, isr) of the partition's state znode."""
        doc = zk_paths.PartitionStateDoc.decode(
            self._zk_read(zk_paths.partition_state_path(topic, partition))
        )
        return doc.leader, list(doc.isr)

    def zk_registered(self) -> set[int]:
        return {int(c) for c in self._zk_read(zk_paths.BROKER_IDS, children=True)}

    def zk_registration_zxid(self, broker_id: int) -> int | None:
        """The creating transaction id of ``/brokers/ids/<id>``: it changes with every new registration."""
        zk = KazooClient(hosts=self.zookeeper.connect, timeout=5)
        try:
            zk.start(timeout=5)
            stat = zk.exists(f"{zk_paths.BROKER_IDS}/{broker_id}")
            return None if stat is None else int(stat.czxid)
        finally:
            zk.stop()
            zk.close()

    def restart(self, broker_id: int, registration_zxid: int | None) -> None:
        """Start a stopped or killed broker and wait until it has registered with a session of its own.

        Until then ZooKeeper may still hold the dead incarnation's registration (its session has not
        expired yet) and the cluster would look whole while it is not.
        """
        self.broker(broker_id).start()
        wait_for(
            lambda: self.zk_registration_zxid(broker_id) not in (None, registration_zxid),
            60,
            f"broker {broker_id} to register again",
        )

    # views of the cluster --------------------------------------------------------------------------
    def metadata(self, topic: str | None = None) -> Any:
        admin = AdminClient({"bootstrap.servers": self.bootstrap, "socket.connection.setup.timeout.ms": 2000})
        return admin.list_topics(topic, timeout=5)

    def leader_of(self, topic: str, partition: int = 0) -> int:
        return int(self.metadata(topic).topics[topic].partitions[partition].leader)

    def controller_id(self) -> int:
        return int(self.metadata().controller_id)

    def wait_converged(self, topic: str, timeout_s: float = 90.0) -> None:
        """Until every broker is registered and every partition has a leader and a full ISR (bounded).

        Judged from ZooKeeper (the truth the controller and leaders write) and from Metadata (what
        clients see, which lags it): both must show every broker, a leader and ISR = replicas.
        """
        deadline = time.monotonic() + timeout_s
        last: object = None
        while time.monotonic() < deadline:
            try:
                md = self.metadata(topic)
                parts = list(md.topics[topic].partitions.values())
                zk_states = {p.id: self.zk_partition_state(topic, p.id) for p in parts}
                last = {"metadata": {p.id: (p.leader, sorted(p.isrs)) for p in parts}, "zookeeper": zk_states}
                if (
                    len(md.brokers) == len(self.nodes)
                    and self.zk_registered() == set(self.nodes)
                    and parts
                    and all(p.leader >= 0 and sorted(p.isrs) == sorted(p.replicas) for p in parts)
                    and all(
                        zk_states[p.id][0] == p.leader and sorted(zk_states[p.id][1]) == sorted(p.replicas)
                        for p in parts
                    )
                ):
                    return
            except Exception as exc:
                last = exc
            time.sleep(0.3)
        raise AssertionError(
            f"cluster did not converge within {timeout_s} s ({last}); broker logs:\n{self.log_tails()}"
        )

    def log_tails(self, lines: int = 15) -> str:
        return "\n".join(f"--- broker {i}\n{b.log_tail(lines)}" for i, b in self.cluster.brokers.items())


def wait_for(condition: Callable[[], object], timeout_s: float, what: str) -> None:
    """Poll ``condition`` (exceptions count as false) until true; AssertionError after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if condition():
                return
        except Exception:
            pass
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")


# fault(cluster, rng, topic, writer): break something at random moments, then heal it.
Fault = Callable[[FaultCluster, random.Random, str, Writer], None]


def run_case(
    fc: FaultCluster,
    rng: random.Random,
    fault: Fault,
    *,
    partitions: int = 3,
    rate_per_s: float = 150.0,
    converge_timeout_s: float = 90.0,
) -> tuple[Report, Writer]:
    topic = f"chaos-{fc.lab.tag}"
    create_topic(fc.bootstrap, topic, partitions, 3, min_insync_replicas="2")
    fc.wait_converged(topic, 30)
    writer = Writer(fc.bootstrap, topic, partitions, name=f"w{fc.lab.tag}", rate_per_s=rate_per_s).start()
    try:
        time.sleep(rng.uniform(0.5, 2.0))
        fault(fc, rng, topic, writer)
        fc.wait_converged(topic, converge_timeout_s)
        # Liveness: acknowledged writes resume once the cluster has healed.
        before = writer.acked_count()
        deadline = time.monotonic() + 30
        while writer.acked_count() < before + 50:
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"no acknowledged writes within 30 s after healing ({writer.errors}); "
                    f"logs:\n{fc.log_tails()}"
                )
            time.sleep(0.1)
    finally:
        writer.stop()
    report = check(writer.acked, read_back(fc.bootstrap, topic, partitions))
    return report, writer
