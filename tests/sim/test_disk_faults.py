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
