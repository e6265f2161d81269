"""The nemesis: a schedule of faults drawn from the run's seed, and the schedule's execution.

`schedule` is pure: from a `random.Random` and the run's length it draws a list of faults, each with
its simulated start time and length, never more than one fault at a time on one broker and never more
than one broker down at once (a crash, a pause or an isolation; with RF 3 and min.insync.replicas=2 the
promise covers the loss of any one machine). The kinds:

* ``crash``: the broker's process dies (its tasks end where they wait, its connections reset, its
  metadata-store session times out); it restarts after the fault's length on the same log dirs.
* ``machine_crash``: a crash of the whole machine: the process dies and the disk keeps only what was
  synced (page by page, possibly torn); it restarts after the fault's length and recovers its log.
* ``pause``: the broker's process stops (SIGSTOP) for the fault's length, then continues (SIGCONT); a
  pause past the session timeout costs it its metadata-store session.
* ``disk``: the broker's disk fails for the fault's length: full (ENOSPC on writes), broken (EIO on
  writes and syncs, or, half of the time, ``EIO_WRITEBACK``: EIO on syncs alone, the writes landing in
  the page cache) or slow (each write blocks the broker 5-100 ms, each sync ten times that). A failed
  sync halts a broker with a single log dir; it restarts once the disk works again.
* ``outage``: every machine crashes at once (a power cut of the whole cluster) and restarts after
  the fault's length.
* ``isolate``: the broker is cut off from every other machine, both ways, then healed.
* ``one_way``: the broker's messages to one other broker are held (it still hears from it).
* ``expire``: the metadata store expires the broker's session (it reconnects with a new one).
* ``clock_jump``: the broker's wall clock steps forwards or backwards by up to a minute.
* ``reassign``: a partition of the main topic starts moving (AlterPartitionReassignments,
  `strom.sim.reassign_workload`); the move goes on while the next faults hit.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

__all__ = ["BEYOND_PROMISE", "DISK_ERRORS", "EIO_WRITEBACK", "KINDS", "Fault", "schedule"]

KINDS = ("crash", "isolate", "one_way", "expire", "clock_jump", "machine_crash", "pause", "disk", "reassign")
#: Beyond Kafka's promise (which covers the loss of one machine), never in the mix: ``outage``, every
#: machine losing power at once, shows what the flush policy alone keeps.
BEYOND_PROMISE = ("outage",)
DISK_ERRORS = ("ENOSPC", "EIO", "slow")
#: An EIO that refuses syncs only (drawn after "EIO": the schedules of seeds without one stay as they were).
EIO_WRITEBACK = "EIO_WRITEBACK"


@dataclass(frozen=True, slots=True)
class Fault:
    kind: str
    at_s: float
    length_s: float
    broker: int
    other: int = -1
    delta_ms: int = 0
    error: str = ""  # a disk fault's errno name

    def describe(self) -> str:
        extra = f" to {self.other}" if self.other >= 0 else ""
        extra += f" by {self.delta_ms} ms" if self.delta_ms and self.kind != "reassign" else ""
        extra += f" with {self.error}" if self.error else ""
        return f"{self.kind} broker {self.broker}{extra} at {self.at_s:.2f}s for {self.length_s:.2f}s"


def schedule(
    rng: random.Random, brokers: int, start_s: float, end_s: float, kinds: tuple[str, ...] = KINDS
) -> list[Fault]:
    faults: list[Fault] = []
    t = start_s + rng.uniform(0.5, 3.0)
    while t < end_s:
        kind = rng.choice(kinds)
        broker = rng.randrange(brokers)
        length = rng.uniform(1.0, 15.0)
        other = -1
        delta = 0
        error = ""
        if kind == "disk":
            error = rng.choice(DISK_ERRORS)
            if error == "slow":
                delta = rng.randrange(5, 100)  # ms each write blocks
            elif error == "EIO" and rng.random() < 0.5:
                error = EIO_WRITEBACK
        elif kind == "one_way":
            other = rng.choice([b for b in range(brokers) if b != broker])
        elif kind == "clock_jump":
            delta = rng.choice([-1, 1]) * rng.randrange(1_000, 60_000)
            length = 0.0
        elif kind == "expire":
            length = 0.0
        elif kind == "reassign":
            delta = rng.randrange(1 << 30)  # seeds the move's choices
        faults.append(Fault(kind, t, min(length, max(end_s - t, 0.0)), broker, other, delta, error))
        t += length + rng.uniform(0.5, 5.0)  # one fault at a time, with a quiet gap between them
    return faults
