"""Topic ids and leader hints on a real three-broker cluster in one event loop (`InProcessCluster`).

KIP-516: every replica's partition directory records its topic's id in ``partition.metadata``, the id
the controller gave the topic (here written without one, as by an admin tool from before topic ids);
a follower asked by id answers as by name. KIP-951: a follower refusing a Produce (v10+) or Fetch (v16+)
as NOT_LEADER_OR_FOLLOWER names the current leader and its address; older versions carry neither.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path

from strom.cluster.kafka_metadata import KafkaMetadataClient
from strom.cluster.zk_paths import TopicAssignment
from strom.protocol.api import ApiKey
from strom.protocol.errors import ErrorCode
from strom.storage.partition_metadata import read_topic_id
from strom.testing.inprocess_cluster import InProcessCluster
from tests.inprocess.harness import PipelinedClient, batch, fetch_body, produce_body

Scenario = Callable[[InProcessCluster, KafkaMetadataClient], Awaitable[None]]


def run(tmp_path: Path, scenario: Scenario) -> None:
    async def main() -> None:
        async with InProcessCluster(tmp_path, 3) as cluster:
            admin = KafkaMetadataClient(cluster.store.session(asyncio.get_running_loop()))
            admin.start()
            admin.create_topic("t", TopicAssignment(bytes(16), {0: [0, 1, 2]}), {})
            await cluster.until(
                lambda: (
                    all(m.broker.metadata.partitions.get(("t", 0)) for m in cluster.members.values())
                    and all(("t", 0) in m.broker.replica_manager.partitions for m in cluster.members.values())
                ),
                "t-0 on every broker",
            )
            await scenario(cluster, admin)

    asyncio.run(main())


def test_every_replica_records_the_id_the_controller_gave(tmp_path: Path) -> None:
    async def scenario(cluster: InProcessCluster, admin: KafkaMetadataClient) -> None:
        found = admin.get_topic_assignment("t")
        assert found is not None and found[0].topic_id != bytes(16)
        topic_id = found[0].topic_id
        for member in cluster.members.values():
            assert member.broker.metadata.topics["t"].topic_id == topic_id
            log_dir = Path(member.broker.log_manager.log_dirs[0])
            assert read_topic_id(str(log_dir / "t-0")) == topic_id

    run(tmp_path, scenario)


def test_a_follower_names_the_leader_in_produce_and_fetch_errors(tmp_path: Path) -> None:
    async def scenario(cluster: InProcessCluster, admin: KafkaMetadataClient) -> None:
        leader = cluster.members[0]
        follower = cluster.members[1]
        epoch = leader.broker.metadata.partitions[("t", 0)].leader_epoch
        topic_id = leader.broker.metadata.topics["t"].topic_id
        client = await PipelinedClient.connect(follower.port)
        try:
            for version in (8, 10, 13):
                body = produce_body("t", 0, batch([b"x"]), acks=1)
                body["topic_data"][0]["topic_id"] = topic_id
                answer = await client.request(ApiKey.PRODUCE, version, body)
                part = answer["responses"][0]["partition_responses"][0]
                assert part["error_code"] == ErrorCode.NOT_LEADER_OR_FOLLOWER
                if version < 10:
                    assert "current_leader" not in part and "node_endpoints" not in answer
                    continue
                assert part["current_leader"] == {"leader_id": 0, "leader_epoch": epoch}
                assert answer["node_endpoints"] == [
                    {"node_id": 0, "host": "127.0.0.1", "port": leader.port, "rack": None}
                ]
            for version in (12, 16, 18):
                body = fetch_body([("t", 0, 0, 1 << 20)])
                body["topics"][0]["topic_id"] = topic_id
                body["topics"][0]["partitions"][0]["current_leader_epoch"] = epoch
                # a replica's fetch is served by the leader only (a consumer's may read a follower)
                body["replica_id"] = 2
                body["replica_state"] = {"replica_id": 2, "replica_epoch": -1}
                answer = await client.request(ApiKey.FETCH, version, body)
                part = answer["responses"][0]["partitions"][0]
                assert part["error_code"] == ErrorCode.NOT_LEADER_OR_FOLLOWER
                if version < 16:
                    assert part.get("current_leader") in (None, {"leader_id": -1, "leader_epoch": -1})
                    continue
                assert part["current_leader"] == {"leader_id": 0, "leader_epoch": epoch}
                assert [e["node_id"] for e in answer["node_endpoints"]] == [0]
        finally:
            await client.close()

    run(tmp_path, scenario)
