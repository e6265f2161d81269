"""Leader election decisions: pure functions over (replicas, ISR, live brokers), no I/O.

Kafka's controller elects a partition leader in four situations, each a function here:

* **offline** (the leader died, or a new partition comes online): the first replica, in assignment
  order, that is alive and in the ISR. If none is and unclean leader election is enabled for the topic,
  the first live replica at all (its log becomes the truth; committed records may be lost). Otherwise
  the partition stays offline (leader -1) until an ISR member returns.
* **preferred** (auto rebalance, ElectLeaders, `strom cluster elect-leaders`): the first replica, if it is
  alive and in the ISR; otherwise no change.
* **reassignment**: the first replica of the *target* list that is alive and in the ISR.
* **controlled shutdown**: the first live ISR replica that is not shutting down.

Every election that changes the leader bumps the leader epoch; the new ISR keeps only live replicas (and
always contains the new leader). A result of ``None`` means "no leader can be elected".
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass

__all__ = [
    "LeaderAndIsr",
    "controlled_shutdown_leader",
    "offline_leader",
    "preferred_leader",
    "reassignment_leader",
    "shrink_isr",
]

NO_LEADER = -1


@dataclass(frozen=True, slots=True)
class LeaderAndIsr:
    """A partition's leadership as stored in its state znode (plus the znode version it was read at)."""

    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    controller_epoch: int = 0
    zk_version: int = -1

    def elected(self, leader: int, isr: Sequence[int], controller_epoch: int) -> LeaderAndIsr:
        """The next state after an election: the epoch moves on even when the leader stays the same."""
        return LeaderAndIsr(leader, self.leader_epoch + 1, tuple(isr), controller_epoch, self.zk_version)


def _live_isr(isr: Collection[int], live: Collection[int]) -> list[int]:
    return [b for b in isr if b in live]


def offline_leader(
    replicas: Sequence[int],
    isr: Sequence[int],
    live: Collection[int],
    unclean_allowed: bool = False,
) -> tuple[int, list[int]] | None:
    """(leader, new ISR) when the current leader is gone, or None if the partition must stay offline."""
    live_isr = _live_isr(isr, live)
    for replica in replicas:
        if replica in live_isr:
            return replica, [b for b in replicas if b in live_isr] + [
                b for b in live_isr if b not in replicas
            ]
    if unclean_allowed:
        for replica in replicas:
            if replica in live:
                return replica, [replica]
    return None


def preferred_leader(
    replicas: Sequence[int], isr: Sequence[int], live: Collection[int]
) -> tuple[int, list[int]] | None:
    """(preferred replica, ISR) if the first replica can lead, else None."""
    if not replicas:
        return None
    preferred = replicas[0]
    if preferred in live and preferred in isr:
        return preferred, _live_isr(isr, live)
    return None


def reassignment_leader(
    target_replicas: Sequence[int], isr: Sequence[int], live: Collection[int]
) -> tuple[int, list[int]] | None:
    """(leader, ISR) chosen among the target replicas once they have caught up."""
    live_isr = _live_isr(isr, live)
    for replica in target_replicas:
        if replica in live_isr:
            return replica, live_isr
    return None


def controlled_shutdown_leader(
    replicas: Sequence[int], isr: Sequence[int], live: Collection[int], shutting_down: Collection[int]
) -> tuple[int, list[int]] | None:
    """(leader, ISR without the stopping brokers), or None if no other ISR member is alive."""
    candidates = [b for b in _live_isr(isr, live) if b not in shutting_down]
    for replica in replicas:
        if replica in candidates:
            return replica, candidates
    return None


def shrink_isr(isr: Sequence[int], removed: Collection[int]) -> list[int]:
    """The ISR without ``removed``, order kept (the leader is never removed by this function's callers)."""
    return [b for b in isr if b not in removed]
