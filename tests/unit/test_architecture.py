"""Structural rules of docs/design.md that a reviewer would otherwise check by eye.

* No import cycle anywhere in ``strom``, counting imports under ``TYPE_CHECKING`` and inside functions
  (grimp reads every import statement of a module).
* One broker core: request handlers never ask which mode the broker runs in; the composition root
  (`strom.broker.broker`) is the only module that chooses between ZooKeeper and a cluster of one.
* The broker and the controller wait only on their injected clock (``strom._util.clock``).
* kazoo is imported by `strom.cluster.zookeeper_store` alone: everything else uses the metadata-store port.
"""

from __future__ import annotations

import ast
import itertools
import re
from pathlib import Path

import grimp

SRC = Path(__file__).resolve().parents[2] / "src" / "strom"


def _cycles(graph: grimp.ImportGraph) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iteratively)."""
    counter = itertools.count()
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(graph.modules):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.find_modules_directly_imported_by(root))))]
        index[root] = low[root] = next(counter)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = next(counter)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.find_modules_directly_imported_by(child)))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_cycle_finder_sees_a_cycle() -> None:
    graph = grimp.ImportGraph()
    for name in ("a", "b", "c"):
        graph.add_module(name)
    graph.add_import(importer="a", imported="b")
    graph.add_import(importer="b", imported="a")
    graph.add_import(importer="b", imported="c")
    assert _cycles(graph) == [["a", "b"]]


def test_no_import_cycles() -> None:
    graph = grimp.build_graph("strom", include_external_packages=False)
    assert _cycles(graph) == []


def test_only_the_zookeeper_store_imports_kazoo() -> None:
    """The controller and everything Kafka-shaped work on the metadata-store port; kazoo stays in the
    port's ZooKeeper implementation (import-linter keeps it inside strom.cluster; this, inside that)."""
    graph = grimp.build_graph("strom", include_external_packages=True)
    assert graph.find_modules_that_directly_import("kazoo") == {"strom.cluster.zookeeper_store"}


MODE_CHECKS = re.compile(
    r"replica_manager is (not )?None|cluster is (not )?None|\.cluster\b|zookeeper|LocalMetadataStore"
    r"|isinstance\([^)]*Metadata"
)


def test_handlers_do_not_branch_on_the_mode() -> None:
    offenders = [
        f"{path.name}:{n}: {line.strip()}"
        for path in sorted((SRC / "broker" / "handlers").glob("*.py"))
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if MODE_CHECKS.search(line)
    ]
    assert offenders == []


def test_only_the_composition_root_chooses_the_control_plane() -> None:
    choosers = sorted(
        str(path.relative_to(SRC))
        for path in SRC.rglob("*.py")
        if re.search(r'\bif\b.*get\("zookeeper\.connect"\)', path.read_text())
    )
    assert choosers == ["broker/broker.py"]


# docs/design.md#style: a soft cap of ~500 lines a module; past this the check fails, so that growth is
# noticed and the module is split along a real seam rather than creeping on.
MAX_MODULE_LINES = 500
# Generated, never edited by hand (one TypedDict per message of every served API): no cap.
GENERATED_MODULES = {"protocol/messages.py"}


def test_no_module_grows_past_the_soft_cap() -> None:
    sizes = {str(p.relative_to(SRC)): len(p.read_text().splitlines()) for p in SRC.rglob("*.py")}
    over = {name: n for name, n in sizes.items() if n > MAX_MODULE_LINES and name not in GENERATED_MODULES}
    assert over == {}


def test_untyped_dicts_stay_rare() -> None:
    """Message bodies are typed (the generated TypedDicts); ``dict[str, Any]`` is left for JSON documents
    and the generic codec, fewer than 20 places in all."""
    places = [
        f"{p.relative_to(SRC)}:{n}"
        for p in SRC.rglob("*.py")
        for n, line in enumerate(p.read_text().splitlines(), 1)
        if "dict[str, Any]" in line
    ]
    assert len(places) < 20, places


def test_generated_modules_say_so() -> None:
    for name in GENERATED_MODULES:
        assert "GENERATED by ``python -m strom.protocol.typegen``" in (SRC / name).read_text()


# The broker's and the controller's waits and deadlines run on the injected Clock (strom._util.clock:
# sleep_ms, Deadline, yield_to_loop), so the core runs under a ManualClock; the event loop's own time
# and sleeps are for that module alone.
LOOP_TIME = re.compile(r"asyncio\.sleep\(|loop(\(\))?\.time\(|asyncio\.wait_for\(|asyncio\.timeout(_at)?\(")


def _loop_time_uses(roots: list[Path]) -> list[str]:
    return [
        f"{path.relative_to(SRC)}:{n}: {line.strip()}"
        for root in roots
        for path in sorted(root.rglob("*.py"))
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if LOOP_TIME.search(line)
    ]


def test_the_broker_and_the_controller_wait_only_on_their_clock() -> None:
    assert _loop_time_uses([SRC / "broker", SRC / "cluster"]) == []


def test_the_clock_check_sees_the_event_loop_time() -> None:
    # The same scan over the clock module itself, the one place allowed to use them: a sleep, the
    # loop's time and asyncio's timeout.
    found = " ".join(_loop_time_uses([SRC / "_util"]))
    assert all(use in found for use in ("asyncio.sleep(", "loop().time(", "asyncio.timeout("))


def _log_reaches(path: Path) -> list[str]:
    """Where a module imports the storage log or reads an attribute named ``log`` (a partition's)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module is not None:
            names = {alias.name for alias in node.names}
            if (
                node.module == "strom.storage.log"
                or "PartitionLog" in names
                or (node.module == "strom.storage" and "log" in names)
            ):
                found.append(f"{path.name}:{node.lineno}: imports {node.module}")
        elif isinstance(node, ast.Import):
            found += [
                f"{path.name}:{node.lineno}: imports {a.name}" for a in node.names if "storage.log" in a.name
            ]
        elif isinstance(node, ast.Attribute) and node.attr in ("log", "leader_epoch_cache", "producer_state"):
            found.append(f"{path.name}:{node.lineno}: .{node.attr}")
        elif isinstance(node, ast.Name) and node.id == "PartitionLog":
            found.append(f"{path.name}:{node.lineno}: PartitionLog")
    return found


def test_the_log_finder_sees_a_partitions_log(tmp_path: Path) -> None:
    module = tmp_path / "handler.py"
    module.write_text(
        "from strom.storage.log import PartitionLog\ndef f(part):\n    return part.log.high_watermark\n"
    )
    assert _log_reaches(module) == ["handler.py:1: imports strom.storage.log", "handler.py:3: .log"]


def test_handlers_reach_partitions_only_through_the_replica_manager() -> None:
    """Handlers call `ReplicaManager` (append_records, fetch_records, ...); the partition applies its
    rules to its log. A handler reading or writing a `PartitionLog` would bypass them."""
    offenders = [
        hit for path in sorted((SRC / "broker" / "handlers").glob("*.py")) for hit in _log_reaches(path)
    ]
    assert offenders == []
