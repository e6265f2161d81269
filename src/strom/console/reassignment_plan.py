"""The partition reassignment plan: Kafka's JSON file format and the state of each move (pure).

The format is the one ``kafka-reassign-partitions.sh`` reads and writes, so plans written for Kafka (or
by its ``--generate``) work unchanged::

    {"version": 1,
     "partitions": [{"topic": "orders", "partition": 0, "replicas": [1, 2], "log_dirs": ["any", "any"]}]}

``replicas`` is the target replica list, preferred leader first. ``log_dirs`` is optional; only ``"any"``
is accepted there (a move between a broker's log dirs is AlterReplicaLogDirs' job, not this plan's).
Each (topic, partition) appears once.

A move is *completed* when the controller lists no reassignment for the partition and Metadata shows
exactly the target replicas (in order: the first is the preferred leader); *in progress* while it is
listed; otherwise *different*: nothing in flight, yet the replicas are not the target (the move was
cancelled or replaced, or the plan was never executed).
"""

from __future__ import annotations

import enum
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeGuard

from strom.console.errors import ConsoleError

PLAN_VERSION = 1


@dataclass(frozen=True, slots=True)
class Move:
    """One partition's target replica list."""

    topic: str
    partition: int
    replicas: tuple[int, ...]

    @property
    def key(self) -> tuple[str, int]:
        return (self.topic, self.partition)

    @property
    def label(self) -> str:
        """``topic-partition``, as Kafka's tools name a partition."""
        return f"{self.topic}-{self.partition}"


class MoveState(enum.Enum):
    COMPLETED = "completed"
    IN_PROGRESS = "in progress"
    DIFFERENT = "different"


def parse_plan(text: str, source: str) -> list[Move]:
    """The moves of a plan in Kafka's format, in file order.

    Raises:
        ConsoleError: not JSON, not that format, a repeated partition, an empty or repeated replica
            list, or a ``log_dirs`` entry other than ``"any"`` (``source`` names the file in the message).
    """
    try:
        document = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConsoleError(f"{source}: not JSON ({exc.msg} at line {exc.lineno})") from None
    if not isinstance(document, dict):
        raise ConsoleError(f'{source}: expected an object {{"version": 1, "partitions": [...]}}')
    version = document.get("version", PLAN_VERSION)
    if version != PLAN_VERSION:
        raise ConsoleError(f"{source}: unsupported version {version!r} (only {PLAN_VERSION})")
    entries = document.get("partitions")
    if not isinstance(entries, list) or not entries:
        raise ConsoleError(f'{source}: "partitions" must be a non-empty list')
    moves: list[Move] = []
    seen: set[tuple[str, int]] = set()
    for number, entry in enumerate(entries, 1):
        move = _move(entry, f"{source}: partitions entry {number}")
        if move.key in seen:
            raise ConsoleError(f"{source}: partition {move.label} is listed twice")
        seen.add(move.key)
        moves.append(move)
    return moves


def _move(entry: Any, where: str) -> Move:
    if not isinstance(entry, dict):
        raise ConsoleError(f"{where}: expected an object")
    topic, partition, replicas = entry.get("topic"), entry.get("partition"), entry.get("replicas")
    if not isinstance(topic, str) or not topic:
        raise ConsoleError(f'{where}: "topic" must be a non-empty string')
    if not _is_int(partition) or partition < 0:
        raise ConsoleError(f'{where}: "partition" must be an integer >= 0')
    if not isinstance(replicas, list) or not replicas or not all(_is_int(b) and b >= 0 for b in replicas):
        raise ConsoleError(f'{where}: "replicas" must be a non-empty list of broker ids')
    if len(set(replicas)) != len(replicas):
        raise ConsoleError(f'{where}: "replicas" names a broker twice: {replicas}')
    log_dirs = entry.get("log_dirs")
    if log_dirs is not None:
        if not isinstance(log_dirs, list) or len(log_dirs) != len(replicas):
            raise ConsoleError(f'{where}: "log_dirs" must list one directory per replica')
        if any(d != "any" for d in log_dirs):
            raise ConsoleError(f'{where}: only "any" is supported in "log_dirs" (no AlterReplicaLogDirs)')
    return Move(topic, partition, tuple(replicas))


def _is_int(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def plan_json(assignment: Mapping[tuple[str, int], Sequence[int]]) -> str:
    """One line of Kafka's format for ``assignment`` (e.g. the current replicas, to roll a move back)."""
    partitions = [
        {"topic": topic, "partition": p, "replicas": list(replicas), "log_dirs": ["any"] * len(replicas)}
        for (topic, p), replicas in sorted(assignment.items())
    ]
    return json.dumps({"version": PLAN_VERSION, "partitions": partitions}, separators=(",", ":"))


def move_state(move: Move, replicas: Sequence[int], in_flight: bool) -> MoveState:
    """Where ``move`` stands, from the controller's listing and the replicas Metadata shows."""
    if in_flight:
        return MoveState.IN_PROGRESS
    return MoveState.COMPLETED if tuple(replicas) == move.replicas else MoveState.DIFFERENT
