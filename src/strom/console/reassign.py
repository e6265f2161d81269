"""``strom topics reassign``: move partitions' replicas to other brokers, as kafka-reassign-partitions.sh.

The plan is Kafka's JSON (``strom.console.reassignment_plan``). The controller does the work (KIP-455,
``strom.cluster.reassignment``): it adds the new replicas, waits until they are in the ISR, moves
leadership if the leader is leaving, and drops the removed replicas. This tool only asks and watches,
through kafka-python's admin client (``strom.console.kafka_admin``), which sends both APIs to the
controller:

- ``execute``: Metadata first (an unknown topic or partition stops the command before anything is sent),
  prints the current assignment in the plan's format (keep it: it is the plan that moves everything
  back), then one AlterPartitionReassignments with every target. Each partition is accepted or refused
  on its own (INVALID_REPLICA_ASSIGNMENT: a broker that is not alive, ...). With ``wait``, it then polls
  ListPartitionReassignments and Metadata every half second until every accepted move is complete,
  drawing a progress bar of partitions on a terminal.
- ``verify``: one line per partition (completed, still in progress, or different); exit status 1 unless
  every move is complete.
- ``cancel``: AlterPartitionReassignments with no target for the plan's partitions that are still
  moving; the controller puts them back on their original replicas and drops the replicas it added.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any, TextIO, TypedDict

from kafka.admin import KafkaAdminClient
from kafka.structs import TopicPartition

from strom.console.clients import ClientOptions
from strom.console.errors import ConsoleError
from strom.console.kafka_admin import admin_call, error_text, kafka_admin
from strom.console.progress import progress
from strom.console.reassignment_plan import Move, MoveState, move_state, plan_json

POLL_INTERVAL_S = 0.5
#: How long a move may look "different" while waiting before it counts as failed: right after the
#: controller completes a move, a broker answering Metadata may not have its UpdateMetadata yet.
DIFFERENT_GRACE_S = 5.0

Assignment = dict[tuple[str, int], list[int]]


def execute_reassignment(
    options: ClientOptions,
    moves: Sequence[Move],
    out: TextIO,
    err: TextIO,
    *,
    wait: bool = False,
    wait_timeout_s: float | None = None,
) -> None:
    """Start every move; with ``wait``, return once all accepted moves are complete.

    Raises:
        ConsoleError: an unknown partition (nothing started), moves the controller refused (the others
            are started), a move that ended on other replicas, or ``wait_timeout_s`` passed.
    """
    with kafka_admin(options, "topics reassign") as admin:
        current = _current_assignment(admin, options, moves)
        print(
            "Current partition replica assignment (to roll back, save it and execute it as a plan):", file=out
        )
        print(plan_json({m.key: current[m.key] for m in moves}), file=out)
        targets = {TopicPartition(m.topic, m.partition): list(m.replicas) for m in moves}
        results = admin_call(
            options,
            "alter partition reassignments",
            lambda: admin.alter_partition_reassignments(targets, timeout_ms=int(options.timeout_s * 1000)),
        )
        accepted: list[Move] = []
        refused = 0
        for move in moves:
            tp = TopicPartition(move.topic, move.partition)
            if tp in results and results[tp] is None:
                accepted.append(move)
            else:
                refused += 1
                why = error_text(results[tp]) if tp in results else "no answer from the controller"
                print(f"cannot reassign {move.label}: {why}", file=err)
        if accepted:
            labels = ",".join(m.label for m in accepted)
            print(f"Successfully started partition reassignments for {labels}", file=out)
        if wait and accepted:
            _wait(admin, options, accepted, out, wait_timeout_s)
    if refused:
        raise ConsoleError(f"{refused} of {len(moves)} partition reassignments were not started")


def verify_reassignment(options: ClientOptions, moves: Sequence[Move], out: TextIO) -> None:
    """Print each move's state; raises unless every move is complete."""
    with kafka_admin(options, "topics reassign") as admin:
        states = _states(admin, options, moves)
    for move in moves:
        state, replicas = states[move.key]
        if state is MoveState.COMPLETED:
            print(f"Reassignment of partition {move.label} is completed.", file=out)
        elif state is MoveState.IN_PROGRESS:
            print(f"Reassignment of partition {move.label} is still in progress.", file=out)
        else:
            print(
                f"There is no active reassignment of partition {move.label}, but its replicas are "
                f"{replicas} rather than {list(move.replicas)}.",
                file=out,
            )
    unfinished = sum(1 for state, _ in states.values() if state is not MoveState.COMPLETED)
    if unfinished:
        raise ConsoleError(f"{unfinished} of {len(moves)} partition reassignments are not complete")


def cancel_reassignment(options: ClientOptions, moves: Sequence[Move], out: TextIO, err: TextIO) -> None:
    """Cancel the plan's moves that are still in progress (the others are left alone)."""
    with kafka_admin(options, "topics reassign") as admin:
        moving = _in_flight(admin, options, moves)
        active = [m for m in moves if m.key in moving]
        if not active:
            print("None of the specified partition reassignments are active.", file=out)
            return
        cancel: dict[TopicPartition, list[int] | None] = {
            TopicPartition(m.topic, m.partition): None for m in active
        }
        results = admin_call(
            options,
            "cancel partition reassignments",
            lambda: admin.alter_partition_reassignments(cancel, timeout_ms=int(options.timeout_s * 1000)),
        )
    cancelled = [m for m in active if results.get(TopicPartition(m.topic, m.partition), False) is None]
    for move in active:
        if move not in cancelled:
            tp = TopicPartition(move.topic, move.partition)
            why = error_text(results[tp]) if tp in results else "no answer from the controller"
            print(f"cannot cancel the reassignment of {move.label}: {why}", file=err)
    if cancelled:
        labels = ",".join(m.label for m in cancelled)
        print(f"Successfully cancelled partition reassignments for: {labels}", file=out)
    if len(cancelled) < len(active):
        raise ConsoleError(
            f"{len(active) - len(cancelled)} of {len(active)} reassignments were not cancelled"
        )


def _wait(
    admin: KafkaAdminClient,
    options: ClientOptions,
    moves: Sequence[Move],
    out: TextIO,
    timeout_s: float | None,
) -> None:
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    pending = {m.key: m for m in moves}
    different_since: dict[tuple[str, int], float] = {}
    failed: list[str] = []
    with progress("Reassigning partitions", total=len(moves), unit="partitions") as bar:
        while pending:
            states = _states(admin, options, list(pending.values()))
            now = time.monotonic()
            for key, (state, replicas) in states.items():
                move = pending[key]
                if (
                    state is MoveState.DIFFERENT
                    and now - different_since.setdefault(key, now) < DIFFERENT_GRACE_S
                ):
                    continue
                if state is MoveState.IN_PROGRESS:
                    different_since.pop(key, None)
                    continue
                del pending[key]
                bar.advance()
                if state is MoveState.COMPLETED:
                    bar.echo(f"Reassignment of partition {move.label} is completed.", out)
                else:
                    failed.append(f"{move.label} ended on replicas {replicas}, not {list(move.replicas)}")
            if not pending:
                break
            waiting = sorted(m.label for m in pending.values())
            more = " ..." if len(waiting) > 3 else ""
            bar.describe(f"Reassigning partitions (waiting for {', '.join(waiting[:3])}{more})")
            if deadline is not None and now >= deadline:
                raise ConsoleError(
                    f"reassignment still in progress after {timeout_s:g}s: {', '.join(waiting)}"
                )
            time.sleep(POLL_INTERVAL_S)
    if failed:
        raise ConsoleError(f"reassignment did not complete as planned: {'; '.join(failed)}")


def _states(
    admin: KafkaAdminClient, options: ClientOptions, moves: Sequence[Move]
) -> dict[tuple[str, int], tuple[MoveState, list[int]]]:
    moving = _in_flight(admin, options, moves)
    current = _current_assignment(admin, options, moves)
    return {m.key: (move_state(m, current[m.key], m.key in moving), current[m.key]) for m in moves}


def _in_flight(
    admin: KafkaAdminClient, options: ClientOptions, moves: Sequence[Move]
) -> set[tuple[str, int]]:
    """The plan's partitions the controller lists as moving."""
    wanted = [TopicPartition(m.topic, m.partition) for m in moves]
    listed: dict[Any, Any] = admin_call(
        options,
        "list partition reassignments",
        lambda: admin.list_partition_reassignments(wanted, timeout_ms=int(options.timeout_s * 1000)),
    )
    return {(tp.topic, tp.partition) for tp in listed}


class _DescribedPartition(TypedDict):
    partition_index: int
    replica_nodes: list[int]


class _DescribedTopic(TypedDict):
    """The fields read from one topic of kafka-python's ``describe_topics`` (a Metadata response topic)."""

    error_code: int
    name: str
    partitions: list[_DescribedPartition] | None


def _current_assignment(admin: KafkaAdminClient, options: ClientOptions, moves: Sequence[Move]) -> Assignment:
    """Replicas of the plan's partitions as Metadata shows them; an unknown one is an error."""
    topics = sorted({m.topic for m in moves})
    described: list[_DescribedTopic] = admin_call(
        options, "describe topics", lambda: admin.describe_topics(topics)
    )
    assignment: Assignment = {}
    for topic in described:
        if topic.get("error_code", 0) != 0:
            continue
        for part in topic.get("partitions") or []:
            assignment[(topic["name"], int(part["partition_index"]))] = [
                int(b) for b in part["replica_nodes"]
            ]
    unknown = [m.label for m in moves if m.key not in assignment]
    if unknown:
        raise ConsoleError(f"unknown partition(s): {', '.join(unknown)}")
    return assignment
