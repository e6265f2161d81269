"""Fetch (key 1), sessionless: stored batches served as file ranges, long-polled through the purgatory.

Rules (PROTOCOL-NOTES §3 "Fetch responses", P6-P8, P13):
- every requested partition appears in the response, with an error code if need be;
- reading starts at the batch containing the fetch offset and stops at the high watermark (the last
  stable offset, equal to it without transactions, for read_committed);
- the first partition that has data returns at least one whole batch even beyond `max_bytes` (KIP-74),
  so a consumer always progresses; the response stays within `max_bytes` otherwise and each partition
  within its `partition_max_bytes`;
- with fewer than `min_bytes` available the request parks in the purgatory until an append to one of its
  partitions or `max_wait_ms` passes, then answers with what there is;
- session_id is always 0: Strom declines fetch sessions, which every client handles (P8).
"""

from __future__ import annotations

import asyncio
from typing import Any

from strom.broker.handlers.base import Body, RequestContext, handles
from strom.protocol.api import ApiKey
from strom.protocol.errors import ErrorCode, KafkaError

LEADER_EPOCH = 0
READ_COMMITTED = 1


def _empty(index: int, code: ErrorCode, hwm: int = -1, lso: int = -1, log_start: int = -1) -> dict[str, Any]:
    return {
        "partition_index": index,
        "error_code": int(code),
        "high_watermark": hwm,
        "last_stable_offset": lso,
        "log_start_offset": log_start,
        "aborted_transactions": None,
        "preferred_read_replica": -1,
        "records": b"",
    }


def _check_epoch(current_leader_epoch: int) -> None:
    if current_leader_epoch < 0 or current_leader_epoch == LEADER_EPOCH:
        return
    if current_leader_epoch < LEADER_EPOCH:
        raise KafkaError(ErrorCode.FENCED_LEADER_EPOCH)
    raise KafkaError(ErrorCode.UNKNOWN_LEADER_EPOCH)


def _read_all(ctx: RequestContext, req: Body) -> tuple[list[dict[str, Any]], int, bool]:
    """One pass over the requested partitions: (responses, bytes read, any error)."""
    broker = ctx.broker
    read_committed = int(req.get("isolation_level", 0)) == READ_COMMITTED
    remaining = max(int(req.get("max_bytes", 0x7FFFFFFF)), 0)
    total = 0
    errored = False
    responses = []
    for topic in req["topics"]:
        name = topic["topic"]
        parts = []
        for p in topic["partitions"]:
            index = int(p["partition"])
            try:
                _check_epoch(int(p.get("current_leader_epoch", -1)))
                plog = broker.partition_log(name, index)
                hwm = plog.high_watermark
                log_start = plog.log_start_offset
                limit = min(int(p["partition_max_bytes"]), remaining)
                data = plog.read(int(p["fetch_offset"]), max(limit, 0), hwm, min_one_batch=total == 0)
            except KafkaError as exc:
                errored = True
                parts.append(_empty(index, exc.code))
                continue
            total += len(data)
            remaining -= len(data)
            entry = _empty(index, ErrorCode.NONE, hwm, hwm, log_start)
            entry["records"] = data
            if read_committed:
                entry["aborted_transactions"] = []
            parts.append(entry)
        responses.append({"topic": name, "partitions": parts})
    return responses, total, errored


@handles(ApiKey.FETCH)
async def handle_fetch(ctx: RequestContext, req: Body) -> Body:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + max(int(req.get("max_wait_ms", 0)), 0) / 1000
    min_bytes = int(req.get("min_bytes", 0))
    keys = [(t["topic"], int(p["partition"])) for t in req["topics"] for p in t["partitions"]]
    while True:
        responses, total, errored = _read_all(ctx, req)
        if total >= min_bytes or errored or not keys:
            break
        if not await ctx.broker.purgatory.wait(keys, deadline - loop.time()):
            responses, _, _ = _read_all(ctx, req)
            break
    return {"throttle_time_ms": 0, "error_code": 0, "session_id": 0, "responses": responses}
