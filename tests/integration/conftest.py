"""Integration fixtures: a module-scoped real broker per test module, and client parametrization."""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import pytest

from strom.testing import BrokerProcess

_names = itertools.count()


@pytest.fixture
def topic_name(request: pytest.FixtureRequest) -> str:
    base = "".join(c if c.isalnum() else "-" for c in request.node.name)[:80]
    return f"t-{base}-{next(_names)}"


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """A broker of the module's own (restart and kill -9 tests must not disturb other modules)."""
    proc = BrokerProcess(
        tmp_path_factory.mktemp("broker") / "data",
        {"log.retention.check.interval.ms": "500", "group.initial.rebalance.delay.ms": "0"},
    )
    proc.start()
    try:
        yield proc
    finally:
        proc.stop()
