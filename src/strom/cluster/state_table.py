"""A table of per-key states with a rule book of allowed moves: the core of the controller's state machines.

Theory of operation. Kafka's controller keeps one state per partition (`PartitionStateMachine`) and one
per replica (`ReplicaStateMachine`); every state declares the states it may be entered from. Strom keeps
each machine's states in a `StateTable`: a mapping from key to state plus that rule book
(``valid_previous[target]`` = the states ``target`` may follow). A key absent from the table is in the
*absent* state (NonExistent), and moving a key to the absent state removes it.

`StateTable.transition_to` is the only way a state changes (`StateTable.check` asks first, for a move
whose effect must succeed before it is recorded). It checks the move first: a move the rule
book does not allow is *refused* -- logged at WARNING with the key, both states and the reason, and the
table left as it was -- and the caller must then skip the effect (ZooKeeper write, request to a broker)
that the move stood for. A refused move is always a controller bug or a race the controller did not
foresee; refusing it keeps the table truthful and the log says where it happened.

Two operations bypass the rule book, each for one documented reason:

* `StateTable.initialize`: on controller fail-over the states are rebuilt from what ZooKeeper and the
  live broker set say now (Kafka's ``initializePartitionState``/``initializeReplicaState``); there is no
  previous state to check against.
* `StateTable.forget`: the znode a key described is gone (its topic was deleted by another path, or
  the controller resigned), so the controller no longer knows anything about the key. Logged.

Pure data, no I/O. Call only from the controller's event loop (not thread-safe).
"""

from __future__ import annotations

import logging
from collections.abc import Hashable, Iterable, Iterator, Mapping
from enum import Enum
from typing import Generic, TypeVar

log = logging.getLogger("strom.cluster.state_change")

K = TypeVar("K", bound=Hashable)
S = TypeVar("S", bound=Enum)

__all__ = ["StateTable"]


class StateTable(Generic[K, S]):
    """Per-key states of one kind (``"partition"``, ``"replica"``), moved only along allowed edges."""

    def __init__(self, kind: str, valid_previous: Mapping[S, frozenset[S]], absent: S) -> None:
        missing = set(type(absent)) - set(valid_previous)
        if missing:
            raise ValueError(
                f"{kind} states without a valid-previous entry: {sorted(s.name for s in missing)}"
            )
        self.kind = kind
        self.valid_previous = valid_previous
        self.absent = absent
        self._states: dict[K, S] = {}

    def get(self, key: K) -> S:
        return self._states.get(key, self.absent)

    def __contains__(self, key: object) -> bool:
        return key in self._states

    def __len__(self) -> int:
        return len(self._states)

    def __iter__(self) -> Iterator[K]:
        return iter(list(self._states))

    def items(self) -> list[tuple[K, S]]:
        return list(self._states.items())

    def keys_in(self, *states: S) -> list[K]:
        """Keys currently in any of ``states`` (in insertion order)."""
        return [k for k, s in self._states.items() if s in states]

    def allowed(self, key: K, target: S) -> bool:
        """Whether ``key`` may move to ``target`` now (no logging, no change)."""
        return self.get(key) in self.valid_previous[target]

    def check(self, key: K, target: S, reason: str = "") -> bool:
        """`allowed`, logging a refusal: for a move whose effect must happen before it is recorded."""
        current = self.get(key)
        if current in self.valid_previous[target]:
            return True
        log.warning(
            "refused %s state change %s: %s -> %s%s",
            self.kind,
            key,
            current.name,
            target.name,
            f" ({reason})" if reason else "",
        )
        return False

    def transition_to(self, key: K, target: S, reason: str = "") -> bool:
        """Move ``key`` to ``target`` if the rule book allows it; otherwise refuse, log and return False."""
        if not self.check(key, target, reason):
            return False
        current = self.get(key)
        if target is self.absent:
            self._states.pop(key, None)
        else:
            self._states[key] = target
        if current is not target:
            log.debug("%s %s: %s -> %s %s", self.kind, key, current.name, target.name, reason)
        return True

    def transition_all(self, keys: Iterable[K], target: S, reason: str = "") -> list[K]:
        """`transition_to` for each key; returns the keys that moved (refusals are logged)."""
        return [key for key in keys if self.transition_to(key, target, reason)]

    def initialize(self, key: K, state: S) -> None:
        """Set a state rebuilt from ZooKeeper on fail-over, without a previous state to check."""
        if state is self.absent:
            self._states.pop(key, None)
        else:
            self._states[key] = state

    def forget(self, keys: Iterable[K], reason: str) -> None:
        """Drop keys whose znode is gone; entries not already absent are logged."""
        for key in keys:
            state = self._states.pop(key, None)
            if state is not None:
                log.info("forgetting %s %s in state %s (%s)", self.kind, key, state.name, reason)

    def clear(self) -> None:
        self._states.clear()
