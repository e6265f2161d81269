"""Strom under librdkafka's C `rdkafka_performance` tool: throughput and the broker's CPU cost.

Run by hand; never part of the test suite. Build the tool first (bench-only, never a dependency):
`bench/build_rdkafka_perf.sh /path/to/librdkafka-source` prints the binary's path; pass it as `--tool`.

Per round and per broker variant (`--src NAME=DIR`, a `src` directory holding the `strom` package, with
broker settings of its own from `--broker-set NAME:KEY=VALUE`; several variants run interleaved
A B, B A, A B ... in the same session, which is the only fair comparison on a shared machine) and per
message size (100 B and 10 KB): a fresh durable single broker (default flush policy) on a loopback
port, one 6-partition topic, then

- produce: `rdkafka_performance -P` sends `count` messages with acks=1 (random partitions,
  linger.ms=5, otherwise the tool's and librdkafka's defaults);
- consume: `rdkafka_performance -C` reads them back from the beginning of all 6 partitions;
- with `--cases small`, the same for 100 B messages sent one per produce request and read back with
  fetches of at most 200 bytes per partition: the fixed cost of a request, per message.

Each run reports the tool's own msgs/s and MB/s (10^6 bytes) and the broker process's CPU time
(utime + stime of all its threads, from /proc/<pid>/stat) while the tool ran, as seconds per million
messages and per GB (10^9 bytes of message values), split into user time (the broker's own work)
and system time (the kernel's: socket and file copies, page-cache allocation); and the tool's own CPU
time per GB (the client's share of the same two cores). CPU per message is
the figure that matters on a 2-core machine where client and broker share the CPU, and it is much
less sensitive to other load than the throughput. The last lines print medians per (variant, case),
as a Markdown table.

`--reference NAME=BINARY` adds librdkafka's in-memory mock broker (`bench/reference_broker.py`) as one
more variant, produce only (it keeps just the last 5 MB of each partition): a native broker that does
almost nothing, run in the same rounds.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, NamedTuple

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from reference_broker import MockBroker, start_variant

from strom.testing import BrokerProcess

PARTITIONS = 6


def _last_row(stdout: str) -> dict[str, float]:
    """The tool's final table row (`-u` output) as {column: value}."""
    header: list[str] = []
    last: list[str] = []
    for line in stdout.splitlines():
        if not line.startswith("|"):
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if cells and cells[0] == "elapsed":
            header = cells
        elif header and len(cells) == len(header):
            last = cells
    if not last:
        raise RuntimeError(f"no result row in the tool's output:\n{stdout[-2000:]}")
    return {k: float(v) for k, v in zip(header, last, strict=True)}


def _run_tool(
    cmd: list[str], broker: BrokerProcess | MockBroker, timeout_s: float
) -> tuple[dict[str, float], tuple[float, float], float, float]:
    """(final row, broker (user, system) CPU seconds, the tool's CPU seconds, wall seconds) of one run."""
    user_before, sys_before = broker.cpu_times()
    children_before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, check=False)
    wall = time.perf_counter() - start
    user_after, sys_after = broker.cpu_times()
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    tool_cpu = (children.ru_utime - children_before.ru_utime) + (children.ru_stime - children_before.ru_stime)
    if done.returncode != 0:
        raise RuntimeError(f"{cmd[0]} exited {done.returncode}: {done.stderr[-2000:]}")
    return _last_row(done.stdout), (user_after - user_before, sys_after - sys_before), tool_cpu, wall


class Case(NamedTuple):
    name: str  # a --cases name, and the suffix of the row names
    size: int
    produce_options: tuple[str, ...]
    consume_options: tuple[str, ...]


CASES = {
    "100": Case("", 100, (), ()),
    "10240": Case("", 10_240, (), ()),
    # Per-request cost: one message per produce request, and fetches of at most 200 bytes per
    # partition (about one batch of that topic each).
    "small": Case(
        ", 1 per request",
        100,
        ("-X", "linger.ms=0", "-X", "batch.num.messages=1"),
        ("-X", "message.max.bytes=1000", "-X", "fetch.max.bytes=1000", "-X", "max.partition.fetch.bytes=200"),
    ),
}


def run_case(
    tool: str, src: str, case: Case, count: int, workdir: Path, overrides: dict[str, str] | None = None
) -> list[dict[str, Any]]:
    """Produce then consume `count` messages against a fresh broker running the code in `src`, with
    broker settings `overrides`; `src` naming an executable file runs that reference broker instead."""
    size = case.size
    topic = f"cbench-{size}"
    data_dir = workdir / f"broker-{size}"
    broker = start_variant(src, data_dir, {topic: PARTITIONS}, overrides)
    bootstrap = broker.bootstrap
    rows = []
    try:
        base = [tool, "-t", topic, "-b", bootstrap, "-u", "-c", str(count)]
        produce = [*base, "-P", "-s", str(size), "-a", "1", "-X", "linger.ms=5", *case.produce_options]
        consume = [*base, "-C", "-o", "beginning", *case.consume_options]
        for p in range(PARTITIONS):
            consume += ["-p", str(p)]
        modes = [("produce", produce), ("consume", consume)]
        if isinstance(broker, MockBroker):
            modes = modes[:1]  # the mock keeps only the last 5 MB of each partition: nothing to read back
        for mode, cmd in modes:
            load = os.getloadavg()[0]
            row, (user, system), tool_cpu, wall = _run_tool(cmd, broker, timeout_s=600)
            cpu = user + system
            msgs = row["dr"] if mode == "produce" else row["msgs"]
            elapsed_s = row["elapsed"] / 1000
            nbytes = msgs * size
            rows.append(
                {
                    "case": f"{mode} {size} B{case.name}",
                    "msgs": int(msgs),
                    "msgs_per_s": msgs / elapsed_s,
                    "mb_per_s": nbytes / elapsed_s / 1e6,
                    "broker_cpu_s": cpu,
                    "cpu_s_per_m_msgs": cpu / (msgs / 1e6),
                    "user_s_per_m_msgs": user / (msgs / 1e6),
                    "sys_s_per_m_msgs": system / (msgs / 1e6),
                    "cpu_s_per_gb": cpu / (nbytes / 1e9),
                    "tool_cpu_s_per_gb": tool_cpu / (nbytes / 1e9),
                    "tool_wall_s": wall,
                    "load_1m": load,
                }
            )
            if msgs < count:
                raise RuntimeError(f"{mode}: only {msgs} of {count} messages")
    finally:
        broker.stop()
        shutil.rmtree(data_dir, ignore_errors=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--tool", required=True, help="path of rdkafka_performance")
    parser.add_argument(
        "--src",
        action="append",
        default=[],
        metavar="NAME=DIR",
        help="a broker variant: NAME and the src directory to run it from (repeat to compare; "
        "default: this checkout's src)",
    )
    parser.add_argument(
        "--reference",
        action="append",
        default=[],
        metavar="NAME=BINARY",
        help="a reference broker variant run from BINARY (bench/build_mock_broker.sh's mock broker)",
    )
    parser.add_argument(
        "--broker-set",
        action="append",
        default=[],
        metavar="NAME:KEY=VALUE",
        help="a broker setting for variant NAME (e.g. off:metrics.enabled=false; repeatable)",
    )
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--small", type=int, default=5_000_000, help="count of 100 B messages")
    parser.add_argument("--large", type=int, default=200_000, help="count of 10 KB messages")
    parser.add_argument("--requests", type=int, default=100_000, help="count of one-per-request messages")
    parser.add_argument(
        "--cases", default="100,10240", help=f"cases to run, comma-separated, of {', '.join(CASES)}"
    )
    args = parser.parse_args()
    variants = [tuple(v.split("=", 1)) for v in args.src] or [
        ("current", str(Path(__file__).resolve().parents[1] / "src"))
    ]
    variants += [tuple(v.split("=", 1)) for v in args.reference]
    settings: dict[str, dict[str, str]] = {}
    for item in args.broker_set:
        name, _, setting = item.partition(":")
        key, _, val = setting.partition("=")
        settings.setdefault(name, {})[key] = val
    cases = [CASES[name] for name in args.cases.split(",")]
    counts = {"100": args.small, "10240": args.large, "small": args.requests}
    results: dict[tuple[str, str], list[dict[str, Any]]] = {}
    with tempfile.TemporaryDirectory(prefix="strom-cbench-") as tmp:
        for rnd in range(args.rounds):
            # Alternate the order (A B, B A, ...): a variant that always ran second would always
            # find the page cache just freed by the other's deleted files (docs/benchmarks-history.md).
            for name, src in variants if rnd % 2 == 0 else variants[::-1]:
                for key, case in zip(args.cases.split(","), cases, strict=True):
                    for measured in run_case(
                        args.tool, src, case, counts[key], Path(tmp), settings.get(name)
                    ):
                        row = {"round": rnd, "variant": name, **measured}
                        print(json.dumps(row), flush=True)
                        results.setdefault((name, row["case"]), []).append(row)
    keys = (
        "msgs_per_s",
        "mb_per_s",
        "cpu_s_per_m_msgs",
        "user_s_per_m_msgs",
        "sys_s_per_m_msgs",
        "cpu_s_per_gb",
        "tool_cpu_s_per_gb",
    )
    print(f"\nmedians over {args.rounds} rounds")
    print(
        "| variant | case | msgs/s | MB/s | broker CPU s / M msgs (user + sys) | broker CPU s / GB "
        "| tool CPU s / GB |"
    )
    print("|---|---|---|---|---|---|---|")
    for (name, case), rows in sorted(results.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        med = {k: statistics.median(r[k] for r in rows) for k in keys}
        print(
            f"| {name} | {case} | {med['msgs_per_s']:,.0f} | {med['mb_per_s']:,.0f} "
            f"| {med['cpu_s_per_m_msgs']:.3f} ({med['user_s_per_m_msgs']:.3f} + "
            f"{med['sys_s_per_m_msgs']:.3f}) | {med['cpu_s_per_gb']:.2f} | {med['tool_cpu_s_per_gb']:.2f} |"
        )


if __name__ == "__main__":
    main()
