"""The deterministic simulation end to end: replay, the checker's teeth, and the short form CI runs."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from strom.sim.nemesis import KINDS
from strom.sim.network import LinkSettings
from strom.sim.run import run_seed


def test_one_seed_gives_one_trace() -> None:
    first = run_seed(5, 40.0, KINDS)
    again = run_seed(5, 40.0, KINDS)
    assert first.ok, first.findings.examples()
    assert first.findings.acked > 1000
    assert len(first.faults) >= 3
    assert first.trace == again.trace
    assert first.findings.counts() == again.findings.counts()


def test_the_checker_sees_acks_1_lose_records_when_a_leader_crashes() -> None:
    """With acks=1 a leader acknowledges before its followers have a record, and a crash loses it:
    some seed of the crash class must show it, or the checker cannot see a loss. Links of a WAN's
    delay (20-40 ms one way) give the followers' copies time to lag the acknowledgements: on a LAN's
    links only a crash within a fraction of a millisecond of an append can show it. (Seed 6 does
    today; the search covers a change that moves the loss to another seed.)"""
    for seed in [6, *range(40)]:
        result = run_seed(seed, 30.0, ("crash",), acks=1, link=LinkSettings(0.02, 0.02))
        if result.findings.lost:
            return
    raise AssertionError("no seed of 40 lost an acks=1 record: the checker or the nemesis has no teeth")


@pytest.mark.timeout(900)
def test_two_hundred_seeds_under_every_fault_class() -> None:
    """The short form of `make sim`: 200 seeds over the ten fault classes, on both cores."""
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    done = subprocess.run(
        [sys.executable, "-m", "strom.sim", "--seeds", "200", "--duration", "20", "--jobs", "2"],
        capture_output=True,
        text=True,
        env=env,
        timeout=900,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    assert "200 seeds, 0 failed" in done.stdout
