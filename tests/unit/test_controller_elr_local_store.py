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
from strom.cluster.election import ElectionType
from strom.cluster.kafka_metadata import KafkaMetadataClient
from strom.cluster.local_store import LocalStore
from strom.cluster.zk_paths import BrokerRegistration, TopicAssignment
from strom.protocol.api import ApiKey
from strom.protocol.errors import ErrorCode
from strom.protocol.messages import LeaderAndIsrResponsePartitionError


def _log_end(end: int) -> LeaderAndIsrResponsePartitionError:
    """A broker's answer for t-0 without a leader: its log ends at ``end``, in leader epoch 0."""
    return {"topic_name": "t", "partition_index": 0, "error_code": 0, "last_epoch": 0, "log_end_offset": end}


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
            controller.on_leader_and_isr_response(broker, controller.ctx.live[broker].epoch, [_log_end(end)])
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


def test_a_topic_made_again_is_judged_by_its_new_min_isr() -> None:
    """Deleted with min ISR 3 and made again with min ISR 1: the controller's cached value of the old
    topic must not keep eligible replicas the new one's leaders acknowledge without."""

    async def scenario(store: LocalStore, brokers: list[Broker]) -> None:
        admin = brokers[0].client
        controller = brokers[0].controller
        await create(admin, [1, 2, 3], {"min.insync.replicas": "3"})
        brokers[2].session.close()
        await until_state(admin, "t", 0, lambda s: 3 not in s.isr and bool(s.elr))
        admin.mark_topic_for_deletion("t")
        await until(lambda: "t" not in controller.ctx.assignments, "the topic deleted")
        admin.create_topic(
            "t", TopicAssignment(bytes(range(1, 17)), {0: [1, 2]}), {"min.insync.replicas": "1"}
        )
        await until_state(admin, "t", 0, lambda s: s.leader == 1)
        brokers[1].session.close()
        shrunk = await until_state(admin, "t", 0, lambda s: 2 not in s.isr)
        assert shrunk.elr == ()

    run(3, scenario)


def test_a_replica_a_reassignment_removed_is_no_eligible_leader_when_added_back() -> None:
    """Broker 3, eligible (removed from an ISR below min ISR 3), is moved off the partition (its log
    deleted) and added back: it must not lead from its old eligibility with an empty log."""

    async def scenario(store: LocalStore, brokers: list[Broker]) -> None:
        admin = brokers[0].client
        controller = brokers[0].controller
        await create(admin, [1, 2, 3], {"min.insync.replicas": "3"})
        epoch = admin.get_brokers()[3].epoch
        brokers[2].session.close()
        await until_state(admin, "t", 0, lambda s: [b for b, _ in s.elr] == [3])
        session = store.session(asyncio.get_running_loop())
        renewed = KafkaMetadataClient(session)
        renewed.start()  # the same process registers again: it would be electable
        renewed.register_broker(BrokerRegistration(3, "127.0.0.1", 9003, None, previous_epochs=(epoch,)))
        await until(lambda: 3 in controller.ctx.live, "broker 3 live again")
        await controller.call(lambda: controller.reassign({("t", 0): [1, 2]}))
        moved = await until_state(admin, "t", 0, lambda s: not s.elr)
        assert controller.ctx.replicas(("t", 0)) == [1, 2] and 3 not in moved.isr
        await controller.call(lambda: controller.reassign({("t", 0): [1, 2, 3]}))
        brokers[1].session.close()
        alone = await until_state(admin, "t", 0, lambda s: 2 not in s.isr)
        assert 3 not in controller.ctx.electable(("t", 0), alone.elr)

    run(3, scenario)


def test_a_new_controller_drops_eligible_replicas_a_lowered_min_isr_made_stale() -> None:
    """min.insync.replicas is lowered while the controller moves (nobody hears the notification): the
    next controller checks every partition's eligible replicas when it takes over."""

    async def scenario(store: LocalStore, brokers: list[Broker]) -> None:
        admin = brokers[0].client
        await create(admin, [1, 2, 3], {"min.insync.replicas": "3"})
        brokers[2].session.close()
        await until_state(admin, "t", 0, lambda s: 3 not in s.isr and bool(s.elr))
        admin.set_topic_config("t", {"min.insync.replicas": "2"})
        brokers[1].controller.start()
        brokers[0].controller.session_expired()
        await until(lambda: brokers[1].controller.active, "the second controller")
        cleared = await until_state(admin, "t", 0, lambda s: not s.elr)
        assert sorted(cleared.isr) == [1, 2]

    run(3, scenario)


def test_an_eligible_replica_is_not_elected_when_the_store_says_the_isr_was_at_min_isr() -> None:
    """Broker 3 is eligible (out of ISR [2] below min ISR 2) and back as the same process. Min ISR is
    lowered to 1, and the notification has not reached the controller when broker 2 dies: broker 2
    may have acknowledged alone since, so the controller reads the value from the store before
    electing broker 3, and waits for broker 2 instead."""

    async def scenario(store: LocalStore, brokers: list[Broker]) -> None:
        admin = brokers[0].client
        controller = brokers[0].controller
        await create(admin, [2, 3], {"min.insync.replicas": "2"})
        epoch = admin.get_brokers()[3].epoch
        brokers[2].session.close()
        await until_state(admin, "t", 0, lambda s: [b for b, _ in s.elr] == [3])
        session = store.session(asyncio.get_running_loop())
        renewed = KafkaMetadataClient(session)
        renewed.start()
        renewed.register_broker(BrokerRegistration(3, "127.0.0.1", 9003, None, previous_epochs=(epoch,)))
        await until(lambda: 3 in controller.ctx.live, "broker 3 renewed")
        assert controller.ctx.electable(("t", 0), controller.ctx.leadership[("t", 0)].elr) == {3}
        admin.set_topic_config("t", {"min.insync.replicas": "1"})  # not handed to the controller
        brokers[1].session.close()
        waiting = await until_state(admin, "t", 0, lambda s: s.leader != 2)
        assert (waiting.leader, list(waiting.isr)) == (-1, [2])

    run(3, scenario)


async def _both_restarted(store: LocalStore, brokers: list[Broker], second_dies: bool) -> None:
    """Replicas [3, 2], both die; broker 2 comes back restarted (dropped: ISR [3], restarted (2,)),
    maybe dies again, then broker 3 comes back restarted: ISR [3], restarted (2, 3), no answers."""
    admin = brokers[0].client
    controller = brokers[0].controller
    await create(admin, [3, 2], {})
    brokers[1].session.close()
    brokers[2].session.close()
    await until_state(admin, "t", 0, lambda s: s.leader == -1 and sorted(s.isr) == [2, 3])
    two = Broker(store, 2, ManualClock())
    await until_state(admin, "t", 0, lambda s: list(s.isr) == [3] and s.restarted == (2,))
    if second_dies:
        two.session.close()
        await until(lambda: 2 not in controller.ctx.live, "broker 2 dead again")
    Broker(store, 3, ManualClock())
    waiting = await until_state(admin, "t", 0, lambda s: set(s.restarted) == {2, 3})
    assert (waiting.leader, list(waiting.isr)) == (-1, [3])


def test_preferred_elections_do_not_elect_a_restarted_member_over_the_longest_log() -> None:
    """ElectLeaders (preferred) and the auto rebalance would make broker 3, the preferred replica and
    the ISR's last member, leader while broker 2, which may have the longer log, is away."""

    async def scenario(store: LocalStore, brokers: list[Broker]) -> None:
        await _both_restarted(store, brokers, second_dies=True)
        controller = brokers[0].controller
        outcome = await controller.call(lambda: controller.elect_leaders(ElectionType.PREFERRED, [("t", 0)]))
        assert outcome[("t", 0)][0] == ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE
        await controller.call(controller.elections.auto_rebalance)
        state = brokers[0].client.get_partition_state("t", 0)
        assert state is not None and state.leader == -1

    run(3, scenario)


def test_a_cancelled_reassignment_does_not_elect_before_the_answers() -> None:
    async def scenario(store: LocalStore, brokers: list[Broker]) -> None:
        await _both_restarted(store, brokers, second_dies=False)
        controller = brokers[0].controller
        await controller.call(lambda: controller.reassign({("t", 0): [3, 2, 1]}))
        await controller.call(lambda: controller.reassign({("t", 0): None}))
        state = brokers[0].client.get_partition_state("t", 0)
        assert state is not None and state.leader == -1

    run(3, scenario)


def test_candidates_that_did_not_answer_are_asked_again() -> None:
    async def scenario(store: LocalStore, brokers: list[Broker]) -> None:
        await _both_restarted(store, brokers, second_dies=False)
        controller, channel = brokers[0].controller, brokers[0].channel
        before = {b: len(channel.of(ApiKey.LEADER_AND_ISR, b)) for b in (2, 3)}
        await controller.call(controller.log_ends.ask_again)
        after = {b: len(channel.of(ApiKey.LEADER_AND_ISR, b)) for b in (2, 3)}
        assert after == {2: before[2] + 1, 3: before[3] + 1}
        controller.on_leader_and_isr_response(3, controller.ctx.live[3].epoch, [_log_end(5)])
        await until(lambda: 3 in controller.ctx.log_ends_of(("t", 0)), "broker 3's answer")
        await controller.call(controller.log_ends.ask_again)
        assert len(channel.of(ApiKey.LEADER_AND_ISR, 3)) == after[3]  # answered: not asked again
        assert len(channel.of(ApiKey.LEADER_AND_ISR, 2)) == after[2] + 1

    run(3, scenario)
