"""Suite-wide settings.

Hypothesis's default 200 ms deadline per example makes a property test a timed test: on a loaded
two-core machine one slow example fails it although nothing is wrong. Timing belongs in bench/, so
property tests here check properties only.

Concurrent runs. ``make test`` runs the suite on three pytest-xdist workers (``-n 3 --dist
loadscope``; ``TEST_WORKERS=0`` runs it in one process): most of the suite's time is spent waiting on
brokers, ZooKeeper and Spark, not computing.
The scheduler below hands out whole groups, each run by one worker from start to end, so that what the
tests of a group share, or must not do at the same time, stays on one worker:

* ``tests/spark``: one group (one SparkSession and one broker per worker, and Spark jobs that would
  fight over the two cores);
* ``tests/faults``: one group (network namespaces, tmpfs mounts, SIGSTOPs: one faulty cluster at a time);
* any other test: its module (the module-scoped broker starts once, and a test that kills it kills only
  its own module's broker).

Workers collect the longest groups first (Spark, the fault suite, the cluster suite), so that no long group
is handed out last while the other workers sit idle. Without ``-n`` none of this applies.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import settings

settings.register_profile("strom", deadline=None)
settings.load_profile("strom")

#: Directories under tests/ whose tests form one group each.
WHOLE_DIRECTORY_GROUPS = ("spark", "faults")
#: The order groups are handed out in, by directory under tests/ (others after these).
DIRECTORY_ORDER = ("spark", "faults", "cluster", "integration")


def _directory(nodeid: str) -> str:
    parts = nodeid.split("::", 1)[0].split("/")
    return parts[1] if len(parts) > 2 and parts[0] == "tests" else ""


def group_of(nodeid: str) -> str:
    """The group of the test ``nodeid``: its whole directory's, or its module's."""
    directory = _directory(nodeid)
    if directory in WHOLE_DIRECTORY_GROUPS:
        return f"tests/{directory}"
    return nodeid.split("::", 1)[0]


def _rank(nodeid: str) -> int:
    directory = _directory(nodeid)
    return DIRECTORY_ORDER.index(directory) if directory in DIRECTORY_ORDER else len(DIRECTORY_ORDER)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """Under ``--dist loadscope``: xdist's scope scheduler, with `group_of` as the scope."""
    if config.getvalue("dist") != "loadscope":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class GroupScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return group_of(nodeid)

    return GroupScheduling(config, log)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # On an xdist worker only: the scheduler hands out groups in the order the workers collected them.
    if hasattr(config, "workerinput"):
        items.sort(key=lambda item: _rank(item.nodeid))  # stable: collection order within a rank


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    # Here, not in tests/faults/conftest.py: under xdist only this conftest is loaded by the process that
    # prints the summary.
    from tests.faults.table import write_table

    write_table(terminalreporter)
