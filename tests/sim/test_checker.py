"""The simulation's checker on hand-made observations: each promise it judges, kept and broken."""

from __future__ import annotations

from strom.sim.checker import check
from strom.sim.txn_workload import check_transactions
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


def test_transactions_all_or_nothing_aborted_invisible_and_their_group_offset() -> None:
    def records(
        *numbers: int, widths: dict[int, int] | None = None
    ) -> dict[int, list[tuple[int, bytes]] | None]:
        out: dict[int, list[tuple[int, bytes]] | None] = {p: [] for p in range(3)}
        for n in numbers:
            for p in range((widths or {}).get(n, 2)):
                rows = out[p]
                assert rows is not None
                rows += [(len(rows), b"t%d-%d" % (n, 2 * p + i)) for i in range(2)]
        return out

    fates = {1: "committed", 2: "aborted", 3: "in doubt", 4: "committed"}
    widths = dict.fromkeys(fates, 2)
    assert check_transactions(fates, widths, records(1, 4), 4) == []
    assert check_transactions(fates, widths, records(1, 3, 4), 4) == []  # in doubt: all of it, or none
    assert len(check_transactions(fates, widths, records(1, 2, 4), 4)) == 1  # an aborted one visible
    assert len(check_transactions(fates, widths, records(4), 4)) == 1  # a committed one lost
    assert len(check_transactions(fates, widths, records(1, 4), 3)) == 1  # its offset commit not with it
    partial = records(1, 4)
    partial[1] = partial[1][:3] if partial[1] else None  # half of transaction 4 on partition 1
    assert len(check_transactions(fates, widths, partial, 4)) == 1
    assert len(check_transactions(fates, widths, {0: None, 1: []}, -1)) >= 1  # unreadable
    grown = {**widths, 4: 3}  # written after the topic grew: six records make it whole
    assert len(check_transactions(fates, grown, records(1, 4), 4)) == 1
    assert check_transactions(fates, grown, records(1, 4, widths=grown), 4) == []
