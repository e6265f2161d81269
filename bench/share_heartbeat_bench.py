"""ShareGroupHeartbeat's cost on the coordinator's event loop against the group's size (KIP-932).

Times `ShareGroupShard.heartbeat`, the operation the coordinator runtime runs for each heartbeat: the
pure decision (`strom.coordinator.share.membership`) and the records of what it changed
(`strom.coordinator.share.records`), without the write itself. The shard holds one group of N members
subscribed to one topic of 64 partitions, as a replay leaves it (every member sent its assignment);
nothing is written, so every repeat decides on the same group. Three heartbeats:

* steady: a member at its epoch, nothing to change (what every member sends each heartbeat interval);
* join: a new member (epoch 0): a new group epoch, the assignment recomputed, its records;
* leave: a member leaves (epoch -1): the same, with the member's tombstones.

    PYTHONPATH=src .venv/bin/python bench/share_heartbeat_bench.py [--members 100 1000 5000] [--repeat 7]

Prints the median CPU microseconds per heartbeat (this process's CPU time, less disturbed by other jobs
on a shared machine than wall time) over ``--repeat`` timings, each the mean of a run sized to about
0.2 s.
"""

from __future__ import annotations

import argparse
import functools
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from codec_bench import median_us

from strom._util.clock import SystemClock
from strom.broker.coordinators.share_group_shard import ShareGroupConfig, ShareGroupShard, ShareHeartbeat
from strom.coordinator.share.membership import ShareGroup, ShareMember, assign
from strom.coordinator_runtime import ShardContext
from strom.coordinator_runtime.shard import TimerOperation

TOPICS = {"orders": 64}
GROUP = "bench"


class _Timers:
    """Session timers kept, never fired: the bench times the decision, not the event loop."""

    def __init__(self) -> None:
        self.armed: dict[str, TimerOperation] = {}

    def schedule(self, key: str, delay_ms: int, operation: TimerOperation) -> None:
        self.armed[key] = operation

    def cancel(self, key: str) -> None:
        self.armed.pop(key, None)


def shard_with(members: int) -> ShareGroupShard:
    context = ShardContext("__consumer_offsets", 0, 0, SystemClock(), _Timers())
    shard = ShareGroupShard(context, ShareGroupConfig(max_size=members + 1), lambda: TOPICS)
    group = ShareGroup(GROUP, group_epoch=members, assignment_epoch=members)
    for i in range(members):
        group.members[f"m{i:06d}"] = ShareMember(f"m{i:06d}", members, ("orders",), "bench", "/127.0.0.1")
    for member_id, assignment in assign(list(group.members.values()), TOPICS).items():
        group.members[member_id].assignment = assignment
        group.members[member_id].sent = dict(assignment)
    shard.groups[GROUP] = group
    return shard


def timed(op: Callable[[], object], repeat: int) -> float:
    """Median CPU microseconds per call, each timing a run sized to about 0.2 s."""
    start = time.process_time()
    op()
    number = max(1, int(0.2 / max(time.process_time() - start, 1e-6)))
    return median_us(op, number, repeat)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--members", type=int, nargs="+", default=[100, 1000, 5000])
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    print(f"{'members':>8} {'steady us':>12} {'join us':>12} {'leave us':>12}")
    for members in args.members:
        shard = shard_with(members)
        epoch = members
        steady = ShareHeartbeat(GROUP, "m000000", epoch, None)
        join = ShareHeartbeat(GROUP, "new-member", 0, ("orders",))
        leave = ShareHeartbeat(GROUP, f"m{members // 2:06d}", -1, None)
        figures = []
        for request in (steady, join, leave):
            result = shard.heartbeat(request)
            assert result.response.error.name == "NONE", result.response
            figures.append(timed(functools.partial(shard.heartbeat, request), args.repeat))
        print(f"{members:>8} {figures[0]:>12.1f} {figures[1]:>12.1f} {figures[2]:>12.1f}")


if __name__ == "__main__":
    main()
