"""Controller election and epoch fencing against a real ZooKeeper, through strom.cluster's API."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from strom.cluster.election import LeaderAndIsr
from strom.cluster.kafka_metadata import KafkaMetadataClient
from strom.cluster.metadata_store import ControllerMovedError
from strom.cluster.zk_paths import BrokerRegistration, TopicAssignment
from strom.cluster.zookeeper_store import ZooKeeperStore
from strom.testing.zookeeper_process import ZooKeeperProcess
from tests.prerequisites import require_zookeeper

pytestmark = pytest.mark.cluster


def test_election_epochs_fencing_and_conditional_writes(tmp_path: Path) -> None:
    require_zookeeper()
    zk_proc = ZooKeeperProcess(tmp_path / "zk")
    zk_proc.start()

    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        a = KafkaMetadataClient(ZooKeeperStore(zk_proc.connect, 3000, loop))
        b = KafkaMetadataClient(ZooKeeperStore(zk_proc.connect, 3000, loop))
        a.start()
        b.start()
        a.register_broker(BrokerRegistration(1, "h", 1, "R1"))
        b.register_broker(BrokerRegistration(2, "h", 2, None))
        assert sorted(a.get_brokers()) == [1, 2] and a.get_brokers()[1].rack == "R1"
        won = a.try_become_controller(1)
        assert won is not None and b.try_become_controller(2) is None
        epoch, epoch_version = won
        assert b.get_controller_id() == 1
        a.create_topic("t", TopicAssignment(bytes(16), {0: [1, 2]}), {"min.insync.replicas": "2"})
        state = a.create_partition_state("t", 0, LeaderAndIsr(1, 0, (1, 2), epoch), epoch_version)
        assert state is not None
        # a leader's ISR write is conditional on the znode version it read
        shrunk = b.update_partition_state("t", 0, LeaderAndIsr(1, 0, (1,), epoch, state.zk_version))
        assert shrunk is not None and shrunk.zk_version == state.zk_version + 1
        assert b.update_partition_state("t", 0, LeaderAndIsr(1, 0, (1, 2), epoch, state.zk_version)) is None
        # the controller dies: the other broker wins with a higher epoch, and the old one is fenced
        a.resign_controller(1)
        won_b = b.try_become_controller(2)
        assert won_b is not None and won_b[0] == epoch + 1
        with pytest.raises(ControllerMovedError):
            a.update_partition_state(
                "t", 0, LeaderAndIsr(2, 1, (2,), epoch, shrunk.zk_version), epoch_version
            )
        assert b.update_partition_state(
            "t", 0, LeaderAndIsr(2, 1, (2,), epoch + 1, shrunk.zk_version), won_b[1]
        )
        a.close()
        b.close()

    try:
        asyncio.run(scenario())
    finally:
        zk_proc.stop()
