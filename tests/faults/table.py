"""The fault suite's closing table: per fault class, runs, acknowledged records, lost, duplicated, moved,
reordered.

It is built from the test reports, not from a list in the process that ran the cases: under pytest-xdist
(``make test``) the cases run on a worker, and only their reports, user properties included, reach the
process that prints the summary. Each case's ``outcome`` (tests/faults/conftest.py) adds one user property
``(PROPERTY, row)``; tests/conftest.py calls `write_table` at the end of every run that had any.
"""

from __future__ import annotations

import os
from typing import Any

import pytest

PROPERTY = "fault_run"
#: The columns a row carries besides its fault class and seed (``unknown_offset`` is informational).
FIELDS = ("acknowledged", "lost", "duplicated", "moved", "reordered", "unknown_offset")


def base_seed(config: pytest.Config) -> str:
    return str(config.getoption("--chaos-seed", None) or os.environ.get("CHAOS_SEED") or "8")


def fault_rows(terminalreporter: pytest.TerminalReporter) -> list[dict[str, Any]]:
    """Every row the run's fault cases reported (one per case run, from its call phase)."""
    rows = []
    for reports in terminalreporter.stats.values():
        for report in reports:
            if getattr(report, "when", None) != "call":
                continue
            rows.extend(value for name, value in getattr(report, "user_properties", ()) if name == PROPERTY)
    return rows


def write_table(terminalreporter: pytest.TerminalReporter) -> None:
    rows = fault_rows(terminalreporter)
    if not rows:
        return
    tr = terminalreporter
    tr.section(f"fault suite (base seed {base_seed(tr.config)})")
    tr.write_line(
        f"{'fault class':<36}{'runs':>6}{'acknowledged':>14}{'lost':>7}{'duplicated':>12}{'moved':>7}"
        f"{'reordered':>11}"
    )
    classes: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        classes.setdefault(row["fault"], []).append(row)
    for fault, runs in sorted(classes.items()):
        total = {k: sum(int(r[k]) for r in runs) for k in FIELDS}
        tr.write_line(
            f"{fault:<36}{len(runs):>6}{total['acknowledged']:>14}{total['lost']:>7}"
            f"{total['duplicated']:>12}{total['moved']:>7}{total['reordered']:>11}"
        )
