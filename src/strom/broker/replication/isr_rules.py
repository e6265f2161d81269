"""The leader's replication rules as pure functions: what a follower's fetch means, who is in sync,
where the high watermark may go, and how an acks=all wait ends (Kafka's ``Partition`` and ``Replica``).

`Partition` (partition.py) holds the state and calls these; they read their inputs and decide, with no
clock, log or I/O of their own, so each rule is unit-tested on its own.

* **Effective min ISR** (`strom.storage.config.effective_min_isr`, the controller applies it too):
  ``min(min.insync.replicas, replicas)``, Kafka's since 3.7 (KAFKA-15583,
  ``Partition.effectiveMinIsr``): one value for the three places it matters: the append check of
  acks=all (NOT_ENOUGH_REPLICAS), the high watermark (it does not move while the ISR is below it: the
  strict min-ISR rule, docs/cluster.md#what-kafka-promises) and the end of an acks=all wait
  (NOT_ENOUGH_REPLICAS_AFTER_APPEND). A setting above the replication factor therefore asks for every
  replica, not for the impossible (before 3.7 Kafka refused every acks=all write then).
* **Follower fetch state**: a follower's fetch offset is its log end offset. It is *caught up* when it
  fetches at the leader's log end offset, or at the end the leader had at its previous fetch (it then
  was caught up at that previous fetch: Kafka's lastCaughtUpTime rule).
* **ISR shrink**: an in-sync follower not caught up for ``replica.lag.time.max.ms`` leaves.
* **ISR expand**: a follower outside the ISR joins when its log end offset reaches the high watermark
  and the start of the current leader epoch (else, leader after a fail-over, it could lack committed
  records between the high watermark and the leader's log end offset).
* **High watermark**: the minimum log end offset over the ISR, the leader's own included; the ISR
  counted is the *maximal* one (with a follower whose addition is proposed but not yet stored, KIP-497:
  waiting for one more replica is always safe).
* **acks=all**: done once the high watermark reaches the batch's end: NONE if the ISR still meets the
  min ISR, else NOT_ENOUGH_REPLICAS_AFTER_APPEND (Kafka's check). Before that, an ISR below the min ISR
  answers NOT_ENOUGH_REPLICAS_AFTER_APPEND at once: under the strict rule the high watermark cannot
  reach the batch until the ISR grows back, so Kafka's wait would end only at the request's timeout.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from strom.protocol.errors import ErrorCode

WAITING = None  # `replication_outcome`: the acks=all wait goes on


@dataclass(slots=True)
class FollowerState:
    """What the leader knows of one follower, from its fetches (Kafka's ``ReplicaState``)."""

    log_end_offset: int = -1
    log_start_offset: int = -1
    last_caught_up_ms: int = 0
    last_fetch_leader_leo: int = -1
    last_fetch_ms: int = 0
    # The high watermark this leader last put in a response to the follower: a parked fetch of the
    # follower completes when the high watermark passes it, so followers learn it without waiting for
    # an append (consumers reading from followers see records as soon as they are committed).
    high_watermark_sent: int = -1


def record_fetch(
    state: FollowerState, fetch_offset: int, log_start_offset: int, leader_leo: int, now_ms: int
) -> None:
    """A follower fetched at ``fetch_offset`` (its log end offset) while the leader's was ``leader_leo``."""
    if fetch_offset >= leader_leo:
        state.last_caught_up_ms = now_ms
    elif fetch_offset >= state.last_fetch_leader_leo >= 0:
        state.last_caught_up_ms = max(state.last_caught_up_ms, state.last_fetch_ms)
    state.log_end_offset = fetch_offset
    state.log_start_offset = log_start_offset
    state.last_fetch_leader_leo = leader_leo
    state.last_fetch_ms = now_ms


def can_join_isr(follower_leo: int, high_watermark: int, leader_epoch_start_offset: int) -> bool:
    return follower_leo >= high_watermark and follower_leo >= leader_epoch_start_offset


def out_of_sync_replicas(
    isr: Iterable[int], leader_id: int, followers: Mapping[int, FollowerState], now_ms: int, lag_max_ms: int
) -> list[int]:
    """The ISR members, the leader excepted, not caught up for more than ``lag_max_ms``; a member with no
    state yet counts as caught up now (it just became a follower of this leader)."""
    lagging = []
    for replica in isr:
        if replica == leader_id:
            continue
        state = followers.get(replica)
        if state is not None and now_ms - state.last_caught_up_ms > lag_max_ms:
            lagging.append(replica)
    return lagging


def under_min_isr(isr_size: int, replica_count: int, min_insync_replicas: int) -> bool:
    """Below the effective min ISR: ``isr_size < min(min_insync_replicas, replica_count)``, written
    so that an ISR of every replica (the usual case) needs one comparison."""
    return isr_size < replica_count and isr_size < min_insync_replicas


def high_watermark_bound(
    leader_id: int, leader_leo: int, isr: Iterable[int], followers: Mapping[int, FollowerState]
) -> int:
    """The minimum log end offset over ``isr`` (-1 if a member's is not known yet)."""
    bound = leader_leo
    for replica in isr:  # alone in the ISR (a cluster of one): the log end offset
        if replica == leader_id:
            continue
        state = followers.get(replica)
        if state is None or state.log_end_offset < 0:
            return -1
        bound = min(bound, state.log_end_offset)
    return bound


def replication_outcome(
    high_watermark: int, required_offset: int, isr_size: int, min_isr: int
) -> ErrorCode | None:
    """How an acks=all wait for ``required_offset`` stands: an error code to answer, or `WAITING`."""
    if isr_size < min_isr:
        return ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND
    if high_watermark >= required_offset:
        return ErrorCode.NONE
    return WAITING
