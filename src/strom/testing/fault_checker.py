"""The fault suite's checker: did every acknowledged record survive, exactly once, in order, where acked?

Pure functions over two lists, no I/O: the produces the brokers *acknowledged* (topic, partition, offset,
payload), and what a consumer read back afterwards from offset 0 to the high watermark of every partition.
Kafka's promise (docs/cluster.md#what-kafka-promises) for an idempotent ``acks=all`` producer is that each
acknowledged record is committed: present once, at the offset the acknowledgement named, in the producer's
order. Unacknowledged records may or may not be present (a timed-out request can still have been committed),
but never twice. An acknowledgement may carry no offset (``UNKNOWN_OFFSET``): librdkafka's idempotent
producer acknowledges a timed-out request implicitly, offset unknown, once a later request of the same
partition succeeds (the broker would have refused the later sequence otherwise). Such a record must
still be present exactly once and in order; only its position cannot be checked.

Payload format, so that every question is decidable from the bytes alone::

    b"<writer>:<sequence>:" + padding      writer: [A-Za-z0-9_.-]+ (one producer session), sequence: int >= 0

Per run the checker reports:

* ``acknowledged`` - distinct records acknowledged;
* ``lost`` - acknowledged records absent from what was read;
* ``duplicated`` - records (acknowledged or not) read more than once (each extra copy counts);
* ``moved`` - acknowledged records read, but not at the acknowledged topic, partition and offset (or,
  for an acknowledgement without offset, not on the acknowledged partition);
* ``reordered`` - adjacent pairs of one writer's acknowledged records on one partition, in sequence
  order, that were read in the opposite order.
"""

from __future__ import annotations

import itertools
import re
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field

_PAYLOAD = re.compile(rb"([A-Za-z0-9_.-]+):(\d+):")


@dataclass(frozen=True, slots=True)
class Record:
    """One record at a position: an acknowledgement or a record read back."""

    topic: str
    partition: int
    offset: int
    payload: bytes


RecordId = tuple[str, int]
UNKNOWN_OFFSET = -1


def encode_payload(writer: str, sequence: int, size: int = 0) -> bytes:
    """``writer:sequence:`` padded with ``.`` up to ``size`` bytes (never truncated)."""
    head = f"{writer}:{sequence}:".encode()
    if _PAYLOAD.fullmatch(head) is None:
        raise ValueError(f"writer {writer!r} must match [A-Za-z0-9_.-]+")
    return head + b"." * max(0, size - len(head))


def decode_payload(payload: bytes) -> RecordId:
    """(writer, sequence) of a payload made by `encode_payload`; ValueError for anything else."""
    match = _PAYLOAD.match(payload)
    if match is None:
        raise ValueError(f"not a fault-suite payload: {payload[:40]!r}")
    return match.group(1).decode(), int(match.group(2))


@dataclass(slots=True)
class Report:
    acknowledged: int = 0
    read: int = 0
    lost: int = 0
    duplicated: int = 0
    moved: int = 0
    reordered: int = 0
    unknown_offset: int = 0  # acknowledgements without an offset (informational, not an anomaly)
    # a few examples of each anomaly, for the failure message
    examples: dict[str, list[str]] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not (self.lost or self.duplicated or self.moved or self.reordered)

    def note(self, kind: str, text: str, limit: int = 5) -> None:
        found = self.examples.setdefault(kind, [])
        if len(found) < limit:
            found.append(text)

    def summary(self) -> str:
        head = (
            f"acknowledged={self.acknowledged} read={self.read} lost={self.lost} "
            f"duplicated={self.duplicated} moved={self.moved} reordered={self.reordered} "
            f"unknown_offset={self.unknown_offset}"
        )
        details = "".join(f"\n  {kind}: {'; '.join(items)}" for kind, items in self.examples.items())
        return head + details


def check(acknowledged: Iterable[Record], read: Iterable[Record]) -> Report:
    report = Report()
    acked: dict[RecordId, Record] = {}
    for record in acknowledged:
        rid = decode_payload(record.payload)
        previous = acked.get(rid)
        if previous is not None and previous != record:
            # The same record acknowledged twice at different places: a duplicate the producer saw.
            report.duplicated += 1
            report.note("duplicated", f"{rid} acknowledged at {_where(previous)} and {_where(record)}")
            continue
        acked[rid] = record
    report.acknowledged = len(acked)
    report.unknown_offset = sum(1 for r in acked.values() if r.offset == UNKNOWN_OFFSET)

    positions: dict[RecordId, list[Record]] = defaultdict(list)
    for record in read:
        report.read += 1
        positions[decode_payload(record.payload)].append(record)

    for rid, copies in positions.items():
        if len(copies) > 1:
            report.duplicated += len(copies) - 1
            report.note("duplicated", f"{rid} read at {', '.join(_where(r) for r in copies)}")

    for rid, ack in acked.items():
        found = positions.get(rid, [])
        if not found:
            report.lost += 1
            report.note("lost", f"{rid} acknowledged at {_where(ack)}")
        elif all(not _same_place(c, ack) for c in found):
            report.moved += 1
            report.note("moved", f"{rid} acknowledged at {_where(ack)}, read at {_where(found[0])}")

    _count_reordered(acked, positions, report)
    return report


def _count_reordered(
    acked: dict[RecordId, Record], positions: dict[RecordId, list[Record]], report: Report
) -> None:
    streams: dict[tuple[str, str, int], list[tuple[int, int]]] = defaultdict(list)
    for (writer, sequence), ack in acked.items():
        # Order is judged on the acknowledged partition only; a copy elsewhere is already "moved".
        offsets = [
            c.offset
            for c in positions.get((writer, sequence), [])
            if (c.topic, c.partition) == (ack.topic, ack.partition)
        ]
        if offsets:
            streams[(writer, ack.topic, ack.partition)].append((sequence, min(offsets)))
    for (writer, topic, partition), items in streams.items():
        items.sort()
        for (seq_a, off_a), (seq_b, off_b) in itertools.pairwise(items):
            if off_b < off_a:
                report.reordered += 1
                report.note(
                    "reordered",
                    f"{writer} {topic}-{partition}: seq {seq_a}@{off_a} read after seq {seq_b}@{off_b}",
                )


def _same_place(read: Record, ack: Record) -> bool:
    if (read.topic, read.partition) != (ack.topic, ack.partition):
        return False
    return ack.offset in (UNKNOWN_OFFSET, read.offset)


def _where(record: Record) -> str:
    return f"{record.topic}-{record.partition}@{record.offset}"
