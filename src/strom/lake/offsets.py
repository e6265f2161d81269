"""Each partition's next offset, kept in the table's snapshot summary. Pure.

Every append of the translator records, under ``strom.next-offsets``, the JSON object of partition
number to the offset after the last record translated (carried over from the previous snapshot for the
other partitions). The table's current snapshot thus says exactly which records it holds: a restarted
broker or a new leader resumes at that offset, and a commit whose range does not start there is not
made (`plan_commit`). A snapshot without the key (one another tool made, e.g. a compaction) defers to
its ancestors.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping

SUMMARY_KEY = "strom.next-offsets"


def parse(summaries: Iterable[Mapping[str, str]]) -> dict[int, int]:
    """The next offsets of the newest summary (newest first) that has them; {} when none has."""
    for summary in summaries:
        raw = summary.get(SUMMARY_KEY)
        if raw is None:
            continue
        try:
            loaded = json.loads(raw)
            return {int(p): int(o) for p, o in loaded.items()}
        except (ValueError, AttributeError, TypeError):
            return {}
    return {}


def render(offsets: Mapping[int, int]) -> str:
    return json.dumps({str(p): o for p, o in sorted(offsets.items())}, separators=(",", ":"))


def merged(current: Mapping[int, int], partition: int, next_offset: int) -> dict[int, int]:
    out = dict(current)
    out[partition] = next_offset
    return out
