"""ListOffsets (key 2): earliest (-2), latest (-1) or the first offset at a timestamp.

From v7 the record with the largest timestamp (-3, KIP-734), from v8 the local log start (-4, KIP-405),
from v9 the last offset in remote storage (-5, KIP-1005; -1 without tiered storage or before a copy),
from v11 the earliest offset pending upload (-6, KIP-1023; answered -1: Strom does not track which
segments await their upload). Strom's own ``ICEBERG_TABLE`` (-100) asks the leader of an Iceberg
topic's partition for its table: the next offset the table records (the records below it are in the
table) and, as the timestamp, the wall time since which the oldest record not yet in the table has
waited (-1 when none waits); -1 and -1 while the leader does not translate the partition (not an
Iceberg topic, or its task not started). The translation lag is then the last stable offset (latest,
read_committed) minus that offset (`strom topics describe`, docs/iceberg.md).

Latest is the high watermark for read_uncommitted and the last stable offset for read_committed (equal
without transactions, docs/protocol.md#fetch-responses). A timestamp lookup goes through the time index and
answers the first batch whose max timestamp is at or after the target; none means offset -1 and timestamp -1,
as Kafka answers.

Leader epoch (v4+), as Kafka's ``Partition.fetchOffsetForTimestamp``: latest answers the
partition's current leader epoch; earliest the epoch of the leader-epoch cache entry covering the log start
offset (with tiered storage, earliest is the remote log's start and its epoch, docs/tiered-storage.md);
a timestamp lookup the epoch of the batch holding the found offset (the cache entry covering it).
A ``current_leader_epoch`` in the request is checked as for Fetch (FENCED_LEADER_EPOCH when older,
UNKNOWN_LEADER_EPOCH when newer).

Only the leader answers (NOT_LEADER_OR_FOLLOWER elsewhere, even where consumers fetch from followers,
KIP-392). A new leader whose high watermark still lags the start of its epoch answers a consumer's latest,
and a timestamp lookup finding nothing below the high watermark, with OFFSET_NOT_AVAILABLE (KIP-207, as
Kafka): the high watermark it would report could be below one a consumer already saw from the old leader
or a follower, and the client retries until the followers' fetches move it.
"""

from __future__ import annotations

from strom.broker.handlers.authz import Op, Res, denied
from strom.broker.handlers.base import RequestContext, handles
from strom.broker.lake.lag import ICEBERG_TABLE
from strom.protocol.api import ApiKey
from strom.protocol.errors import ErrorCode, KafkaError
from strom.protocol.messages import (
    ListOffsetsRequest,
    ListOffsetsRequestPartition,
    ListOffsetsResponse,
    ListOffsetsResponsePartitionResponse,
    ListOffsetsResponseTopicResponse,
)

READ_COMMITTED = 1
EARLIEST = -2
LATEST = -1
LATEST_TIERED = -5  # KIP-1005
CONSUMER = -1  # replica_id of a client's request (-2 is Kafka's debugging id)


def _lookup(
    ctx: RequestContext, topic: str, p: ListOffsetsRequestPartition, isolation_level: int, replica_id: int
) -> ListOffsetsResponsePartitionResponse:
    index = int(p["partition_index"])
    target = int(p["timestamp"])
    out: ListOffsetsResponsePartitionResponse = {
        "partition_index": index,
        "error_code": 0,
        "timestamp": -1,
        "offset": -1,
        "leader_epoch": -1,
    }
    try:
        if denied(ctx, Op.DESCRIBE, Res.TOPIC, topic):
            raise KafkaError(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
        out["timestamp"], out["offset"], out["leader_epoch"] = (
            ctx.ports.replica_manager.fetch_offset_for_timestamp(  # checks leadership and the epoch
                topic,
                index,
                int(p.get("current_leader_epoch", -1)),
                LATEST if target == ICEBERG_TABLE else target,
                int(isolation_level) == READ_COMMITTED,
                replica_id == CONSUMER,
            )
        )
        if target == ICEBERG_TABLE:
            lookup = ctx.ports.iceberg_position
            found = lookup(topic, index) if lookup is not None else None
            out["offset"], out["timestamp"] = found if found is not None else (-1, -1)
        elif target == EARLIEST and (rlm := ctx.ports.remote_log_manager) is not None:
            # Tiered storage: the log starts in remote storage (below the local log start).
            part = ctx.ports.replica_manager.partitions.get((topic, index))
            remote_start = rlm.log_start(part) if part is not None else None
            if remote_start is not None and remote_start[0] < out["offset"]:
                out["offset"], out["leader_epoch"] = remote_start
        elif target == LATEST_TIERED and (rlm := ctx.ports.remote_log_manager) is not None:
            # KIP-1005 (v9+): the last offset copied to remote storage (-1 while nothing is)
            state = rlm.state_of(topic, index)
            copied = state.copied_segments() if state is not None else []
            if copied:  # segments may overlap (a new leader's first copy): the one reaching furthest
                last = max(copied, key=lambda m: m.end_offset)
                epochs = last.segment_leader_epochs
                out["offset"], out["leader_epoch"] = last.end_offset, epochs[-1][0] if epochs else -1
    except KafkaError as exc:
        out["error_code"] = int(exc.code)
    return out


@handles(ApiKey.LIST_OFFSETS)
async def handle_list_offsets(ctx: RequestContext, req: ListOffsetsRequest) -> ListOffsetsResponse:
    topics: list[ListOffsetsResponseTopicResponse] = []
    level = int(req.get("isolation_level", 0))
    replica_id = int(req.get("replica_id", CONSUMER))
    for t in req["topics"]:
        topics.append(
            {
                "name": t["name"],
                "partitions": [_lookup(ctx, t["name"], p, level, replica_id) for p in t["partitions"]],
            }
        )
    return {"throttle_time_ms": 0, "topics": topics}
