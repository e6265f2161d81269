"""KIP-966 in the controller's pure decisions: eligible leader replicas (ELR) and registrations that
renew a session instead of starting a new process (PreviousBrokerEpoch)."""

from __future__ import annotations

from strom.cluster.context import ControllerContext, bounced_since, broker_changes, renewed_since
from strom.cluster.election import LeaderAndIsr, next_elr, offline_partition_decision
from strom.cluster.zk_paths import BrokerRegistration, PartitionStateDoc

EPOCHS = {0: 100, 1: 101, 2: 102}.get


def _reg(broker: int, epoch: int, *previous: int) -> BrokerRegistration:
    return BrokerRegistration(broker, "h", 9092, None, epoch, previous_epochs=previous)


def test_members_removed_below_min_isr_become_eligible_with_their_epoch() -> None:
    current = LeaderAndIsr(1, 7, (1, 0), elr=())
    assert next_elr(current, [0], 2, EPOCHS) == ((1, 101),)
    # At min ISR again records are acknowledged without them: none is eligible any more.
    assert next_elr(LeaderAndIsr(0, 8, (0,), elr=((1, 101),)), [0, 2], 2, EPOCHS) == ()
    # A shrink that stays at min ISR keeps nobody.
    assert next_elr(LeaderAndIsr(0, 1, (0, 1, 2)), [0, 1], 2, EPOCHS) == ()


def test_a_restarted_member_or_one_without_a_known_registration_is_not_eligible() -> None:
    current = LeaderAndIsr(1, 7, (1, 0, 2), elr=())
    assert next_elr(current, [0], 2, EPOCHS, ineligible={1}) == ((2, 102),)
    assert next_elr(current, [0], 2, {0: 100}.get) == ()
    # A member elected out of the ELR leaves it; the others stay.
    kept = LeaderAndIsr(-1, 9, (0,), elr=((1, 101), (2, 102)))
    assert next_elr(kept, [1], 2, EPOCHS, ineligible={0}) == ((2, 102),)


def test_an_eligible_replica_leads_before_a_restarted_last_isr_member() -> None:
    """Seed 3629's end: broker 0, the last ISR member, registered again after a machine crash; broker 1,
    removed while the ISR was below min ISR, holds every acknowledged record and leads."""
    current = LeaderAndIsr(0, 8, (0,), elr=((1, 77),))
    decision = offline_partition_decision(
        current,
        [1, 2, 0],
        live={1, 2},
        shutting_down=(),
        unclean_allowed=lambda: False,
        bounced={0},
        electable={1},
    )
    assert decision == (1, [1])


def test_only_the_same_process_is_electable() -> None:
    ctx = ControllerContext(broker_id=2)
    ctx.live = {1: _reg(1, 90, 77), 2: _reg(2, 95)}
    assert ctx.electable(("t", 0), ((1, 77), (2, 80))) == {1}  # 2 restarted since it became eligible
    ctx.offline_dir_replicas[1] = {("t", 0)}
    assert ctx.electable(("t", 0), ((1, 77),)) == set()


def test_a_registration_that_renews_a_session_is_no_bounce() -> None:
    before = {1: _reg(1, 10), 2: _reg(2, 20)}
    after = {1: _reg(1, 30, 10), 2: _reg(2, 40)}
    assert broker_changes(before, after) == ({2}, {2})
    assert renewed_since(before, after) == {1}
    assert bounced_since({1: 10, 2: 20}, after) == {2}
    # Renewing a registration this controller never took in proves nothing.
    assert bounced_since({1: 12, 2: 40}, after) == {1}


def test_the_state_znode_carries_the_eligible_replicas_only_when_there_are_some() -> None:
    doc = PartitionStateDoc(0, 8, (0,), 3, ((1, 77),))
    assert PartitionStateDoc.decode(doc.encode()) == doc
    plain = PartitionStateDoc(0, 8, (0, 1), 3)
    assert b"eligible" not in plain.encode()
    assert PartitionStateDoc.decode(plain.encode()) == plain
    registration = _reg(1, 30, 10)
    assert BrokerRegistration.decode(1, registration.encode()).previous_epochs == (10,)
    chain = _reg(1, 50, 10, 30)
    assert BrokerRegistration.decode(1, chain.encode()).previous_epochs == (10, 30)
    # A znode that names only the last one (the field Kafka's KIP-966 names) still renews it.
    only_last = chain.encode().replace(b',"previous_broker_epochs":[10,30]', b"")
    assert BrokerRegistration.decode(1, only_last).previous_epochs == (30,)
    assert BrokerRegistration.decode(1, _reg(1, 9).encode()).previous_epochs == ()


def test_a_renewal_after_renewals_the_controller_did_not_see_is_still_one() -> None:
    """The session expired twice while the controller looked elsewhere: the second renewal names both
    earlier epochs, so the eligible replica kept at the first one stays electable."""
    ctx = ControllerContext(broker_id=2)
    ctx.live = {1: _reg(1, 90, 77, 84)}
    assert ctx.electable(("t", 0), ((1, 77),)) == {1}
    assert bounced_since({1: 77}, ctx.live) == set()
    assert bounced_since({1: 60}, ctx.live) == {1}


def test_a_restart_seen_only_in_a_later_event_is_a_bounce() -> None:
    """Broker 2 died in one event (the controller took it for dead) and its new process registered in
    a later one: absent from the live set it is not `dead` by comparison with it, but its
    registration is not the one last taken in, nor a renewal of it: it died and started."""
    known = {1: 10, 2: 20}
    live = {1: _reg(1, 10)}
    assert broker_changes(live, {1: _reg(1, 10), 2: _reg(2, 40)}, known) == ({2}, {2})
    # The same process back after its session expired: new, not dead.
    assert broker_changes(live, {1: _reg(1, 10), 2: _reg(2, 40, 20)}, known) == (set(), {2})
    # A broker never seen before: new only.
    assert broker_changes(live, {1: _reg(1, 10), 3: _reg(3, 50)}, known) == (set(), {3})
