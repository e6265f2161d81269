"""The connection's and the SASL exchange's state machines (broker/network/connection_state.py,
broker/security/sasl_state.py): every allowed move is taken, every other one refused, and the SASL
exchange's states drive the connection's."""

from __future__ import annotations

import itertools
from enum import Enum

import pytest

from strom._util.states import RefusedTransition, check_rule_book, transition
from strom.broker.network.connection_state import (
    READING,
    ConnectionState,
    after_sasl_step,
    next_connection_state,
)
from strom.broker.network.connection_state import VALID_PREVIOUS as CONNECTION_TABLE
from strom.broker.security.sasl_state import VALID_PREVIOUS as SASL_TABLE
from strom.broker.security.sasl_state import SaslState, next_sasl_state

C, S = ConnectionState, SaslState

CONNECTION_MOVES = {
    (C.AUTHENTICATING, C.SERVING),
    (C.AUTHENTICATING, C.DRAINING),
    (C.AUTHENTICATING, C.CLOSED),
    (C.SERVING, C.REAUTHENTICATING),
    (C.SERVING, C.THROTTLED),
    (C.THROTTLED, C.SERVING),
    (C.THROTTLED, C.DRAINING),
    (C.THROTTLED, C.CLOSED),
    (C.SERVING, C.DRAINING),
    (C.SERVING, C.CLOSED),
    (C.REAUTHENTICATING, C.SERVING),
    (C.REAUTHENTICATING, C.DRAINING),
    (C.REAUTHENTICATING, C.CLOSED),
    (C.DRAINING, C.CLOSED),
}
SASL_MOVES = {
    (S.HANDSHAKE, S.AUTHENTICATE),
    (S.HANDSHAKE, S.LEGACY_TOKEN),
    (S.HANDSHAKE, S.FAILED),
    (S.AUTHENTICATE, S.COMPLETE),
    (S.AUTHENTICATE, S.FAILED),
    (S.LEGACY_TOKEN, S.COMPLETE),
    (S.LEGACY_TOKEN, S.FAILED),
    (S.COMPLETE, S.REAUTHENTICATE),
    (S.COMPLETE, S.FAILED),
    (S.REAUTHENTICATE, S.COMPLETE),
    (S.REAUTHENTICATE, S.FAILED),
}


@pytest.mark.parametrize(("current", "target"), sorted(CONNECTION_MOVES, key=str))
def test_every_allowed_connection_move_is_taken(current: ConnectionState, target: ConnectionState) -> None:
    assert next_connection_state(current, target) is target


@pytest.mark.parametrize(
    ("current", "target"),
    sorted(set(itertools.product(C, C)) - CONNECTION_MOVES, key=str),
)
def test_every_other_connection_move_is_refused(current: ConnectionState, target: ConnectionState) -> None:
    with pytest.raises(RefusedTransition, match=f"{current.name} -> {target.name}"):
        next_connection_state(current, target)


@pytest.mark.parametrize(("current", "target"), sorted(SASL_MOVES, key=str))
def test_every_allowed_sasl_move_is_taken(current: SaslState, target: SaslState) -> None:
    assert next_sasl_state(current, target) is target


@pytest.mark.parametrize(("current", "target"), sorted(set(itertools.product(S, S)) - SASL_MOVES, key=str))
def test_every_other_sasl_move_is_refused(current: SaslState, target: SaslState) -> None:
    with pytest.raises(RefusedTransition) as refused:
        next_sasl_state(current, target)
    assert (refused.value.current, refused.value.target) == (current, target)


def test_the_tables_are_the_documented_ones() -> None:
    assert {(p, t) for t, ps in CONNECTION_TABLE.items() for p in ps} == CONNECTION_MOVES
    assert {(p, t) for t, ps in SASL_TABLE.items() for p in ps} == SASL_MOVES
    assert frozenset({C.AUTHENTICATING, C.SERVING, C.THROTTLED, C.REAUTHENTICATING}) == READING


@pytest.mark.parametrize(
    ("sasl", "expected"),
    [
        (S.HANDSHAKE, C.AUTHENTICATING),
        (S.AUTHENTICATE, C.AUTHENTICATING),
        (S.LEGACY_TOKEN, C.AUTHENTICATING),
        (S.COMPLETE, C.SERVING),
        (S.FAILED, C.DRAINING),
    ],
)
def test_a_login_moves_the_connection(sasl: SaslState, expected: ConnectionState) -> None:
    target = after_sasl_step(C.AUTHENTICATING, sasl)
    assert target is expected
    if target is not C.AUTHENTICATING:
        next_connection_state(C.AUTHENTICATING, target)  # and the move is an allowed one


def test_a_re_authentication_moves_the_connection_there_and_back() -> None:
    assert after_sasl_step(C.SERVING, S.COMPLETE) is C.SERVING
    assert after_sasl_step(C.SERVING, S.REAUTHENTICATE) is C.REAUTHENTICATING
    assert after_sasl_step(C.REAUTHENTICATING, S.COMPLETE) is C.SERVING
    assert after_sasl_step(C.REAUTHENTICATING, S.FAILED) is C.DRAINING


@pytest.mark.parametrize("sasl", list(S))
@pytest.mark.parametrize("current", [C.DRAINING, C.CLOSED])
def test_a_connection_that_stopped_reading_stays_where_it_is(
    current: ConnectionState, sasl: SaslState
) -> None:
    assert after_sasl_step(current, sasl) is current


class _Light(Enum):
    RED = 1
    GREEN = 2
    BROKEN = 3


def test_a_rule_book_with_a_state_missing_or_unreachable_is_rejected() -> None:
    red, green, broken = _Light
    with pytest.raises(ValueError, match="BROKEN"):
        check_rule_book({red: frozenset({green}), green: frozenset({red})}, frozenset({red}))
    with pytest.raises(ValueError, match="BROKEN"):
        check_rule_book({red: frozenset(), green: frozenset({red}), broken: frozenset()}, frozenset({red}))
    book = {red: frozenset({green}), green: frozenset({red}), broken: frozenset({red, green})}
    check_rule_book(book, frozenset({red}))
    assert transition(book, red, broken) is broken
    with pytest.raises(RefusedTransition):
        transition(book, broken, red)
