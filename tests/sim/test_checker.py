"""The simulation's checker on hand-made observations: each promise it judges, kept and broken."""

from __future__ import annotations

from strom.sim.checker import check
from strom.sim.workload import Acked


def test_a_clean_run_has_no_findings() -> None:
    final = {0: [(0, b"p0-0"), (1, b"p0-1")]}
    findings = check([Acked(0, 0, b"p0-0"), Acked(0, 1, b"p0-1")], final, {0: {0: b"p0-0"}}, {(0, 0): {1}})
    assert findings.ok and findings.acked == 2


def test_lost_moved_duplicated_reordered() -> None:
    final = {0: [(0, b"p0-1"), (1, b"p0-0"), (2, b"p0-0")]}
    acked = [Acked(0, 0, b"p0-0"), Acked(0, 1, b"p0-1"), Acked(0, 2, b"p0-2")]
    counts = check(acked, final, {}, {}).counts()
    assert counts["lost"] == 1  # p0-2
    assert counts["moved"] == 2  # p0-0 acked at 0 is at 1 and 2; p0-1 acked at 1 is at 0
    assert counts["duplicated"] == 1
    assert counts["reordered"] == 2  # both copies of p0-0 come after p0-1


def test_a_consumed_record_that_vanished_and_split_brain_and_liveness() -> None:
    findings = check([], {0: [(0, b"p0-0")], 1: None}, {0: {1: b"p0-1"}}, {(0, 3): {0, 2}})
    counts = findings.counts()
    assert counts["unseen"] == 1
    assert counts["split_brain"] == 1
    assert counts["unavailable"] == 1
    assert not findings.ok
