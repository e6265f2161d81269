"""Three or four real brokers and their controller in the test's event loop over one local metadata store
(`strom.testing.inprocess_cluster`), on a manual clock, without ZooKeeper or subprocesses: election of
first leaders, fail-over, reassignment through real replication, topic deletion, controlled shutdown and
controller fail-over, each in about a second."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path

from strom.cluster.kafka_metadata import KafkaMetadataClient
from strom.cluster.zk_paths import TopicAssignment
from strom.testing.inprocess_cluster import InProcessCluster, Member

Scenario = Callable[[InProcessCluster, KafkaMetadataClient], Awaitable[None]]


def run(tmp_path: Path, brokers: int, scenario: Scenario) -> None:
    async def main() -> None:
        async with InProcessCluster(tmp_path, brokers) as cluster:
            admin = KafkaMetadataClient(cluster.store.session(asyncio.get_running_loop()))
            admin.start()
            await scenario(cluster, admin)

    asyncio.run(main())


def create_topic(admin: KafkaMetadataClient, name: str, partitions: dict[int, list[int]]) -> None:
    """As an admin tool writes a topic: its assignment (the controller does the rest)."""
    admin.create_topic(name, TopicAssignment(bytes(16), partitions), {})


def leads(member: Member, topic: str, partition: int) -> bool:
    part = member.broker.replica_manager.partitions.get((topic, partition))
    return part is not None and part.leader_id == member.broker.node_id


def cached(cluster: InProcessCluster, topic: str, partition: int) -> set[tuple[int, tuple[int, ...]]]:
    """(leader, ISR) as each live broker's metadata cache has them (one element once they agree)."""
    found = set()
    for member in cluster.members.values():
        meta = member.broker.metadata.partitions.get((topic, partition))
        found.add((-2, ()) if meta is None else (meta.leader, tuple(sorted(meta.isr))))
    return found


def test_first_leaders_reach_every_broker(tmp_path: Path) -> None:
    async def scenario(cluster: InProcessCluster, admin: KafkaMetadataClient) -> None:
        create_topic(admin, "t", {0: [0, 1, 2], 1: [1, 2, 0], 2: [2, 0, 1]})
        for p in range(3):
            await cluster.until(lambda p=p: leads(cluster.members[p], "t", p), f"t-{p} led by {p}")
            await cluster.until(lambda p=p: cached(cluster, "t", p) == {(p, (0, 1, 2))}, "metadata")
        follower = cluster.members[1].broker.replica_manager.partitions[("t", 0)]
        assert follower.leader_id == 0

    run(tmp_path, 3, scenario)


def test_a_dead_leader_is_replaced_from_the_isr(tmp_path: Path) -> None:
    async def scenario(cluster: InProcessCluster, admin: KafkaMetadataClient) -> None:
        create_topic(admin, "t", {0: [2, 1, 0]})
        await cluster.until(lambda: cached(cluster, "t", 0) == {(2, (0, 1, 2))}, "first leader")
        before = admin.get_partition_state("t", 0)
        assert before is not None
        await cluster.kill(2)
        await cluster.until(lambda: leads(cluster.members[1], "t", 0), "broker 1 to lead")
        await cluster.until(lambda: cached(cluster, "t", 0) == {(1, (0, 1))}, "the new leader everywhere")
        after = admin.get_partition_state("t", 0)
        assert after is not None and after.leader_epoch == before.leader_epoch + 1

    run(tmp_path, 3, scenario)


def test_reassignment_completes_through_real_replication(tmp_path: Path) -> None:
    async def scenario(cluster: InProcessCluster, admin: KafkaMetadataClient) -> None:
        create_topic(admin, "t", {0: [0, 1]})
        await cluster.until(lambda: cached(cluster, "t", 0) == {(0, (0, 1))}, "first leader")
        controller = cluster.controller()
        assert controller is not None
        control = controller.control.controller
        outcome = await control.call(lambda: control.reassign({("t", 0): [0, 2]}))
        assert outcome[("t", 0)][0] == 0
        # broker 2 fetches from the leader, joins the ISR, and the move completes: 1 is removed
        await cluster.until(
            lambda: (a := admin.get_topic_assignment("t")) is not None and a[0].partitions[0] == [0, 2],
            "the reassignment to complete",
        )
        await cluster.until(lambda: cached(cluster, "t", 0) == {(0, (0, 2))}, "the new ISR everywhere")
        await cluster.until(
            lambda: ("t", 0) not in cluster.members[1].broker.replica_manager.partitions, "1 stops"
        )
        assert await control.call(control.list_reassignments) == {}

    run(tmp_path, 3, scenario)


def test_topic_deletion_removes_every_replica(tmp_path: Path) -> None:
    async def scenario(cluster: InProcessCluster, admin: KafkaMetadataClient) -> None:
        create_topic(admin, "t", {0: [0, 1], 1: [1, 0]})
        await cluster.until(lambda: cached(cluster, "t", 1) == {(1, (0, 1))}, "leaders")
        log_dirs = [Path(m.broker.config.log_dirs[0]) / "t-0" for m in cluster.members.values()]
        # Metadata can reach a broker before the LeaderAndIsr that makes its replica's log.
        await cluster.until(lambda: all(d.exists() for d in log_dirs), "every replica's log made")
        admin.mark_topic_for_deletion("t")
        await cluster.until(lambda: admin.get_topic_assignment("t") is None, "the znodes to go")
        await cluster.until(
            lambda: all(
                ("t", 0) not in m.broker.replica_manager.partitions for m in cluster.members.values()
            ),
            "every replica stopped",
        )
        await cluster.until(lambda: not any(d.exists() for d in log_dirs), "the logs deleted")
        await cluster.until(lambda: cached(cluster, "t", 0) == {(-2, ())}, "the topic gone from metadata")

    run(tmp_path, 2, scenario)


def test_controlled_shutdown_hands_leadership_over_first(tmp_path: Path) -> None:
    async def scenario(cluster: InProcessCluster, admin: KafkaMetadataClient) -> None:
        create_topic(admin, "t", {0: [1, 0, 2]})
        await cluster.until(lambda: cached(cluster, "t", 0) == {(1, (0, 1, 2))}, "first leader")
        before = admin.get_partition_state("t", 0)
        assert before is not None
        await cluster.stop_broker(1)
        # the stopping broker asked the controller, which moved leadership while it was still alive
        moved = admin.get_partition_state("t", 0)
        assert moved is not None and moved.leader == 0 and 1 not in moved.isr
        await cluster.until(lambda: cached(cluster, "t", 0) == {(0, (0, 2))}, "the new leader everywhere")

    run(tmp_path, 3, scenario)


def test_controller_fail_over_to_another_broker(tmp_path: Path) -> None:
    async def scenario(cluster: InProcessCluster, admin: KafkaMetadataClient) -> None:
        first = cluster.controller()
        assert first is not None
        first_id = first.broker.node_id
        epoch = first.control.controller.epoch
        others = [b for b in cluster.broker_ids if b != first_id]
        create_topic(admin, "t", {0: [first_id, *others]})
        await cluster.until(lambda: leads(first, "t", 0), "the controller's broker to lead")
        await cluster.kill(first_id)
        await cluster.until(lambda: cluster.controller() is not None, "a new controller")
        second = cluster.controller()
        assert second is not None and second.broker.node_id != first_id
        assert second.control.controller.epoch == epoch + 1
        await cluster.until(lambda: cached(cluster, "t", 0) == {(others[0], tuple(sorted(others)))}, "leader")
        state = admin.get_partition_state("t", 0)
        assert state is not None and state.controller_epoch == epoch + 1

    run(tmp_path, 3, scenario)
