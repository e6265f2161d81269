"""A history read's pin of an Iceberg topic's table on a real SQL catalog (SQLite, local warehouse): it
names the table by uuid and topic id, and a table of the same name made for the topic created again
(after the first one's deletion, its snapshots gone) is refused rather than read at the old offsets."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.unit.test_lake_tables import key_value_rows, lake_tables

from strom.lake import history
from strom.lake.tables import TableRef
from strom.lake.translate import KEY_VALUE


def test_a_pinned_table_replaced_by_the_topic_created_again_is_refused(tmp_path: Path) -> None:
    tables = lake_tables(tmp_path)
    properties = tables.settings.properties
    earlier = TableRef("orders", KEY_VALUE, topic_id="earlier-id")
    tables.append(earlier, 0, 5, key_value_rows(0, 0, 5))
    pinned = history.pin(properties, "orders", with_dead_letters=False)
    assert pinned.next_offsets == {0: 5} and pinned.topic_id == "earlier-id"
    assert pinned.snapshot_id is not None and pinned.table_uuid is not None
    read = history.read_rows(properties, "orders", pinned.snapshot_id, 0, 0, 5, pinned.table_uuid)
    assert read["offset"].to_pylist() == [0, 1, 2, 3, 4]

    # The topic is deleted (its table dropped) and created again: the new table starts at offset 0.
    assert tables.drop(earlier)
    later = TableRef("orders", KEY_VALUE, topic_id="later-id")
    tables.append(later, 0, 3, key_value_rows(0, 0, 3))
    again = history.pin(properties, "orders", with_dead_letters=False)
    assert again.topic_id == "later-id" and again.table_uuid != pinned.table_uuid
    with pytest.raises(history.TableChanged, match=r"earlier-id.*later-id"):
        history.check_same("orders", pinned, again)
    # A task of the first plan: its snapshot is gone, and the table of the name is another one.
    with pytest.raises(history.TableChanged, match="not the one this read planned on"):
        history.read_rows(properties, "orders", pinned.snapshot_id, 0, 0, 5, pinned.table_uuid)
    # The new table, pinned anew, reads as usual; a pin without a table yet is no change.
    assert again.snapshot_id is not None
    rows = history.read_rows(properties, "orders", again.snapshot_id, 0, 0, 3, again.table_uuid)
    assert rows["offset"].to_pylist() == [0, 1, 2]
    history.check_same("orders", history.TablePin(None, {}), again)
