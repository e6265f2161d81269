"""The backlog controller: which CPU share a partition's next translation round runs at. Pure.

Theory of operation. Translation is background work with a target lag; produce and fetch are not. When
producers outpace translation on the broker's cores, the CPU the workers take comes out of produce's,
and what produce keeps is what the workers are not given. So a round runs in the *idle* share (worker
processes in Linux's ``SCHED_IDLE`` class: they run only on CPU nothing else of the machine wants, and
give it up at once when the broker's event loop wakes) as long as the partition's translation lag is
within a bound, ``strom.iceberg.translation.backlog.ms`` (by default `DEFAULT_BOUND_FACTOR` times the
topic's ``strom.iceberg.target.lag.ms``): the lag grows while produce keeps the CPU busy, and shrinks
whenever it does not. Past the bound the controller *raises* the share: the partition's rounds go to
worker processes at an ordinary (if lower) priority, which take their share of the CPU from produce,
until the lag is back under `LOWER_FRACTION` of the bound (the gap keeps the share from flapping
around the bound round after round).

Why two kinds of process rather than one process changing its priority: an unprivileged process may
lower its own priority (raise its niceness, enter ``SCHED_IDLE``) but not raise it back without
``CAP_SYS_NICE`` or an ``RLIMIT_NICE`` allowance (sched(7), setpriority(2)), and Strom runs as any
user. A round that waits in the idle share when the lag passes the bound (the machine busy) is run
again at once in the raised share; the idle copy, if it has already started, commits nothing new when
it ends (an append keeps only rows past the offset the table records: strom.lake.tables).
"""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_BOUND_FACTOR = 10
LOWER_FRACTION = 0.5


def backlog_bound_ms(configured_ms: int, target_lag_ms: int) -> int:
    """The lag (ms) past which a partition's translation is raised: ``configured_ms`` (the broker's
    ``strom.iceberg.translation.backlog.ms``), or when it is negative `DEFAULT_BOUND_FACTOR` times the
    topic's target lag."""
    if configured_ms >= 0:
        return configured_ms
    return DEFAULT_BOUND_FACTOR * max(target_lag_ms, 0)


def raised_share(lag_ms: float, bound_ms: int, raised: bool) -> bool:
    """Whether rounds run in the raised share, given the lag now, the bound and the share so far:
    raised past the bound; once raised, until the lag is at or under `LOWER_FRACTION` of it."""
    if lag_ms > bound_ms:
        return True
    return raised and lag_ms > bound_ms * LOWER_FRACTION


@dataclass
class BacklogController:
    """One partition's share: `raised_share` applied to each lag it is shown."""

    raised: bool = False
    raised_rounds: int = 0  # rounds that ended in the raised share, since the partition's task began
    idle_rounds: int = 0  # rounds that ended in the idle share

    def update(self, lag_ms: float, bound_ms: int) -> bool:
        """The share for the lag now (True: raised)."""
        self.raised = raised_share(lag_ms, bound_ms, self.raised)
        return self.raised

    def counted(self, raised: bool) -> None:
        """A round ended in the raised share (``raised``) or in the idle one."""
        if raised:
            self.raised_rounds += 1
        else:
            self.idle_rounds += 1
