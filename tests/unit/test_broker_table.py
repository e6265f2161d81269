"""The reference broker table (strom.cluster.broker_table): topic Invoice, 10 partitions, RF 3, six brokers
in two racks, healthy and after a broker failure."""

from __future__ import annotations

from strom.cluster.assignment import assign_replicas
from strom.cluster.broker_table import PartitionState, broker_table, render_text

RACKS = {0: "R1", 1: "R1", 2: "R1", 3: "R2", 4: "R2", 5: "R2"}
SEEDS = """Brokers\tLeaders\tFollowers\tFollowers
R1-B0\tP0 P6\tP5\tP4
R2-B3\tP1 P7\tP0 P6\tP5
R1-B1\tP2 P8\tP1 P7\tP0 P6
R2-B4\tP3 P9\tP2 P8\tP1 P7
R1-B2\tP4\tP3 P9\tP2 P8
R2-B5\tP5\tP4\tP3 P9"""


def invoice(dead: int | None = None) -> list[PartitionState]:
    states = []
    for p, replicas in assign_replicas(RACKS, 10, 3).items():
        alive = [r for r in replicas if r != dead]
        states.append(PartitionState(p, alive[0], tuple(replicas), tuple(alive)))
    return states


def test_healthy_table_is_the_seeds_table() -> None:
    assert render_text(broker_table(invoice(), RACKS, set(RACKS))) == SEEDS


def test_a_dead_broker_is_marked_and_its_leadership_moves() -> None:
    table = broker_table(invoice(dead=3), RACKS, set(RACKS) - {3})
    text = render_text(table).splitlines()
    assert text[2] == "R2-B3 (down)\tP1~! P7~!\tP0! P6!\tP5!"
    assert text[3] == "R1-B1\tP2 P8\tP1* P7*\tP0 P6"  # the first followers of P1 and P7 lead them now
    row = table.rows[1]
    assert (row.broker, row.alive) == (3, False)
    assert not any(cell.in_sync for column in row.columns for cell in column)


def test_unknown_racks_label_plainly_and_order_by_assignment() -> None:
    states = [PartitionState(0, 1, (1, 0), (1, 0)), PartitionState(1, 0, (0, 1), (0,))]
    text = render_text(broker_table(states, {}, {0, 1}))
    assert text.splitlines() == ["Brokers\tLeaders\tFollowers", "B1\tP0\tP1!", "B0\tP1\tP0"]
