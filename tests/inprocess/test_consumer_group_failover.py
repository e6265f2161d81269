"""A KIP-848 consumer group on three in-process brokers, on a manual clock: members join and reconcile
incrementally, the coordinator's broker dies, the new leader of the group's `__consumer_offsets`
partition rebuilds the group from its records (same group epoch, same member epochs, same assignment),
and a member that stops heartbeating is removed by the new coordinator's session timer."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any

from strom.cluster.kafka_metadata import KafkaMetadataClient
from strom.cluster.zk_paths import TopicAssignment
from strom.protocol.api import ApiKey
from strom.testing.inprocess_cluster import InProcessCluster
from tests.inprocess.harness import PipelinedClient

GROUP = "kip848"
OFFSETS = ("__consumer_offsets", 0)
TOPIC_ID = uuid.uuid4().bytes
SETTINGS = {
    "offsets.topic.num.partitions": "1",
    "offsets.topic.replication.factor": "3",
    "group.consumer.heartbeat.interval.ms": "500",
    "group.consumer.min.heartbeat.interval.ms": "100",
    "group.consumer.session.timeout.ms": "6000",
    "group.consumer.min.session.timeout.ms": "1000",
}


async def heartbeat(
    client: PipelinedClient, member: str, epoch: int, owned: set[int] | None, join: bool = False
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "group_id": GROUP,
        "member_id": member,
        "member_epoch": epoch,
        "instance_id": None,
        "rack_id": None,
        "rebalance_timeout_ms": 30_000 if join else -1,
        "subscribed_topic_names": ["t"] if join else None,
        "subscribed_topic_regex": None,
        "server_assignor": None,
        "topic_partitions": None if owned is None else [{"topic_id": TOPIC_ID, "partitions": sorted(owned)}],
    }
    return await client.request(ApiKey.CONSUMER_GROUP_HEARTBEAT, 1, body)


def assigned(response: dict[str, Any]) -> set[int]:
    assert response["error_code"] == 0, response
    assert response["assignment"] is not None, response
    return {p for tp in response["assignment"]["topic_partitions"] for p in tp["partitions"]}


async def describe(client: PipelinedClient) -> dict[str, Any]:
    response = await client.request(
        ApiKey.CONSUMER_GROUP_DESCRIBE, 1, {"group_ids": [GROUP], "include_authorized_operations": False}
    )
    return dict(response["groups"][0])


def test_group_survives_a_coordinator_fail_over(tmp_path: Path) -> None:
    async def main() -> None:
        async with InProcessCluster(tmp_path, 3, SETTINGS) as cluster:
            admin = KafkaMetadataClient(cluster.store.session(asyncio.get_running_loop()))
            admin.start()
            admin.create_topic("t", TopicAssignment(TOPIC_ID, {p: [1, 2, 0] for p in range(4)}), {})
            admin.create_topic(
                "__consumer_offsets",
                TopicAssignment(uuid.uuid4().bytes, {0: [0, 1, 2]}),
                {"cleanup.policy": "compact"},
            )

            def leader(member_id: int, isr: int = 1) -> bool:
                member = cluster.members.get(member_id)
                part = None if member is None else member.broker.replica_manager.partitions.get(OFFSETS)
                return part is not None and part.leader_id == member_id and len(part.isr) >= isr

            await cluster.until(
                lambda: leader(0, isr=3), "broker 0 to lead __consumer_offsets-0 with its ISR"
            )
            await cluster.until(
                lambda: all("t" in m.broker.metadata.topics for m in cluster.members.values()), "topic t"
            )
            client = await PipelinedClient.connect(cluster.members[0].port)
            a = assigned(await heartbeat(client, "A", 0, None, join=True))
            assert a == {0, 1, 2, 3}
            b_join = await heartbeat(client, "B", 0, None, join=True)
            assert b_join["member_epoch"] == 2 and assigned(b_join) == set()
            kept = assigned(await heartbeat(client, "A", 1, a))
            assert len(kept) == 2
            done = await heartbeat(client, "A", 1, kept)
            assert done["member_epoch"] == 2
            b = assigned(await heartbeat(client, "B", 2, set()))
            assert b == a - kept
            before = await describe(client)
            assert before["group_state"] == "Stable" and before["group_epoch"] == 2
            await client.close()

            # The coordinator dies; broker 1 takes the partition over and loads the group.
            await cluster.kill(0)
            await cluster.until(lambda: leader(1) or leader(2), "a new leader of __consumer_offsets-0")
            new = 1 if leader(1) else 2
            await cluster.until(
                lambda: cluster.members[new].broker.groups.consumer_group(GROUP) is not None,
                "the group loaded",
            )
            client = await PipelinedClient.connect(cluster.members[new].port)
            after = await describe(client)
            assert after["group_epoch"] == 2 and after["assignment_epoch"] == 2
            assert after["group_state"] == "Stable"
            epochs = {m["member_id"]: m["member_epoch"] for m in after["members"]}
            assert epochs == {"A": 2, "B": 2}
            # A carries on at its epoch; B goes silent and its session runs out on the new coordinator.
            again = await heartbeat(client, "A", 2, kept)
            assert again["error_code"] == 0 and again["member_epoch"] == 2
            await cluster.advance(5000)
            assert (await heartbeat(client, "A", 2, kept))["error_code"] == 0
            await cluster.advance(2000)  # B's session (armed at the load) is over; A's is not
            coordinator = cluster.members[new].broker.groups
            await cluster.until(lambda: set(coordinator.consumer_group(GROUP).members) == {"A"}, "B removed")  # type: ignore[union-attr]
            final = await heartbeat(client, "A", 2, kept)
            assert final["member_epoch"] == 3 and assigned(final) == {0, 1, 2, 3}
            fenced = await heartbeat(client, "B", 2, b)
            assert fenced["error_code"] == 25  # UNKNOWN_MEMBER_ID
            await client.close()

    asyncio.run(main())
