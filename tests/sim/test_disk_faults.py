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
