"""States as enums with the states each may follow, and the one function that moves between them.

A state machine module declares its states as an `enum.Enum` and its rule book as a mapping
``valid_previous[target]`` = the states ``target`` may follow (Kafka's ``validPreviousStates``); the
states a machine may start in have no previous state and are named by the module. `transition` is
the only way a driver changes such a state: it returns the target if the rule book allows the move
and raises `RefusedTransition` otherwise, which is always a bug in the driver (a move it did not
expect to make), so the driver's own error handling ends whatever it was doing. Pure, no logging.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import Enum
from typing import TypeVar

S = TypeVar("S", bound=Enum)

__all__ = ["RefusedTransition", "check_rule_book", "transition"]


class RefusedTransition(Exception):
    """A move the rule book does not allow."""

    def __init__(self, current: Enum, target: Enum) -> None:
        super().__init__(f"{type(current).__name__}: {current.name} -> {target.name} is not allowed")
        self.current = current
        self.target = target


def transition(valid_previous: Mapping[S, frozenset[S]], current: S, target: S) -> S:
    """``target`` if it may follow ``current``; raises `RefusedTransition` otherwise."""
    if current in valid_previous[target]:
        return target
    raise RefusedTransition(current, target)


def check_rule_book(valid_previous: Mapping[S, frozenset[S]], initial: frozenset[S]) -> None:
    """Raise ``ValueError`` unless every state has an entry and can be reached (at import time)."""
    states = set(type(next(iter(initial))))
    missing = states - set(valid_previous)
    unreachable = {s for s in states - initial if not valid_previous.get(s)}
    if missing or unreachable:
        names = sorted(s.name for s in missing | unreachable)
        raise ValueError(f"states without an entry or a way in: {names}")
