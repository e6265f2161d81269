"""ListOffsets (key 2): earliest (-2), latest (-1) or the first offset at a timestamp.

Latest is the high watermark for read_uncommitted and the last stable offset for read_committed (equal
without transactions, P13). A timestamp lookup goes through the time index and answers the first batch
whose max timestamp is at or after the target; none means offset -1 and timestamp -1, as Kafka answers.
"""

from __future__ import annotations

from typing import Any

from strom.broker.handlers.base import Body, RequestContext, handles
from strom.protocol.api import ApiKey
from strom.protocol.errors import ErrorCode, KafkaError

LATEST = -1
EARLIEST = -2


def _lookup(ctx: RequestContext, topic: str, p: dict[str, Any]) -> dict[str, Any]:
    index = int(p["partition_index"])
    target = int(p["timestamp"])
    out: dict[str, Any] = {
        "partition_index": index,
        "error_code": 0,
        "timestamp": -1,
        "offset": -1,
        "leader_epoch": -1,
    }
    try:
        plog = ctx.broker.partition_log(topic, index)
    except KafkaError as exc:
        out["error_code"] = int(exc.code)
        return out
    if target == LATEST:
        out["offset"] = plog.high_watermark
    elif target == EARLIEST:
        out["offset"] = plog.log_start_offset
    elif target < 0:
        # -3 (max timestamp) and other negative specials arrive only from v7, which is not advertised.
        out["error_code"] = int(ErrorCode.UNSUPPORTED_VERSION)
    else:
        found = plog.offset_for_timestamp(target)
        if found is not None and found[0] < plog.high_watermark:
            out["offset"], out["timestamp"] = found
    return out


@handles(ApiKey.LIST_OFFSETS)
async def handle_list_offsets(ctx: RequestContext, req: Body) -> Body:
    topics = []
    for t in req["topics"]:
        topics.append(
            {"name": t["name"], "partitions": [_lookup(ctx, t["name"], p) for p in t["partitions"]]}
        )
    return {"throttle_time_ms": 0, "topics": topics}
