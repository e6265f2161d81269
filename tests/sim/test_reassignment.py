"""Partition reassignment in the simulation: moves through AlterPartitionReassignments while it runs."""

from __future__ import annotations

import random

from strom.sim.reassign_workload import next_target
from strom.sim.run import run_seed


def test_a_move_takes_three_replicas_to_two_and_two_back_to_three() -> None:
    rng = random.Random(1)
    for _ in range(50):
        smaller = next_target([0, 1, 2], [0, 1, 2], rng)
        assert len(smaller) == 2 and set(smaller) < {0, 1, 2}
        back = next_target(smaller, [0, 1, 2], rng)
        assert sorted(back) == [0, 1, 2]
        assert [b for b in back if b in smaller] == smaller  # the kept replicas keep their order


def test_moves_that_drop_and_add_a_replica_complete_and_lose_nothing() -> None:
    """Seed 2 of the reassign class: partition 0 goes from three replicas to two, then partition 1
    from two back to three (the added broker fetches the whole log and joins the ISR first); every
    acknowledged record is still there and no move is left in flight."""
    result = run_seed(2, 30.0, ("reassign",))
    assert any("moving from [2, 1] to [0, 2, 1]" in line for line in result.trace)
    assert sum("reassignment of events-" in line and "complete" in line for line in result.trace) >= 2
    assert result.ok, result.findings.examples()
