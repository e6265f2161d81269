"""Partition reassignment while the faults run: AlterPartitionReassignments through the production path.

The nemesis's ``reassign`` fault starts one move (`move`) of a partition of the main topic and goes on
with the schedule while the move runs, so later faults hit it half done. With three brokers and RF 3
every broker already holds every partition, so a move that copies data goes through RF 2: a partition
with three replicas loses one (the rest shuffled, so the preferred leader may change), one with two
gets the missing broker back at a random place, which must fetch the whole log and join the ISR
before the move completes. The request goes to the controller Metadata names, as an admin client
sends it; NOT_CONTROLLER and connection errors are retried after another refresh, and a partition
already moving is left alone (REASSIGNMENT_IN_PROGRESS). A move in flight when the faults end must
still complete: `moves_done` waits (bounded) until ListPartitionReassignments lists none, the
liveness rule for reassignments.

With RF 2 and min.insync.replicas=2 a partition refuses acks=all writes while one of its two replicas
is out of the ISR; what was acknowledged is on both, so the promise holds as with RF 3.
"""

from __future__ import annotations

import asyncio
import random

from strom.protocol.api import ApiKey
from strom.protocol.errors import ErrorCode
from strom.protocol.messages import AlterPartitionReassignmentsRequest
from strom.sim.workload import Topology

__all__ = ["move", "moves_done", "next_target"]


def next_target(replicas: list[int], brokers: list[int], rng: random.Random) -> list[int]:
    """The move after ``replicas``: from three replicas to two (one dropped, shuffled), from fewer
    back to three (a missing broker inserted at a random place)."""
    if len(replicas) >= 3:
        kept = list(replicas)
        kept.remove(rng.choice(kept))
        rng.shuffle(kept)
        return kept
    target = list(replicas)
    missing = [b for b in brokers if b not in target]
    target.insert(rng.randrange(len(target) + 1), rng.choice(missing))
    return target


async def move(
    topology: Topology, partition: int, brokers: list[int], rng: random.Random, until_s: float
) -> str:
    """Start one move of ``partition`` (retrying until the controller takes it or refuses it as in
    progress, or ``until_s``); what happened, for the trace."""
    loop = asyncio.get_running_loop()
    while loop.time() < until_s:
        await topology.refresh()
        current = topology.replicas.get(partition)
        controller = topology.brokers.get(topology.controller_id)
        if not current or controller is None:
            await asyncio.sleep(0.5)
            continue
        target = next_target(current, brokers, rng)
        body: AlterPartitionReassignmentsRequest = {
            "timeout_ms": 30_000,
            "topics": [
                {"name": topology.topic, "partitions": [{"partition_index": partition, "replicas": target}]}
            ],
        }
        try:
            answer = await topology.connection(controller).send(
                ApiKey.ALTER_PARTITION_REASSIGNMENTS, 0, body, 30_000
            )
        except ConnectionError:
            await asyncio.sleep(0.5)
            continue
        code = answer["error_code"] or answer["responses"][0]["partitions"][0]["error_code"]
        if code == 0:
            return f"partition {partition} moving from {current} to {target}"
        if code == ErrorCode.REASSIGNMENT_IN_PROGRESS:
            return f"partition {partition} already moving"
        await asyncio.sleep(0.5)
    return f"partition {partition} not moved: the run ended"


async def in_flight(topology: Topology) -> int | None:
    """How many partition moves the controller lists (None: no controller answered)."""
    await topology.refresh()
    controller = topology.brokers.get(topology.controller_id)
    if controller is None:
        return None
    try:
        answer = await topology.connection(controller).send(
            ApiKey.LIST_PARTITION_REASSIGNMENTS, 0, {"timeout_ms": 30_000, "topics": None}, 30_000
        )
    except ConnectionError:
        return None
    if answer["error_code"]:
        return None
    return sum(len(t["partitions"]) for t in answer["topics"])


async def moves_done(topology: Topology, end_s: float) -> bool:
    """Until the controller lists no move in flight; False if ``end_s`` came first."""
    loop = asyncio.get_running_loop()
    while loop.time() < end_s:
        if await in_flight(topology) == 0:
            return True
        await asyncio.sleep(0.5)
    return False
