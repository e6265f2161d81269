"""`strom cluster up` draws its progress (ZooKeeper, each broker, registration) when standard error is a
terminal; `cluster down` then stops everything."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.test_cli_progress import run_on_terminal
from tests.prerequisites import require_zookeeper

pytestmark = pytest.mark.cluster

STROM = [sys.executable, "-m", "strom.cli.main"]


def test_cluster_up_progress_on_a_terminal(tmp_path: Path) -> None:
    require_zookeeper()
    base = tmp_path / "dev"
    up = [
        *STROM,
        "cluster",
        "up",
        "--brokers",
        "2",
        "--dir",
        str(base),
        "--set",
        "offsets.topic.num.partitions=1",
    ]
    try:
        code, out, drawn = run_on_terminal(up)
        assert code == 0, drawn
        assert "bootstrap.servers=" in out.decode()
        assert "Starting the cluster" in drawn or "all brokers registered" in drawn
        assert "4/4" in drawn  # ZooKeeper, two brokers, registration
    finally:
        down = subprocess.run(
            [*STROM, "cluster", "down", "--dir", str(base)], capture_output=True, timeout=120, check=False
        )
    assert down.returncode == 0, down.stderr
