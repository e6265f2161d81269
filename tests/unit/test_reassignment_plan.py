"""Kafka's reassignment JSON: parsing (with every refusal one clear message), writing, and move states."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from strom.console.errors import ConsoleError
from strom.console.reassignment_plan import Move, MoveState, move_state, parse_plan, plan_json


def test_parses_kafkas_format_in_file_order() -> None:
    text = json.dumps(
        {
            "version": 1,
            "partitions": [
                {"topic": "orders", "partition": 1, "replicas": [2, 0], "log_dirs": ["any", "any"]},
                {"topic": "orders", "partition": 0, "replicas": [1]},
            ],
        }
    )
    assert parse_plan(text, "plan.json") == [Move("orders", 1, (2, 0)), Move("orders", 0, (1,))]
    assert Move("orders", 1, (2, 0)).label == "orders-1"


@pytest.mark.parametrize(
    ("document", "needle"),
    [
        ("not json", "plan.json: not JSON"),
        ("[]", "expected an object"),
        ('{"version": 2, "partitions": []}', "unsupported version 2"),
        ('{"version": 1}', '"partitions" must be a non-empty list'),
        ('{"version": 1, "partitions": []}', '"partitions" must be a non-empty list'),
        ('{"partitions": [7]}', "partitions entry 1: expected an object"),
        ('{"partitions": [{"partition": 0, "replicas": [1]}]}', '"topic" must be a non-empty string'),
        ('{"partitions": [{"topic": "t", "partition": -1, "replicas": [1]}]}', '"partition" must be'),
        ('{"partitions": [{"topic": "t", "partition": true, "replicas": [1]}]}', '"partition" must be'),
        ('{"partitions": [{"topic": "t", "partition": 0, "replicas": []}]}', '"replicas" must be'),
        ('{"partitions": [{"topic": "t", "partition": 0, "replicas": ["1"]}]}', '"replicas" must be'),
        ('{"partitions": [{"topic": "t", "partition": 0, "replicas": [1, 1]}]}', "names a broker twice"),
        (
            '{"partitions": [{"topic": "t", "partition": 0, "replicas": [1], "log_dirs": ["/d"]}]}',
            'only "any"',
        ),
        (
            '{"partitions": [{"topic": "t", "partition": 0, "replicas": [1, 2], "log_dirs": ["any"]}]}',
            "one directory per replica",
        ),
        (
            '{"partitions": [{"topic": "t", "partition": 0, "replicas": [1]},'
            ' {"topic": "t", "partition": 0, "replicas": [2]}]}',
            "partition t-0 is listed twice",
        ),
    ],
)
def test_refusals_name_the_problem(document: str, needle: str) -> None:
    with pytest.raises(ConsoleError) as caught:
        parse_plan(document, "plan.json")
    assert needle in caught.value.message
    assert caught.value.message.startswith("plan.json")


assignments = st.dictionaries(
    st.tuples(st.text("abc.-_", min_size=1, max_size=5), st.integers(0, 50)),
    st.lists(st.integers(0, 9), min_size=1, max_size=4, unique=True),
    min_size=1,
    max_size=8,
)


@given(assignments)
def test_written_plan_reads_back(assignment: dict[tuple[str, int], list[int]]) -> None:
    moves = parse_plan(plan_json(assignment), "rollback")
    assert {m.key: list(m.replicas) for m in moves} == assignment
    assert [m.key for m in moves] == sorted(assignment)


def test_move_states() -> None:
    move = Move("t", 0, (2, 1))
    assert move_state(move, [2, 1, 0], in_flight=True) is MoveState.IN_PROGRESS
    assert move_state(move, [2, 1], in_flight=False) is MoveState.COMPLETED
    # the first replica is the preferred leader: the same brokers in another order are not the plan
    assert move_state(move, [1, 2], in_flight=False) is MoveState.DIFFERENT
    assert move_state(move, [0], in_flight=False) is MoveState.DIFFERENT
