"""Each partition's next offset, as the table records it. Pure.

Every commit that adds rows records the JSON object of partition number to the offset after the last
record translated (carried over from the earlier commit for the other partitions) twice, in the same
atomic catalog commit: as the table property ``strom.next-offsets``, and in the new snapshot's summary
under the same key. The table thus says exactly which records it holds: a restarted broker or a new
leader resumes at that offset, and a commit whose range does not start there is not made.

The table property is the authority (`recorded`): snapshot expiry removes old snapshots, and a snapshot
another tool made (a compaction of the engine of one's choice) has no such summary, but properties are
kept by every commit that does not set them. Tables written before the property existed have only the
summaries: then the newest summary (newest snapshot first) that has the key decides. The summary copy
stays for readers that look at a snapshot (the offsets a given snapshot holds, for a time-travel read).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping

SUMMARY_KEY = "strom.next-offsets"
PROPERTY_KEY = SUMMARY_KEY


def recorded(properties: Mapping[str, str], summaries: Iterable[Mapping[str, str]]) -> dict[int, int]:
    """The next offsets the table records: its property, else the newest summary that has them."""
    raw = properties.get(PROPERTY_KEY)
    if raw is not None:
        return _loads(raw)
    return parse(summaries)


def parse(summaries: Iterable[Mapping[str, str]]) -> dict[int, int]:
    """The next offsets of the newest summary (newest first) that has them; {} when none has."""
    for summary in summaries:
        raw = summary.get(SUMMARY_KEY)
        if raw is not None:
            return _loads(raw)
    return {}


def _loads(raw: str) -> dict[int, int]:
    try:
        loaded = json.loads(raw)
        return {int(p): int(o) for p, o in loaded.items()}
    except (ValueError, AttributeError, TypeError):
        return {}


def render(offsets: Mapping[int, int]) -> str:
    return json.dumps({str(p): o for p, o in sorted(offsets.items())}, separators=(",", ":"))


def merged(current: Mapping[int, int], partition: int, next_offset: int) -> dict[int, int]:
    out = dict(current)
    out[partition] = next_offset
    return out
