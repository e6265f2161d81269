"""The coordinator hosts reach the replica manager only through `CoordinatorPartitions`: no module of
theirs imports `ReplicaManager` or `Partition` (read from their source, by AST), so the replica
manager's API can change behind that one adapter."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import strom.broker

BROKER = Path(strom.broker.__file__).parent / "coordinators"
HOSTS = ["group_service.py", "transaction_service.py", "transaction_markers.py", "registry_service.py"]
FORBIDDEN = {"strom.broker.replication.replica_manager", "strom.broker.replication.partition"}


def imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module is not None:
            out.add(node.module)
        elif isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
    return out


@pytest.mark.parametrize("host", HOSTS)
def test_a_coordinator_host_does_not_import_the_replica_manager(host: str) -> None:
    imported = imported_modules(BROKER / host)
    assert "strom.broker.coordinators.coordinator_partitions" in imported
    assert not imported & FORBIDDEN, f"{host} imports {sorted(imported & FORBIDDEN)}"


def test_the_adapter_is_the_one_that_does() -> None:
    assert "strom.broker.replication.replica_manager" in imported_modules(
        BROKER / "coordinator_partitions.py"
    )
