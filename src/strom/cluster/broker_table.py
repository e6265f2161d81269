"""The reference broker table of a topic, as data: pure, shared by the web console and the CLI.

docs/design.md#rack-aware-assignment draws a topic as one row per broker (``R1-B0``, ``R2-B3``, ... in the
order the assignment walked the brokers) and one column per replica position: the partitions the broker leads,
then those it follows as first follower, second follower, ... (a partition's replica list is ``[preferred
leader, follower 1, ...]``). `broker_table` builds that table from Metadata-like partition states and marks,
per cell, what the cluster does now: whether the broker currently leads that partition (leadership moves when
a leader fails) and whether it is in the ISR (a stopped or lagging follower is not). So the healthy table
is exactly the reference one, and a failure shows where it happened.

Row order: the brokers in the order partitions' preferred leaders appear (P0's first: the order the
assignment used), then any other broker in the rack-alternating order of `strom.cluster.assignment`.

Text form (`render_text`): tab-separated like the reference, each cell like ``P0 P6``; a partition is
suffixed ``*`` where a follower leads it now, ``~`` where its preferred leader currently follows, and
``!`` where the replica is out of the ISR; a broker that is not alive is labelled ``(down)``.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

from strom.cluster.assignment import rack_alternating_order

LEGEND = "* leads now (leadership moved)   ~ preferred leader, follows now   ! out of sync (not in ISR)"


@dataclass(frozen=True, slots=True)
class PartitionState:
    partition: int
    leader: int  # -1: offline
    replicas: tuple[int, ...]
    isr: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Cell:
    partition: int
    leads: bool  # this broker is the partition's current leader
    in_sync: bool  # this broker is in the partition's ISR


@dataclass(frozen=True, slots=True)
class Row:
    broker: int
    label: str
    alive: bool
    columns: tuple[tuple[Cell, ...], ...]  # replica position 0 (leaders), 1, 2, ...


@dataclass(frozen=True, slots=True)
class BrokerTable:
    header: tuple[str, ...]
    rows: tuple[Row, ...]


def broker_label(broker: int, rack: str | None) -> str:
    return f"{rack}-B{broker}" if rack else f"B{broker}"


def broker_table(
    partitions: Sequence[PartitionState], racks: Mapping[int, str | None], live: Collection[int]
) -> BrokerTable:
    """The table for one topic. ``racks``: every broker whose rack is known (live or not)."""
    parts = sorted(partitions, key=lambda p: p.partition)
    rf = max((len(p.replicas) for p in parts), default=0)
    order: list[int] = []
    for p in parts:
        if p.replicas and p.replicas[0] not in order:
            order.append(p.replicas[0])
    everyone = {b: racks.get(b) for b in {*racks, *live, *(r for p in parts for r in p.replicas)}}
    order += [b for b in rack_alternating_order(everyone) if b not in order]
    rows = []
    for broker in order:
        columns = tuple(
            tuple(
                Cell(p.partition, p.leader == broker, broker in p.isr)
                for p in parts
                if len(p.replicas) > k and p.replicas[k] == broker
            )
            for k in range(rf)
        )
        rows.append(Row(broker, broker_label(broker, everyone.get(broker)), broker in live, columns))
    header = ("Brokers", "Leaders", *(["Followers"] * (rf - 1)))
    return BrokerTable(header, tuple(rows))


def cell_mark(cell: Cell, position: int) -> str:
    """The suffix of a partition in the text form ('' when it is as the assignment says)."""
    mark = ""
    if cell.leads and position > 0:
        mark += "*"
    elif not cell.leads and position == 0:
        mark += "~"
    if not cell.in_sync:
        mark += "!"
    return mark


def render_text(table: BrokerTable) -> str:
    lines = ["\t".join(table.header)]
    for row in table.rows:
        label = row.label if row.alive else f"{row.label} (down)"
        cells = [
            " ".join(f"P{c.partition}{cell_mark(c, k)}" for c in column) or "-"
            for k, column in enumerate(row.columns)
        ]
        lines.append("\t".join([label, *cells]))
    return "\n".join(lines)
