"""Seeds of the simulation's machine crashes that found a bug, kept as regression tests."""

from __future__ import annotations

from strom.sim.run import run_seed

#: The mixed class's kinds when the seed was found (a kind added later must not move its schedule).
MIXED = ("crash", "isolate", "one_way", "expire", "clock_jump", "machine_crash", "pause", "disk")


def test_a_broker_that_registered_again_while_no_controller_ran_is_taken_as_bounced() -> None:
    """Seed 314 (mixed, 30 s) found it: broker 1's machine crashed (its disk lost its unsynced tail)
    and it restarted; the controller's process crashed next, so nobody was controller when broker 1's
    old session expired and it registered again. The controller elected after that found broker 1
    registered, leading and in the ISR, and the followers truncated to its shorter log: 2,905
    acknowledged records lost. The controller now records the registrations it has taken in, and a
    new one treats a broker registered since as bounced (out of every ISR, its leaderships moved)."""
    result = run_seed(314, 30.0, MIXED)
    assert any("registered again since the last controller" in line for line in result.trace)
    assert result.ok, result.findings.examples()


#: The mixed class's kinds when seed 159 was found.
MIXED_WITH_REASSIGN = (*MIXED, "reassign")


def test_a_power_loss_after_a_deleted_partition_s_directory_is_gone_undoes_nothing_in_it() -> None:
    """Seed 159 (mixed, 120 s) found it in the simulator's disk: a deleted partition's directory,
    renamed and removed whole, still had an unsynced unlink (a producer snapshot) when broker 1's
    machine crashed, and undoing it raised (its directory was gone), which ended the run. A change
    under a directory removed since is not undone (tests/sim/test_disk.py has the disk's own test)."""
    result = run_seed(159, 120.0, MIXED_WITH_REASSIGN)
    assert any("machine_crash broker 1" in line for line in result.trace)
    assert result.ok, result.findings.examples()


def test_a_partition_without_a_leader_does_not_keep_a_bounced_broker_in_its_isr() -> None:
    """Seed 1309 (mixed, 120 s) found it: partition 2 (replicas [0, 1], leader 0, ISR [0, 1]) had
    offsets 4110.. acknowledged when broker 1's machine crashed and its disk lost them. Broker 0, the
    controller, was paused before it saw broker 1 register again; the next controller took broker 1
    as bounced and broker 0 as dead, found nobody to lead and wrote leader -1 keeping ISR [0, 1],
    then, broker 1 live again, elected it "as the last ISR member" with log end offset 4110: broker 0
    truncated from 4800 to 4110 to follow it, and 680 acknowledged records were lost. The leaderless
    partition now keeps ISR [0] (the restarted member leaves it first) and waits for broker 0."""
    result = run_seed(1309, 120.0, MIXED_WITH_REASSIGN)
    assert any("registered again since the last controller" in line for line in result.trace)
    assert any("events-2 leader -1 epoch 3 isr (0,)" in line for line in result.trace)
    assert result.ok, result.findings.examples()


def test_the_read_back_waits_for_a_new_leader_s_high_watermark() -> None:
    """Seed 2579 (mixed, 120 s) reported offsets 6340-6349 of partition 0 lost, and they were not:
    broker 1 led it when its machine crashed just before the faults healed; broker 0, the next leader,
    had all 6,350 records, but its high watermark was still 6340 when the checker read, 0.28 s after
    the election, because broker 2 had not yet fetched from it (its fetch to broker 0 was a long poll
    already in flight). Half a second later it was 6350. The read back now waits for every leader's
    high watermark to reach its log end (an acknowledged record truly lost is below neither)."""
    result = run_seed(2579, 120.0, MIXED_WITH_REASSIGN)
    assert any("machine_crash broker 1 at 114.97s" in line for line in result.trace)
    assert any("read back: p0=6350" in line for line in result.trace)
    assert result.ok, result.findings.examples()


def test_an_eligible_replica_leads_before_the_restarted_last_isr_member() -> None:
    """Seed 3629 (mixed, 120 s) found it, the case KIP-966 closes: partition 1 (leader 1, ISR [1, 0])
    had offsets 6540-6569 acknowledged when broker 0's machine crashed and its disk lost them. Broker 0
    restarted before its old session expired, so the controller still took it for live; then broker
    1's session expired and the controller moved the leadership to broker 0, ISR [0]. When broker 0's
    new registration was seen it was the last ISR member and led again with log end 6540: broker 1
    truncated 6570 to 6540, 20 acknowledged records lost. Broker 1, removed from an ISR below min ISR,
    is now an eligible leader replica and leads instead (its registration renewed the same process)."""
    result = run_seed(3629, 120.0, MIXED_WITH_REASSIGN)
    assert any("events-1 leader 0 epoch 8 isr (0,)" in line for line in result.trace)
    assert any("events-1 leader 1 epoch 9 isr (1,)" in line for line in result.trace)
    assert result.ok, result.findings.examples()


def test_the_longest_log_leads_when_every_isr_member_restarted() -> None:
    """Seed 8239 (mixed, 120 s) found it: partition 0, moved to replicas [1, 2] (min ISR 2), had offsets
    4110-4319 acknowledged. Broker 2 halted on a failed sync and restarted (a process restart: its page
    cache, and the records, survived); broker 1's machine crashed and its disk lost them. A new
    controller found broker 2 registered again and kept ISR [1], waiting for broker 1, which came back
    as a new process too; as the last ISR member it led with log end 4110, and broker 2 truncated 210
    acknowledged records to follow it. Both members restarted, so the controller now waits for both
    to say where their logs end and elects the furthest: broker 2."""
    result = run_seed(8239, 120.0, MIXED_WITH_REASSIGN)
    assert any("events-0 leader -1 epoch 5 isr (1,)" in line for line in result.trace)
    assert any("events-0 leader 2 epoch 6 isr (2,) (longest log)" in line for line in result.trace)
    assert result.ok, result.findings.examples()
