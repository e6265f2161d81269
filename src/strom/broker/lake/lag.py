"""`PartitionLag`: how far one partition's Iceberg table is behind its log, in records and in time. Pure
(the last stable offset is read through a callable, the time is passed in).

Records: the partition's last stable offset *now* (read at every question, so a scrape during a long
round sees the records that arrived meanwhile) minus the next offset the table records (the position
after the last commit; a round in flight has committed nothing, so its records still count).

Time: how long the oldest record not in the table has waited, i.e. since the last stable offset first
passed the table's position. The last stable offset is observed, with the wall time, every translation
interval (the translator's periodic look), at each question and around each round; the observations
kept are those past the table's position, in increasing order of offset, thinned to `MAX_SAMPLES`. The
oldest record's wait counts from the first observation past the position: it is late by at most one
observation interval, never by a whole round.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

MAX_SAMPLES = 512


@dataclass
class PartitionLag:
    """One partition's translation state, for /metrics and ``strom topics describe``."""

    last_stable_offset: Callable[[], int]
    position: int = -1  # the next offset the table records; -1 until the task has read it
    rows: int = 0  # rows appended since the task started
    dead: int = 0  # dead letters appended since the task started
    # (last stable offset, wall time in ms) when seen, offsets increasing, all past `position`.
    _samples: list[tuple[int, int]] = field(default_factory=list)

    def observe(self, now_ms: int) -> int:
        """Note the last stable offset as of ``now_ms``; returns it."""
        lso = self.last_stable_offset()
        if lso > self.position >= 0 and (not self._samples or lso > self._samples[-1][0]):
            self._samples.append((lso, now_ms))
            if len(self._samples) > MAX_SAMPLES:
                del self._samples[1::2]  # keep the first: it dates the oldest waiting record
        return lso

    def committed(self, position: int, now_ms: int) -> None:
        """The table now records ``position`` as the partition's next offset."""
        self.position = position
        self._samples = [s for s in self._samples if s[0] > position]
        self.observe(now_ms)

    @property
    def records(self) -> int:
        """Committed records not yet in the table."""
        if self.position < 0:
            return 0
        return max(self.last_stable_offset() - self.position, 0)

    def waiting_since_ms(self, now_ms: int) -> int:
        """The wall time since which the oldest record not yet in the table has waited; -1 when none
        waits."""
        self.observe(now_ms)
        return self._samples[0][1] if self.records and self._samples else -1

    def seconds(self, now_ms: int) -> float:
        """Seconds the oldest record not yet in the table has waited (0 when none waits)."""
        since = self.waiting_since_ms(now_ms)
        return max(now_ms - since, 0) / 1000 if since >= 0 else 0.0
