"""A round as a translation worker process runs it (`run_round_request`, here in the test's process on a
real SQL catalog): a schema id it was not given comes back as missing with nothing committed; given the
schemas, the round commits; an id the registry did not know holds the partition, or becomes a dead
letter once the translator gives up; a deleted topic's id is refused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tests.unit.test_lake_tables import V1, V2, _wire, lake_tables

from strom.lake.config_defs import catalog_settings
from strom.lake.tables import StaleTopic, TableRef
from strom.lake.translate import VALUE_SCHEMA_ID_PREFIX
from strom.lake.worker import RoundRequest, run_round_request, schema_ids, set_up
from strom.protocol.records.builder import build_batch
from strom.protocol.records.record import Record

SCHEMAS = {1: ("AVRO", json.dumps(V1)), 2: ("AVRO", json.dumps(V2))}


def test_schema_ids_are_read_from_the_wire_format_prefix() -> None:
    records = [
        Record(0, 0, None, _wire(1, V1, {"id": 1})),
        Record(1, 0, None, _wire(2, V2, {"id": 2, "note": None})),
        Record(2, 0, None, b"\x01not the wire format"),
        Record(3, 0, None, None),
        Record(4, 0, None, b"\x00\x00"),
    ]
    assert schema_ids(records) == {1, 2}


def test_a_round_asks_for_the_schemas_it_was_not_given_then_commits(tmp_path: Path) -> None:
    set_up(catalog_settings({}, str(tmp_path), {}))
    ref = TableRef("orders", VALUE_SCHEMA_ID_PREFIX, topic_id="id-1")
    values = [_wire(1, V1, {"id": 1}), _wire(2, V2, {"id": 2, "note": "n"}), _wire(3, V1, {"id": 3})]
    batch = build_batch([(None, v, (), 1_700_000_000_000) for v in values], base_offset=0)
    request = RoundRequest(ref, 0, [(batch, [])], 0, 3, give_up_waiting=False)

    asked = run_round_request(request)
    assert (asked.missing, asked.next_offset, asked.rows) == ({1, 2, 3}, 0, 0)
    tables = lake_tables(tmp_path)
    assert tables.next_offsets(ref) == {}  # nothing committed

    # Schemas 1 and 2 looked up; 3 unknown to the registry: the round stops before offset 2.
    held = run_round_request(
        RoundRequest(ref, 0, [(batch, [])], 0, 3, False, SCHEMAS, unknown=frozenset({3}))
    )
    assert (held.missing, held.next_offset, held.rows, held.waiting_for) == (frozenset(), 2, 2, 3)
    assert tables.next_offsets(ref) == {0: 2}

    # The translator's patience ran out: the record of schema 3 is a dead letter.
    given_up = run_round_request(
        RoundRequest(ref, 0, [(batch, [])], 2, 3, True, SCHEMAS, unknown=frozenset({3}))
    )
    assert (given_up.next_offset, given_up.rows, given_up.dead) == (3, 0, 1)
    dead = tables.table(TableRef("orders", VALUE_SCHEMA_ID_PREFIX, dlq=True, topic_id="id-1"))
    assert dead.scan().to_arrow()["offset"].to_pylist() == [2]


def test_a_deleted_topics_round_is_refused(tmp_path: Path) -> None:
    set_up(catalog_settings({}, str(tmp_path), {}))
    ref = TableRef("gone", "key_value", topic_id="id-2")
    batch = build_batch([(None, b"v", (), 1)], base_offset=0)
    request = RoundRequest(ref, 0, [(batch, [])], 0, 1, False, dropped=frozenset({"id-2"}))
    with pytest.raises(StaleTopic):
        run_round_request(request)
    assert not lake_tables(tmp_path).exists(ref)
