"""``python -m strom.sim``: run seeds of the deterministic simulation and print a table per fault class.

    python -m strom.sim --seeds 200 [--start 0] [--duration 120] [--jobs 2] [--trace-dir DIR]
    python -m strom.sim --replay SEED --class crash [--duration 120]      # one seed, its trace printed
    python -m strom.sim --seeds 10000 --results sim-results.jsonl         # resumable long form

With ``--results FILE`` each finished seed is appended to FILE as one JSON line (its counts, examples
and the ``--revision`` it ran on, never its trace), and seeds already in FILE are not run again: a
long run stopped part-way goes on where it stopped, and the table is printed from FILE for the whole
range asked for. A run's duration is part of what a seed means, so a FILE written with another
``--duration`` is refused.

Seeds are spread over the fault classes round-robin (seed ``s`` runs class ``CLASSES[s % 10]``: each
fault kind alone, then all of them mixed) and over ``--jobs`` worker processes, which end with the
command (the kernel kills each when its parent dies: a killed run leaves no workers behind). A
failing seed prints the one-line command that replays it and, with ``--trace-dir``, leaves its trace
there. String hashing must be the same in every process for a seed to replay exactly, so the command
re-executes itself with ``PYTHONHASHSEED=0`` when it is not set.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import dataclasses
import json
import os
import signal
import statistics
import sys
import threading
import time
import traceback
from collections import Counter
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path

from strom.sim.checker import Findings
from strom.sim.nemesis import KINDS

__all__ = ["CLASSES", "main"]

CLASSES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("crash", ("crash",)),
    ("isolate", ("isolate",)),
    ("one_way", ("one_way",)),
    ("expire", ("expire",)),
    ("clock_jump", ("clock_jump",)),
    ("machine_crash", ("machine_crash",)),
    ("pause", ("pause",)),
    ("disk", ("disk",)),
    ("reassign", ("reassign",)),
    ("mixed", KINDS),
)
KINDS_OF = dict(CLASSES)
ERROR = "error"  # a seed whose run raised: a column of the table beside the checker's kinds


@dataclass(frozen=True, slots=True)
class Outcome:
    seed: int
    fault_class: str
    acked: int
    counts: dict[str, int]
    examples: list[str]
    trace: list[str]
    simulated_s: float
    wall_s: float
    revision: str = ""  # the commit it ran on (results files)

    def record(self, duration_s: float) -> str:
        """The outcome as one line of a results file (without its trace)."""
        return json.dumps(
            {
                "seed": self.seed,
                "class": self.fault_class,
                "duration_s": duration_s,
                "revision": self.revision,
                "acked": self.acked,
                "counts": self.counts,
                "examples": self.examples[:3],
                "simulated_s": self.simulated_s,
                "wall_s": self.wall_s,
            },
            sort_keys=True,
        )


def load_results(path: Path, duration_s: float) -> dict[int, Outcome]:
    """The outcomes recorded in a results file, by seed; a torn last line (a killed run) is skipped."""
    found: dict[int, Outcome] = {}
    if not path.exists():
        return found
    for line in path.read_text().splitlines():
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue
        if row["duration_s"] != duration_s:
            raise SystemExit(
                f"{path} holds seeds of {row['duration_s']:g} s, not {duration_s:g} s: "
                "give another --results file or the same --duration"
            )
        found[row["seed"]] = Outcome(
            row["seed"],
            row["class"],
            row["acked"],
            row["counts"],
            row["examples"],
            [],
            row["simulated_s"],
            row["wall_s"],
            row.get("revision", ""),
        )
    return found


_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def _die_with_parent(parent: int) -> None:
    """A pool worker's initializer: the worker ends when the command does, however the command ends.

    On Linux the kernel sends SIGKILL to the worker when its parent dies (``PR_SET_PDEATHSIG``);
    elsewhere a thread notices the worker was re-parented. A parent already gone ends it now.
    """
    armed = False
    with contextlib.suppress(OSError, AttributeError):
        armed = ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) == 0
    if os.getppid() != parent:
        os._exit(1)
    if not armed:
        threading.Thread(target=_watch_parent, args=(parent,), daemon=True).start()


def _watch_parent(parent: int) -> None:
    while os.getppid() == parent:
        time.sleep(1.0)
    os._exit(1)


def class_of(seed: int) -> str:
    return CLASSES[seed % len(CLASSES)][0]


def run_one(seed: int, fault_class: str, duration_s: float) -> Outcome:
    """One seed's outcome; a seed whose run raised (in Strom's code or the simulator's) counts as an
    ``error``, with the traceback's last lines as its example, so the other seeds go on."""
    from strom.sim.run import run_seed

    try:
        result = run_seed(seed, duration_s, KINDS_OF[fault_class])
    except Exception:
        lines = traceback.format_exc().strip().splitlines()
        counts = dict.fromkeys(Findings.KINDS, 0) | {ERROR: 1}
        return Outcome(
            seed, fault_class, 0, counts, [" / ".join(x.strip() for x in lines[-3:])], lines, 0.0, 0.0
        )
    return Outcome(
        seed,
        fault_class,
        result.findings.acked,
        result.findings.counts() | {ERROR: 0},
        result.findings.examples(),
        result.trace,
        result.simulated_s,
        result.wall_s,
    )


def replay_command(seed: int, fault_class: str, duration_s: float) -> str:
    return f"python -m strom.sim --replay {seed} --class {fault_class} --duration {duration_s:g}"


def table(outcomes: list[Outcome]) -> str:
    kinds = [*Findings.KINDS, ERROR]
    rows = [
        "| fault class | runs | acknowledged | "
        + " | ".join(k.replace("_", " ") for k in kinds)
        + " | median wall s per run |",
        "|---|" + "---|" * (len(kinds) + 3),
    ]
    for name, _ in CLASSES:
        mine = [o for o in outcomes if o.fault_class == name]
        if not mine:
            continue
        total = [str(sum(o.counts.get(k, 0) for o in mine)) for k in kinds]  # older rows lack "error"
        walls = [o.wall_s for o in mine if o.wall_s]  # a seed that raised has none
        rows.append(
            f"| {name} | {len(mine)} | {sum(o.acked for o in mine):,} | "
            + " | ".join(total)
            + f" | {statistics.median(walls) if walls else 0.0:.2f} |"
        )
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m strom.sim")
    parser.add_argument("--seeds", type=int, default=60)
    parser.add_argument("--start", type=int, default=0)
    parser.add_argument("--duration", type=float, default=120.0, help="simulated seconds of faults per seed")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--trace-dir", type=Path, default=None)
    parser.add_argument("--replay", type=int, default=None, metavar="SEED")
    parser.add_argument("--class", dest="fault_class", choices=[c for c, _ in CLASSES], default=None)
    parser.add_argument("--results", type=Path, default=None, help="append each seed's outcome; resume")
    parser.add_argument("--revision", default="", help="recorded with each outcome in --results")
    args = parser.parse_args(argv)
    if os.environ.get("PYTHONHASHSEED") != "0":
        os.environ["PYTHONHASHSEED"] = "0"
        os.execv(
            sys.executable, [sys.executable, "-m", "strom.sim", *(argv if argv is not None else sys.argv[1:])]
        )
    if args.replay is not None:
        fault_class = args.fault_class or class_of(args.replay)
        outcome = run_one(args.replay, fault_class, args.duration)
        print("\n".join(outcome.trace))
        print(f"seed {outcome.seed} ({fault_class}): {outcome.counts} acked={outcome.acked}")
        for line in outcome.examples:
            print("  " + line)
        return 0 if not any(outcome.counts.values()) else 1
    seeds = range(args.start, args.start + args.seeds)
    done = load_results(args.results, args.duration) if args.results is not None else {}
    outcomes = [done[s] for s in seeds if s in done]
    todo = [s for s in seeds if s not in done]
    with contextlib.ExitStack() as stack:
        sink = stack.enter_context(args.results.open("a")) if args.results is not None and todo else None
        if sink is not None and sink.tell() > 0 and not args.results.read_bytes().endswith(b"\n"):
            sink.write("\n")  # a torn last line stays alone, skipped
        pool = stack.enter_context(
            ProcessPoolExecutor(
                max_workers=max(args.jobs, 1), initializer=_die_with_parent, initargs=(os.getpid(),)
            )
        )
        stack.callback(pool.shutdown, wait=False, cancel_futures=True)  # on the way out: no queued seed runs
        futures = [pool.submit(run_one, s, args.fault_class or class_of(s), args.duration) for s in todo]
        for future in as_completed(futures):
            outcome = dataclasses.replace(future.result(), revision=args.revision)
            if sink is not None:
                sink.write(outcome.record(args.duration) + "\n")
                sink.flush()
            if any(outcome.counts.values()) and args.trace_dir is not None:
                # Written as soon as the seed ends, so a long run stopped later keeps it.
                args.trace_dir.mkdir(parents=True, exist_ok=True)
                (args.trace_dir / f"seed-{outcome.seed}.trace").write_text("\n".join(outcome.trace) + "\n")
            outcomes.append(dataclasses.replace(outcome, trace=[]))
    outcomes.sort(key=lambda o: o.seed)
    failed = [o for o in outcomes if any(o.counts.values())]
    for o in failed:
        print(f"FAILED seed {o.seed} ({o.fault_class}): " + "; ".join(o.examples[:3]))
        print("  replay: " + replay_command(o.seed, o.fault_class, args.duration))
        trace = args.trace_dir / f"seed-{o.seed}.trace" if args.trace_dir is not None else None
        if trace is not None and trace.exists():
            print(f"  trace: {trace}")
    speedups = sorted(o.simulated_s / o.wall_s for o in outcomes if o.wall_s > 0)
    print(table(outcomes))
    revisions = Counter(o.revision for o in outcomes)
    if len(revisions) > 1:  # a resumed long run: say which seeds ran on which code
        print("seeds by revision: " + ", ".join(f"{r or '?'}: {n}" for r, n in sorted(revisions.items())))
    print(
        f"{len(outcomes)} seeds, {len(failed)} failed; median {statistics.median(speedups):.1f}x real time "
        f"({statistics.median(o.wall_s for o in outcomes):.2f} s wall for {args.duration:g} s simulated)"
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
