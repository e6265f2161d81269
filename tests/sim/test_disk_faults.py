"""Seeds of the simulation's disk-fault class that found a bug, kept as regression tests."""

from __future__ import annotations

from strom.sim.run import run_seed


def test_a_replica_whose_log_a_full_disk_refused_opens_once_the_disk_recovers() -> None:
    """Seed 106 found it: the transactional loop's topic was created while its leader's disk was full;
    the leader could not create the partition's log, answered LeaderAndIsr with KAFKA_STORAGE_ERROR,
    and nothing ever applied that state again, so the partition stayed without a working leader
    after the disk recovered (read_committed could not read it before the liveness bound). The
    broker now applies such states again every few seconds until the log opens."""
    result = run_seed(106, 20.0, ("disk",))
    assert any("log opened after an earlier failure" in line for line in result.trace)
    assert result.ok, result.findings.examples()


def test_a_broker_whose_sync_fails_halts_and_restarts_once_the_disk_works() -> None:
    """Seed 2: broker 0's disk fails its write-backs (EIO on every sync, the writes landing in the page
    cache). Its one log dir's first failed sync halts it (never retried: the kernel may have dropped the
    pages), which the world takes as a crash of its process; the nemesis restarts it once the disk
    works, it recovers its logs, and every acknowledged record is read back."""
    result = run_seed(2, 20.0, ("disk",))
    halted = [i for i, line in enumerate(result.trace) if "halting the broker: a sync in log dir" in line]
    restarted = [i for i, line in enumerate(result.trace) if "broker 0 restarted after it halted" in line]
    assert len(halted) == 1 and len(restarted) == 1 and halted[0] < restarted[0], result.trace
    assert result.ok, result.findings.examples()


def _loaded_after_reopen(trace: list[str], host: str) -> bool:
    """Whether ``host`` could not open __consumer_offsets-0 as its new leader, then opened it and
    loaded the group coordinator's state from it."""
    failed = [
        i
        for i, line in enumerate(trace)
        if f"{host} " in line and "cannot open the log of __consumer_offsets-0" in line
    ]
    opened = [
        i
        for i, line in enumerate(trace)
        if f"{host} " in line and "__consumer_offsets-0: log opened after" in line
    ]
    loaded = [
        i
        for i, line in enumerate(trace)
        if f"{host} " in line and "__consumer_offsets-0: coordinator state loaded" in line
    ]
    return bool(failed and opened and failed[-1] < opened[-1] and any(i > opened[-1] for i in loaded))


def test_a_leader_whose_epoch_checkpoint_the_disk_refused_loads_its_coordinators_once_it_opens() -> None:
    """Seeds 2287 and 2367 found it (after a halted controller's successor elected a leader whose disk
    was failing): the new leader's leader-epoch checkpoint was refused (EIO, ENOSPC) after its role and
    epoch had changed, so the state applied again once the disk worked found the same leader and epoch,
    took the "nothing changed" path and never ran the leadership callbacks: the group and transaction
    coordinators never loaded (no OffsetFetch answered, no transaction completed). The epoch's write
    now comes before anything of the change is applied, and a refused one leaves the replica as it was
    (writing it first in `Partition.make_leader` alone, after the new ISR and its znode version were
    taken, let the old-epoch leader store an ISR change with that version meanwhile: seed 2367's
    leader then held an older version than the znode's and lost every later ISR race)."""
    for seed, host in ((2287, "10.0.0.2"), (2367, "10.0.0.3")):
        result = run_seed(seed, 120.0, ("disk",))
        assert _loaded_after_reopen(result.trace, host), seed
        assert result.ok, (seed, result.findings.examples())
