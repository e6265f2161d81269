"""The real `Controller` over the local metadata store, no ZooKeeper and no sockets: brokers are
sessions on one `LocalStore` that register themselves, the controller's requests land in a recording
channel. First leaders of a new topic, fail-over when a registration disappears, ISR change
notifications, reassignment, topic deletion, controlled shutdown, and controller fail-over with the
deposed controller's writes fenced."""

from __future__ import annotations

import asyncio
import json
import logging
import re
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from tests.metadata_store_contract import until

from strom._util.clock import ManualClock
from strom.cluster import zk_paths as paths
from strom.cluster.controller import Controller, ControllerConfig
from strom.cluster.election import LeaderAndIsr
from strom.cluster.kafka_metadata import KafkaMetadataClient
from strom.cluster.local_store import LocalSession, LocalStore
from strom.cluster.metadata_store import ControllerMovedError
from strom.cluster.zk_paths import BrokerRegistration, TopicAssignment
from strom.protocol.api import ApiKey
from strom.protocol.errors import ErrorCode
from strom.protocol.uuid_text import uuid_text

TOPIC_ID = bytes(range(16))


class RecordingChannel:
    """The controller's requests, as (broker id, api key, body), in the order it sent them."""

    def __init__(self) -> None:
        self.sent: list[tuple[int, int, dict[str, Any]]] = []
        self.brokers: dict[int, BrokerRegistration] = {}

    def set_brokers(self, brokers: dict[int, BrokerRegistration]) -> None:
        self.brokers = dict(brokers)

    def send(self, broker_id: int, api_key: int, body: dict[str, Any]) -> None:
        self.sent.append((broker_id, api_key, body))

    def of(self, api_key: ApiKey, broker_id: int | None = None) -> list[dict[str, Any]]:
        return [b for to, key, b in self.sent if key == api_key and broker_id in (None, to)]


class Broker:
    """What a broker does in the metadata store: its session, its registration, maybe a controller."""

    def __init__(self, store: LocalStore, broker_id: int, clock: ManualClock) -> None:
        self.broker_id = broker_id
        self.session: LocalSession = store.session(asyncio.get_running_loop())
        self.client = KafkaMetadataClient(self.session)
        self.client.start()
        self.client.register_broker(BrokerRegistration(broker_id, "127.0.0.1", 9000 + broker_id, None))
        self.channel = RecordingChannel()
        self.controller = Controller(
            self.client, broker_id, self.channel, ControllerConfig(auto_leader_rebalance=False), clock
        )


Scenario = Callable[[LocalStore, list[Broker]], Awaitable[None]]


def run(brokers: int, scenario: Scenario) -> None:
    """``brokers`` registered brokers (ids 1..n); broker 1's controller is started first, so it wins."""

    async def main() -> None:
        store = LocalStore()
        clock = ManualClock()  # the controller's periodic checks wait on it: they never run here
        members = [Broker(store, i, clock) for i in range(1, brokers + 1)]
        members[0].controller.start()
        await until(lambda: members[0].controller.active, "the first controller")
        try:
            await scenario(store, members)
        finally:
            for member in members:
                await member.controller.stop()
            store.close()

    asyncio.run(main())


def state(client: KafkaMetadataClient, topic: str, partition: int) -> LeaderAndIsr | None:
    return client.get_partition_state(topic, partition)


async def until_state(
    client: KafkaMetadataClient, topic: str, partition: int, check: Callable[[LeaderAndIsr], bool]
) -> LeaderAndIsr:
    await until(
        lambda: (s := state(client, topic, partition)) is not None and check(s), f"{topic}-{partition}"
    )
    found = state(client, topic, partition)
    assert found is not None
    return found


async def create_topic(client: KafkaMetadataClient, partitions: dict[int, list[int]]) -> None:
    client.create_topic("t", TopicAssignment(TOPIC_ID, partitions), {})
    for p, replicas in partitions.items():
        await until_state(client, "t", p, lambda s, r=replicas: s.leader == r[0])


def test_first_leaders_of_a_new_topic() -> None:
    async def scenario(store: LocalStore, brokers: list[Broker]) -> None:
        admin = brokers[2].client  # any broker writes the assignment; the controller does the rest
        await create_topic(admin, {0: [1, 2, 3], 1: [2, 3, 1], 2: [3, 1, 2]})
        for p, leader in ((0, 1), (1, 2), (2, 3)):
            s = state(admin, "t", p)
            assert s is not None and (s.leader, s.leader_epoch) == (leader, 0)
            assert sorted(s.isr) == [1, 2, 3] and s.controller_epoch == brokers[0].controller.epoch
        channel = brokers[0].channel
        await until(lambda: bool(channel.of(ApiKey.LEADER_AND_ISR, 3)), "LeaderAndIsr to broker 3")
        told = {
            (e["topic_name"], e["partition_index"], e["leader"])
            for body in channel.of(ApiKey.LEADER_AND_ISR, 3)
            for e in body["partition_states"]
        }
        assert {("t", 0, 1), ("t", 1, 2), ("t", 2, 3)} <= told
        assert sorted(channel.brokers) == [1, 2, 3]

    run(3, scenario)


def test_the_timing_line_names_the_store_it_read(caplog: pytest.LogCaptureFixture) -> None:
    """A cluster of one's controller reads and writes the local store, and its timing line says so
    (bench/cluster_failover_bench.py parses the same line from a ZooKeeper cluster)."""
    caplog.set_level(logging.INFO, logger="strom.cluster.controller")

    async def scenario(store: LocalStore, brokers: list[Broker]) -> None:
        await create_topic(brokers[0].client, {0: [1]})

    run(1, scenario)
    timings = [r.getMessage() for r in caplog.records if "controller timing" in r.getMessage()]
    assert timings, "no controller timing line"
    for line in timings:
        assert re.search(r"total [\d.]+ s, local store reads \d+ in [\d.]+ s, writes \d+ in", line), line
    assert any(re.search(r"local store reads [1-9]", line) for line in timings), timings


def test_a_topic_znode_without_an_assignment_does_not_stop_later_topics() -> None:
    """A ``/brokers/topics/<t>`` holding no assignment (made as the parent of a partition-state znode, as
    the in-process test harness did, or written by a tool) is a topic without partitions. It must not
    fail the controller's topic event: that event also brings every later topic online, so one such
    znode used to leave each topic created after it without leaders (KeyError 'partitions')."""

    async def scenario(store: LocalStore, brokers: list[Broker]) -> None:
        admin = brokers[0].client
        admin.store.create(paths.partition_state_path("stray", 0), b"{}", make_parents=True)
        await create_topic(admin, {0: [1]})
        s = state(admin, "t", 0)
        assert s is not None and s.leader == 1
        assert brokers[0].controller.ctx.assignments.get("stray") is not None

    run(1, scenario)


def test_leader_fails_over_when_a_registration_disappears() -> None:
    async def scenario(store: LocalStore, brokers: list[Broker]) -> None:
        admin = brokers[0].client
        await create_topic(admin, {0: [2, 3, 1], 1: [1, 3, 2]})
        before = state(admin, "t", 0)
        assert before is not None
        brokers[1].session.close()  # broker 2 dies: its ephemeral registration goes
        moved = await until_state(admin, "t", 0, lambda s: s.leader == 3)
        assert moved.leader_epoch == before.leader_epoch + 1 and sorted(moved.isr) == [1, 3]
        shrunk = await until_state(admin, "t", 1, lambda s: 2 not in s.isr)
        assert shrunk.leader == 1
        channel = brokers[0].channel
        assert sorted(channel.brokers) == [1, 3]
        told = [
            e
            for body in channel.of(ApiKey.LEADER_AND_ISR, 3)
            for e in body["partition_states"]
            if e["partition_index"] == 0 and e["leader"] == 3
        ]
        assert told and told[-1]["leader_epoch"] == moved.leader_epoch

    run(3, scenario)


def test_an_isr_change_notification_reaches_every_broker() -> None:
    async def scenario(store: LocalStore, brokers: list[Broker]) -> None:
        admin = brokers[0].client
        await create_topic(admin, {0: [2, 1, 3]})
        current = state(admin, "t", 0)
        assert current is not None
        leader = brokers[1].client  # the leader shrinks its ISR: conditional write, then notification
        shrunk = LeaderAndIsr(2, current.leader_epoch, (2, 1), current.controller_epoch, current.zk_version)
        assert leader.update_partition_state("t", 0, shrunk) is not None
        leader.notify_isr_change([("t", 0)])
        channel = brokers[0].channel

        def isr_sent() -> bool:
            return any(
                ps["isr"] == [2, 1]
                for body in channel.of(ApiKey.UPDATE_METADATA, 3)
                for topic in body["topics"]
                for ps in topic["partition_states"]
            )

        await until(isr_sent, "UpdateMetadata with the new ISR")
        await until(
            lambda: admin.store.children(paths.ISR_CHANGE_NOTIFICATION) == [], "the notification deleted"
        )
        assert brokers[0].controller.ctx.leadership[("t", 0)].isr == (2, 1)

    run(3, scenario)


def test_a_log_dir_failure_moves_leadership_and_shrinks_the_isr() -> None:
    """KIP-112: broker 2 reports a failed log dir holding its replicas of t-0 (which it leads) and t-1
    (a follower): t-0 gets a new leader from the rest of the ISR, broker 2 leaves both ISRs, the
    notification is deleted, and broker 2 stays out of a later election until it registers again."""

    async def scenario(store: LocalStore, brokers: list[Broker]) -> None:
        admin = brokers[0].client
        await create_topic(admin, {0: [2, 1, 3], 1: [1, 2, 3]})
        brokers[1].client.notify_log_dir_failure(2, [("t", 0), ("t", 1)])
        moved = await until_state(admin, "t", 0, lambda s: s.leader in (1, 3) and 2 not in s.isr)
        shrunk = await until_state(admin, "t", 1, lambda s: 2 not in s.isr)
        assert shrunk.leader == 1 and sorted(shrunk.isr) == [1, 3]
        await until(
            lambda: admin.store.children(paths.LOG_DIR_EVENT_NOTIFICATION) == [], "the notification deleted"
        )
        controller = brokers[0].controller
        assert controller.ctx.offline_dir_replicas == {2: {("t", 0), ("t", 1)}}
        # Broker 2 back in the stored ISR (as if it had caught up): still not eligible to lead t-0.
        grown = LeaderAndIsr(
            moved.leader, moved.leader_epoch, (*moved.isr, 2), moved.controller_epoch, moved.zk_version
        )
        assert admin.update_partition_state("t", 0, grown) is not None
        admin.notify_isr_change([("t", 0)])
        await until(lambda: 2 in controller.ctx.leadership[("t", 0)].isr, "the grown ISR read")
        decided = await controller.call(lambda: controller.partitions.handle_offline_all([("t", 0)]))
        assert decided == {("t", 0)} and 2 not in controller.ctx.leadership[("t", 0)].isr

    run(3, scenario)


def test_a_storage_error_answer_to_leader_and_isr_takes_the_replicas_out() -> None:
    """KIP-112 after a new registration (or under a new controller): nothing is known offline until
    broker 2 answers a LeaderAndIsr with KAFKA_STORAGE_ERROR for t-0; then t-0 gets a new leader and
    broker 2 leaves its ISR. An answer of broker 2's previous registration is ignored, and a repeated one
    changes nothing."""

    async def scenario(store: LocalStore, brokers: list[Broker]) -> None:
        admin = brokers[0].client
        await create_topic(admin, {0: [2, 1, 3], 1: [2, 3, 1]})
        controller = brokers[0].controller
        failures = controller.log_dir_failures
        epoch = controller.ctx.live[2].epoch
        storage_error = int(ErrorCode.KAFKA_STORAGE_ERROR)

        def answer(broker_epoch: int, partition: int, code: int = storage_error) -> Any:
            errors = [{"topic_name": "t", "partition_index": partition, "error_code": code}]
            return controller.call(lambda: failures.storage_errors_answered(2, broker_epoch, errors))

        assert await answer(epoch - 1, 1) == set()  # the previous registration's process
        assert await answer(epoch, 1, int(ErrorCode.NONE)) == set()
        assert await answer(epoch, 0) == {("t", 0)}
        moved = await until_state(admin, "t", 0, lambda s: s.leader in (1, 3) and 2 not in s.isr)
        assert sorted(moved.isr) == [1, 3]
        assert controller.ctx.offline_dir_replicas == {2: {("t", 0)}}
        assert await answer(epoch, 0) == set()  # known already
        assert controller.ctx.leadership[("t", 1)].leader == 2

    run(3, scenario)


def test_reassignment_adds_a_replica_then_completes_once_it_is_in_sync() -> None:
    async def scenario(store: LocalStore, brokers: list[Broker]) -> None:
        admin = brokers[0].client
        await create_topic(admin, {0: [1, 2, 3]})
        controller = brokers[0].controller
        outcome = await controller.call(lambda: controller.reassign({("t", 0): [1, 2, 4]}))
        assert outcome[("t", 0)][0] == 0
        found = admin.get_topic_assignment("t")
        assert found is not None and found[0].adding_replicas == {0: [4]}
        assert found[0].removing_replicas == {0: [3]}
        # broker 4 catches up: the leader adds it to the ISR and tells the controller
        current = state(admin, "t", 0)
        assert current is not None
        grown = LeaderAndIsr(
            1, current.leader_epoch, (*current.isr, 4), current.controller_epoch, current.zk_version
        )
        assert admin.update_partition_state("t", 0, grown) is not None
        admin.notify_isr_change([("t", 0)])
        await until(
            lambda: (a := admin.get_topic_assignment("t")) is not None and a[0].partitions[0] == [1, 2, 4],
            "the reassignment to complete",
        )
        done = await until_state(admin, "t", 0, lambda s: 3 not in s.isr)
        assert done.leader == 1 and sorted(done.isr) == [1, 2, 4]
        stopped = [
            (p["topic_name"], p["partition_index"])
            for body in brokers[0].channel.of(ApiKey.STOP_REPLICA, 3)
            if body["delete_partitions"]
            for p in body["partitions"]
        ]
        assert stopped == [("t", 0)]
        assert await controller.call(controller.list_reassignments) == {}

    run(4, scenario)


def test_topic_deletion_removes_the_znodes_and_the_replicas() -> None:
    async def scenario(store: LocalStore, brokers: list[Broker]) -> None:
        admin = brokers[1].client
        await create_topic(admin, {0: [1, 2], 1: [2, 1]})
        admin.mark_topic_for_deletion("t")
        await until(lambda: admin.get_topic_assignment("t") is None, "the topic's znodes deleted")
        assert admin.store.children(paths.DELETE_TOPICS) == []
        assert admin.get_topic_config("t") == {}
        channel = brokers[0].channel
        for broker_id in (1, 2):
            deleted = {
                (p["topic_name"], p["partition_index"])
                for body in channel.of(ApiKey.STOP_REPLICA, broker_id)
                if body["delete_partitions"]
                for p in body["partitions"]
            }
            assert deleted == {("t", 0), ("t", 1)}
        assert channel.of(ApiKey.UPDATE_METADATA)[-1]["deleted_topics"] == ["t"]
        assert "t" not in brokers[0].controller.ctx.assignments

    run(2, scenario)


def test_controlled_shutdown_moves_leadership_away() -> None:
    async def scenario(store: LocalStore, brokers: list[Broker]) -> None:
        admin = brokers[0].client
        await create_topic(admin, {0: [2, 1, 3], 1: [1, 2, 3], 2: [3, 1, 2]})
        controller = brokers[0].controller
        remaining = await controller.call(lambda: controller.controlled_shutdown(2))
        assert remaining == []
        moved = state(admin, "t", 0)
        assert moved is not None and moved.leader == 1 and 2 not in moved.isr
        for p in (1, 2):
            follower = state(admin, "t", p)
            assert follower is not None and 2 not in follower.isr
        stopped = {
            (p["topic_name"], p["partition_index"])
            for body in brokers[0].channel.of(ApiKey.STOP_REPLICA, 2)
            if not body["delete_partitions"]
            for p in body["partitions"]
        }
        assert stopped == {("t", 1), ("t", 2)}

    run(3, scenario)


def test_controller_fail_over_fences_the_deposed_controller() -> None:
    async def scenario(store: LocalStore, brokers: list[Broker]) -> None:
        first, second = brokers[0], brokers[1]
        second.controller.start()  # a candidate: /controller is taken, so it watches
        await create_topic(first.client, {0: [1, 2], 1: [2, 1]})
        old_epoch, old_version = first.controller.ctx.epoch, first.controller.ctx.epoch_zk_version
        # broker 1 is cut off and its session expires: /controller and its registration go
        first.session.suspend()
        first.session.expire()
        await until(lambda: second.controller.active, "the second controller")
        assert second.controller.epoch == old_epoch + 1
        moved = await until_state(second.client, "t", 0, lambda s: s.leader == 2)
        assert moved.controller_epoch == old_epoch + 1
        # broker 1 comes back under a new session: its controller learns it was deposed ...
        first.session.resume()
        await until(lambda: not first.controller.active, "the first controller to resign")
        assert second.controller.active
        # ... and whatever it still tries to write with its old epoch is refused
        stale = LeaderAndIsr(1, moved.leader_epoch + 1, (1,), old_epoch, moved.zk_version)
        with pytest.raises(ControllerMovedError):
            first.client.update_partition_states([(("t", 0), stale)], old_version)
        assert state(second.client, "t", 0) == moved
        assert {body["controller_epoch"] for body in second.channel.of(ApiKey.UPDATE_METADATA)} == {
            old_epoch + 1
        }

    run(2, scenario)


def test_a_topic_written_before_topic_ids_gets_one() -> None:
    """KIP-516 upgrade: a topic znode without an id (Kafka before 2.8, or older Strom) gets a fresh id
    in Kafka's text form when the controller loads it, before any broker is told about the topic."""

    async def scenario(store: LocalStore, brokers: list[Broker]) -> None:
        admin = brokers[1].client
        old_format = b'{"version":2,"partitions":{"0":[1,2]},"adding_replicas":{},"removing_replicas":{}}'
        admin.store.create(paths.topic_path("old"), old_format, make_parents=True)
        await until_state(admin, "old", 0, lambda s: s.leader == 1)
        found = admin.get_topic_assignment("old")
        assert found is not None
        topic_id = found[0].topic_id
        assert topic_id != bytes(16)
        text = json.loads(admin.store.get(paths.topic_path("old"))[0])["topic_id"]
        assert text == uuid_text(topic_id) and len(text) == 22
        told = {
            bytes(e["topic_id"])
            for body in brokers[0].channel.of(ApiKey.LEADER_AND_ISR)
            for e in body["partition_states"]
            if e["topic_name"] == "old"
        }
        assert told == {topic_id}

    run(2, scenario)


def bounce(store: LocalStore, broker: Broker, clock: ManualClock) -> Broker:
    """The broker's process restarts: its session ends and the new one registers at once, before the
    controller's watch runs (so the controller sees only a new registration of the same id)."""
    broker.session.close()
    return Broker(store, broker.broker_id, clock)


def test_a_bounced_broker_leaves_every_isr_and_its_leaderships_first() -> None:
    """A restart may have lost unsynced writes: the new process must not keep the old one's
    leadership or ISR membership (Kafka: a bounce is a failure, then a start)."""

    async def scenario(store: LocalStore, brokers: list[Broker]) -> None:
        admin = brokers[0].client
        await create_topic(admin, {0: [2, 3, 1], 1: [1, 2, 3]})
        before = state(admin, "t", 0)
        assert before is not None
        restarted = bounce(store, brokers[1], ManualClock())
        moved = await until_state(admin, "t", 0, lambda s: s.leader != 2)
        assert moved.leader == 3 and moved.leader_epoch == before.leader_epoch + 1
        assert 2 not in moved.isr
        shrunk = await until_state(admin, "t", 1, lambda s: 2 not in s.isr)
        assert shrunk.leader == 1
        channel = brokers[0].channel
        await until(lambda: channel.brokers.get(2) is not None, "broker 2 live again")
        told = [e for body in channel.of(ApiKey.LEADER_AND_ISR, 2) for e in body["partition_states"]]
        assert told and all(e["leader"] != 2 for e in told[-2:])
        assert admin.get_broker_epochs() == {b: r.epoch for b, r in admin.get_brokers().items()}
        assert restarted.client.get_brokers()[2].epoch == channel.brokers[2].epoch

    run(3, scenario)


def test_a_controller_elected_after_a_bounce_nobody_saw_treats_it_as_one() -> None:
    """The controller dies, a broker restarts and registers again before another controller is
    elected: the new controller finds it registered and in the ISR, but under a registration no
    controller took in (``/strom/broker_epochs``), so it is not left leading what its previous
    process led."""

    async def scenario(store: LocalStore, brokers: list[Broker]) -> None:
        admin = brokers[1].client
        brokers[1].controller.start()  # a candidate
        await create_topic(admin, {0: [3, 2, 1]})
        brokers[0].session.close()  # the controller's process dies ...
        bounce(store, brokers[2], ManualClock())  # ... and broker 3 restarts, all before anyone reacts
        await until(lambda: brokers[1].controller.active, "the second controller")
        moved = await until_state(admin, "t", 0, lambda s: s.leader != 3)
        assert moved.leader == 2 and 3 not in moved.isr

    run(3, scenario)
