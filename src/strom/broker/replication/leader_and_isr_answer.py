"""A broker's answer for one partition of a LeaderAndIsr request.

The error code says whether the state was applied (KAFKA_STORAGE_ERROR: the replica is in a failed log
dir, which the controller takes out of leadership and the ISR). From version 2 the answer for a
partition *without a leader* also says how far the replica's log got: the latest leader epoch in it
and its log end offset. A controller whose partition's ISR members all restarted (and so may each
have lost unsynced writes) elects the one whose log got furthest, once every one of them has
answered (`strom.cluster.election`).
"""

from __future__ import annotations

from strom.protocol.errors import ErrorCode
from strom.protocol.messages import LeaderAndIsrResponsePartitionError
from strom.storage.log import PartitionLog

__all__ = ["partition_answer"]


def partition_answer(
    tp: tuple[str, int], code: ErrorCode, leaderless: PartitionLog | None = None
) -> LeaderAndIsrResponsePartitionError:
    """``leaderless``: the replica's log, when the state applied has no leader (else None)."""
    answer: LeaderAndIsrResponsePartitionError = {
        "topic_name": tp[0],
        "partition_index": tp[1],
        "error_code": int(code),
    }
    if leaderless is not None and code is ErrorCode.NONE:
        answer["last_epoch"] = leaderless.leader_epoch_cache.latest_epoch
        answer["log_end_offset"] = leaderless.log_end_offset
    return answer
