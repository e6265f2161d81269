"""`PartitionLag`: how far one partition's Iceberg table is behind its log, in records and in time. Pure
(the last stable offset is read through a callable, the time is passed in). `TableLag`: the same as
another broker learns it from the partition's leader (below).

Records: the partition's last stable offset *now* (read at every question, so a scrape during a long
round sees the records that arrived meanwhile) minus the next offset the table records (the position
after the last commit; a round in flight has committed nothing, so its records still count).

Time: how long the oldest record not in the table has waited, i.e. since the last stable offset first
passed the table's position. The last stable offset is observed, with the wall time, every translation
interval (the translator's periodic look), at each question and around each round; the observations
kept are those past the table's position, in increasing order of offset, thinned to `MAX_SAMPLES`. The
oldest record's wait counts from the first observation past the position: it is late by at most one
observation interval, never by a whole round.

From elsewhere. A broker that does not lead the partition (the console of any broker, ``strom topics
describe``) asks its leader, the way Kafka asks a leader for its offsets: ListOffsets with Strom's
`ICEBERG_TABLE` timestamp answers `PartitionLag`'s position and waiting time (the offset and the
timestamp of the answer; -1 and -1 while the leader does not translate the partition), and latest with
read_committed the last stable offset. `lag_requests` builds the two requests' bodies, `TableLag` holds
the three answers (`lags_answered`) and derives the lag from them.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from strom.broker.lake.backlog import BacklogController
from strom.protocol.messages import ListOffsetsRequest, ListOffsetsResponse

MAX_SAMPLES = 512
# ListOffsets' timestamp asking for the table (far from Kafka's own, which count down from -1)
ICEBERG_TABLE = -100
LATEST = -1
READ_UNCOMMITTED, READ_COMMITTED = 0, 1
LIST_OFFSETS_VERSION = 7  # what both requests need (any version from 1 takes a timestamp)

TopicPartition = tuple[str, int]


@dataclass
class PartitionLag:
    """One partition's translation state, for /metrics and ``strom topics describe``."""

    last_stable_offset: Callable[[], int]
    position: int = -1  # the next offset the table records; -1 until the task has read it
    rows: int = 0  # rows appended since the task started
    dead: int = 0  # dead letters appended since the task started
    backlog: BacklogController = field(default_factory=BacklogController)  # which share its rounds run at
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


@dataclass(frozen=True, slots=True)
class TableLag:
    """One partition's translation lag as its leader answers ListOffsets (see the module docstring)."""

    next_offset: int  # the next offset the table records; -1: the leader does not translate it
    last_stable_offset: int
    waiting_since_ms: int  # -1: no record waits

    @property
    def known(self) -> bool:
        return self.next_offset >= 0

    @property
    def records(self) -> int:
        """Committed records not yet in the table (0 when unknown)."""
        return max(self.last_stable_offset - self.next_offset, 0) if self.known else 0

    def seconds(self, now_ms: int) -> float:
        """Seconds the oldest record not yet in the table has waited (0 when none waits)."""
        if not self.records or self.waiting_since_ms < 0:
            return 0.0
        return max(now_ms - self.waiting_since_ms, 0) / 1000


def list_offsets_body(partitions: Iterable[TopicPartition], timestamp: int, level: int) -> ListOffsetsRequest:
    """A ListOffsets body (`LIST_OFFSETS_VERSION`) asking for ``timestamp`` of each partition at the
    isolation ``level``."""
    by_topic: defaultdict[str, list[int]] = defaultdict(list)
    for topic, index in partitions:
        by_topic[topic].append(index)
    return {
        "replica_id": -1,
        "isolation_level": level,
        "topics": [
            {
                "name": topic,
                "partitions": [
                    {"partition_index": i, "current_leader_epoch": -1, "timestamp": timestamp}
                    for i in indexes
                ],
            }
            for topic, indexes in sorted(by_topic.items())
        ],
    }


def lag_requests(partitions: Iterable[TopicPartition]) -> tuple[ListOffsetsRequest, ListOffsetsRequest]:
    """The two ListOffsets bodies (`LIST_OFFSETS_VERSION`) that ask one leader for its ``partitions``'
    lag: the table's position, and the last stable offset."""
    asked = list(partitions)
    return list_offsets_body(asked, ICEBERG_TABLE, READ_UNCOMMITTED), list_offsets_body(
        asked, LATEST, READ_COMMITTED
    )


def lags_answered(table: ListOffsetsResponse, stable: ListOffsetsResponse) -> dict[TopicPartition, TableLag]:
    """The lag of each partition both answers (to `lag_requests`' bodies) give without an error."""
    positions, stables = offsets_answered(table), offsets_answered(stable)
    return {tp: TableLag(at[0], stables[tp][0], at[1]) for tp, at in positions.items() if tp in stables}


def offsets_answered(response: ListOffsetsResponse) -> dict[TopicPartition, tuple[int, int]]:
    """(offset, timestamp) of each partition answered without an error."""
    return {
        (str(t["name"]), int(p["partition_index"])): (int(p["offset"]), int(p["timestamp"]))
        for t in response["topics"]
        for p in t["partitions"]
        if int(p["error_code"]) == 0
    }
