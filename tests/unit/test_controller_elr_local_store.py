"""The real `Controller` over the local metadata store (the harness of test_controller_local_store):
restarts and renewals the controller learns of in an event after the failure, the min ISR its
eligible leader replicas (KIP-966) are kept by, and what it does when its own session expires."""

from __future__ import annotations

import asyncio

from tests.metadata_store_contract import until
from tests.unit.test_controller_local_store import (
    TOPIC_ID,
    Broker,
    run,
    until_state,
)

from strom._util.clock import ManualClock
from strom.cluster.broker_config_znodes import BrokerConfigZnodes
from strom.cluster.kafka_metadata import KafkaMetadataClient
from strom.cluster.local_store import LocalStore
from strom.cluster.zk_paths import BrokerRegistration, TopicAssignment
from strom.protocol.api import ApiKey
from strom.protocol.messages import LeaderAndIsrResponsePartitionError


async def create(client: KafkaMetadataClient, replicas: list[int], configs: dict[str, str]) -> None:
    client.create_topic("t", TopicAssignment(TOPIC_ID, {0: replicas}), configs)
    await until_state(client, "t", 0, lambda s: s.leader == replicas[0])


async def both_gone(admin: KafkaMetadataClient, brokers: list[Broker]) -> None:
    """Brokers 2 and 3, the partition's only replicas, die before the controller reacts: nobody can
    lead, and the ISR is kept whole for a member to come back and lead."""
    await create(admin, [2, 3], {})
    brokers[1].session.close()
    brokers[2].session.close()
    down = await until_state(admin, "t", 0, lambda s: s.leader == -1)
    assert sorted(down.isr) == [2, 3]


def test_a_restart_seen_in_a_later_event_is_not_elected_while_another_member_may_return() -> None:
    """Broker 2 comes back as a new process, registered in an event after the one that took it for
    dead: it may have lost what it had (a machine crash), so the partition waits for broker 3,
    whose log may be whole, as it does when both show in one event."""

    async def scenario(store: LocalStore, brokers: list[Broker]) -> None:
        admin = brokers[0].client
        await both_gone(admin, brokers)
        Broker(store, 2, ManualClock())
        channel = brokers[0].channel
        await until(lambda: 2 in channel.brokers, "broker 2 live again")
        waiting = await until_state(admin, "t", 0, lambda s: list(s.isr) == [3])
        assert waiting.leader == -1
        assert waiting.restarted == (2,)
        Broker(store, 3, ManualClock())  # every member restarted: the longest log leads, once known
        both = await until_state(admin, "t", 0, lambda s: s.restarted == (2, 3))
        assert both.leader == -1
        controller = brokers[0].controller
        # Their answers to the LeaderAndIsr without a leader (here broker 2's log got further).
        for broker, end in ((3, 700), (2, 760)):
            epoch = controller.ctx.live[broker].epoch
            answer: LeaderAndIsrResponsePartitionError = {
                "topic_name": "t",
                "partition_index": 0,
                "error_code": 0,
                "last_epoch": 0,
                "log_end_offset": end,
            }
            controller.on_leader_and_isr_response(broker, epoch, [answer])
        led = await until_state(admin, "t", 0, lambda s: s.leader != -1)
        assert (led.leader, list(led.isr), led.restarted, led.elr) == (2, [2], (), ())

    run(3, scenario)


def test_a_renewal_seen_in_a_later_event_leads_again() -> None:
    """Broker 2's process never stopped: its session expired and it registers again naming the epochs
    it had (here two renewals, the controller having seen only the first epoch). It leads."""

    async def scenario(store: LocalStore, brokers: list[Broker]) -> None:
        admin = brokers[0].client
        first = admin.get_brokers()[2].epoch
        await both_gone(admin, brokers)
        session = store.session(asyncio.get_running_loop())
        client = KafkaMetadataClient(session)
        client.start()
        client.register_broker(
            BrokerRegistration(2, "127.0.0.1", 9002, None, previous_epochs=(first, first + 1000))
        )
        led = await until_state(admin, "t", 0, lambda s: s.leader == 2)
        assert list(led.isr) == [2]

    run(3, scenario)


def test_eligible_replicas_follow_the_cluster_default_min_isr_and_go_when_it_is_lowered() -> None:
    """The controller's min ISR is the leaders': the topic has none of its own, so the cluster-wide
    dynamic default (3) counts. Broker 3 dies: the ISR is below it, 3 is eligible. The default is
    lowered to 2: the ISR of two now acknowledges without broker 3, which must not stay eligible."""

    async def scenario(store: LocalStore, brokers: list[Broker]) -> None:
        admin = brokers[0].client
        BrokerConfigZnodes(admin).write("<default>", {"min.insync.replicas": "3"})
        await create(admin, [1, 2, 3], {})
        brokers[2].session.close()
        shrunk = await until_state(admin, "t", 0, lambda s: 3 not in s.isr)
        assert [b for b, _ in shrunk.elr] == [3]
        controller = brokers[0].controller
        BrokerConfigZnodes(admin).write("<default>", {"min.insync.replicas": "2"})
        controller.enqueue(lambda: controller.on_config_change(None))
        cleared = await until_state(admin, "t", 0, lambda s: not s.elr)
        assert (cleared.leader, sorted(cleared.isr)) == (1, [1, 2])
        assert cleared.leader_epoch == shrunk.leader_epoch + 1
        channel = brokers[0].channel
        told = [e for body in channel.of(ApiKey.LEADER_AND_ISR, 2) for e in body["partition_states"]]
        assert told[-1]["leader_epoch"] == cleared.leader_epoch

    run(3, scenario)


def test_a_topic_min_isr_raised_keeps_them_and_one_lowered_to_the_isr_size_drops_them() -> None:
    async def scenario(store: LocalStore, brokers: list[Broker]) -> None:
        admin = brokers[0].client
        await create(admin, [1, 2, 3], {"min.insync.replicas": "2"})
        brokers[1].session.close()
        brokers[2].session.close()
        alone = await until_state(admin, "t", 0, lambda s: list(s.isr) == [1])
        assert sorted(b for b, _ in alone.elr) == [2, 3]
        controller = brokers[0].controller
        admin.set_topic_config("t", {"min.insync.replicas": "3"})  # still refusing: nothing to do
        controller.enqueue(lambda: controller.on_config_change("t"))
        admin.set_topic_config("t", {"min.insync.replicas": "1"})  # broker 1 alone acknowledges
        controller.enqueue(lambda: controller.on_config_change("t"))
        cleared = await until_state(admin, "t", 0, lambda s: not s.elr)
        assert cleared.leader_epoch == alone.leader_epoch + 1  # one write: the raise wrote nothing

    run(3, scenario)


def test_an_expired_session_resigns_at_once_and_stands_again_only_once_registered() -> None:
    async def scenario(store: LocalStore, brokers: list[Broker]) -> None:
        controller = brokers[0].controller
        controller.session_expired()
        assert not controller.active
        controller.enqueue(controller.elect)  # the /controller watch firing meanwhile
        await asyncio.sleep(0.05)
        assert not controller.active
        controller.stand()
        await until(lambda: controller.active, "the controller again")

    run(3, scenario)
