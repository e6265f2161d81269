"""Fixtures and options of the fault suite (marker ``faults``): seeds, run counts, the network lab, results.

* ``--chaos-seed S`` (or ``CHAOS_SEED``; default 8): the base seed. Each run's own seed is derived from it,
  the case's name and the run index, and is printed with every failure, so one run can be repeated alone:
  ``CHAOS_SEED=S RUNS=N pytest -m faults tests/faults -k '<case> and run<i>'``.
* ``RUNS`` (default 1: the short form in CI): how many seeded runs of each case. ``make chaos RUNS=20``.
* At the end a table per fault class: runs, acknowledged records, lost, duplicated, moved, reordered
  (tests/faults/table.py, printed by tests/conftest.py, so that it also covers runs on xdist workers).
  With ``CHAOS_RESULTS=<file>`` every run is also appended to that file as one JSON line as it ends.
"""

from __future__ import annotations

import json
import os
import random
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from strom.testing.fault_checker import Report
from tests.faults.harness import FaultCluster
from tests.faults.netlab import NetLab, require_netlab
from tests.faults.table import FIELDS, PROPERTY, base_seed
from tests.faults.workload import Writer
from tests.prerequisites import require_zookeeper


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--chaos-seed", default=None, help="base seed of the fault suite (env CHAOS_SEED)")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "chaos_run" in metafunc.fixturenames:
        runs = int(os.environ.get("RUNS", "1"))
        metafunc.parametrize("chaos_run", range(runs), ids=[f"run{i}" for i in range(runs)])


@pytest.fixture
def chaos_seed(request: pytest.FixtureRequest, chaos_run: int) -> str:
    case = request.node.originalname
    return f"{base_seed(request.config)}/{case}/{chaos_run}"


@pytest.fixture
def rng(chaos_seed: str) -> random.Random:
    return random.Random(chaos_seed)  # str seeds hash deterministically (sha512), across processes


@pytest.fixture
def lab() -> Iterator[NetLab]:
    require_netlab()
    require_zookeeper()
    netlab = NetLab()
    try:
        netlab.setup()
        yield netlab
    finally:
        netlab.teardown()


@pytest.fixture
def fault_cluster(lab: NetLab, tmp_path: Path) -> Iterator[FaultCluster]:
    fc = FaultCluster(tmp_path / "cluster", lab)
    try:
        fc.start()
        yield fc
    finally:
        # Heal first: a broker cut from ZooKeeper cannot shut down in a controlled way.
        lab.heal()
        fc.stop()


@pytest.fixture
def outcome(request: pytest.FixtureRequest, chaos_seed: str) -> Callable[..., None]:
    """``outcome(fault_class, report, writer)``: add the run to the table, then fail on any anomaly."""

    def record(fault: str, report: Report, writer: Writer) -> None:
        row = {"fault": fault, "seed": chaos_seed, **{k: getattr(report, k) for k in FIELDS}}
        request.node.user_properties.append((PROPERTY, row))
        if os.environ.get("CHAOS_RESULTS"):
            with open(os.environ["CHAOS_RESULTS"], "a") as out:
                out.write(json.dumps(row) + "\n")
        assert report.ok, (
            f"{fault} (seed {chaos_seed!r}): {report.summary()}; producer errors {dict(writer.errors)}"
        )

    return record
