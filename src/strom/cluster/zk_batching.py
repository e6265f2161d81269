"""Batching ZooKeeper operations: multi-op chunks, the reading of a failed multi, operation counters.

Pure, no I/O. The controller changes thousands of partition-state znodes at once when a broker dies or a
controller takes over; one synchronous round trip per znode made that take tens of seconds. Instead:

* **Reads** are pipelined: up to `PIPELINE_WINDOW` asynchronous requests are in flight, then their
  answers are collected (ZooKeeper answers a session's requests in order).
* **Writes** go in multi-ops (ZooKeeper transactions). A multi is one request, and ZooKeeper refuses a
  request larger than ``jute.maxbuffer`` (1 MiB by default) and closes the connection, so `chunks` cuts
  the operations into groups of at most `MAX_MULTI_BYTES` of paths and data and `MAX_MULTI_OPS`
  operations. Every chunk starts with the check of ``/controller_epoch``'s version (fencing).
* **A failed multi** changes nothing and reports one failure: the operations before it would have
  succeeded, the failing one did not, those after it were not tried (ZooKeeper stops at the first
  failure). `split_failed` turns that into "retry these" and "this one conflicted".
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

__all__ = [
    "MAX_MULTI_BYTES",
    "MAX_MULTI_OPS",
    "OP_OVERHEAD_BYTES",
    "PIPELINE_WINDOW",
    "ZkStats",
    "chunks",
    "split_failed",
]

T = TypeVar("T")

#: Half of ZooKeeper's default jute.maxbuffer (0xfffff bytes): room for the framing and the check op.
MAX_MULTI_BYTES = 512 * 1024
MAX_MULTI_OPS = 2000
#: Per-operation bytes besides path and data (op header, version, ACL list of a create).
OP_OVERHEAD_BYTES = 64
PIPELINE_WINDOW = 2000


def chunks(
    items: Sequence[T],
    size_of: Callable[[T], int],
    max_bytes: int = MAX_MULTI_BYTES,
    max_ops: int = MAX_MULTI_OPS,
) -> list[list[T]]:
    """``items`` cut, in order, into groups of at most ``max_ops`` items whose sizes (plus
    `OP_OVERHEAD_BYTES` each) sum to at most ``max_bytes``; an item larger than that is a group alone."""
    groups: list[list[T]] = []
    current: list[T] = []
    used = 0
    for item in items:
        size = size_of(item) + OP_OVERHEAD_BYTES
        if current and (used + size > max_bytes or len(current) >= max_ops):
            groups.append(current)
            current, used = [], 0
        current.append(item)
        used += size
    if current:
        groups.append(current)
    return groups


def split_failed(items: Sequence[T], failed_index: int) -> tuple[list[T], T]:
    """After a multi failed at ``items[failed_index]``: (the others, to submit again; the failed one)."""
    return [*items[:failed_index], *items[failed_index + 1 :]], items[failed_index]


@dataclass(slots=True)
class ZkStats:
    """Requests a metadata-store session made and the wall time spent waiting for them (the controller
    logs the difference over each of its events, so a slow fail-over says where its time went).
    ``store`` names what they went to: ZooKeeper, or the local store of a cluster of one."""

    reads: int = 0
    read_s: float = 0.0
    writes: int = 0
    write_s: float = 0.0
    store: str = "ZooKeeper"

    def add(self, write: bool, started: float, count: int = 1) -> None:
        """Account ``count`` requests that took from ``started`` (`time.perf_counter`) until now."""
        elapsed = time.perf_counter() - started
        if write:
            self.writes += count
            self.write_s += elapsed
        else:
            self.reads += count
            self.read_s += elapsed

    def copy(self) -> ZkStats:
        return ZkStats(self.reads, self.read_s, self.writes, self.write_s, self.store)

    def since(self, before: ZkStats) -> ZkStats:
        return ZkStats(
            self.reads - before.reads,
            self.read_s - before.read_s,
            self.writes - before.writes,
            self.write_s - before.write_s,
            self.store,
        )

    def describe(self) -> str:
        return (
            f"{self.store} reads {self.reads} in {self.read_s:.3f} s, "
            f"writes {self.writes} in {self.write_s:.3f} s"
        )
